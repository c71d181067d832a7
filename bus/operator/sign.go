package operator

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine/wire"
)

// Sign encodes msg and signs the encoding with the nkey
// user seed (an "SU…" seed, as `gated operator keygen` writes it; a
// surrounding creds-file decoration is accepted). It sets V when zero and
// SignedAt to now when zero. The body is checked as gated will check it,
// so a malformed decision fails here (with a *Refusal, code
// 400) rather than on the wire. hdr carries wire.OperatorKeyHeader and
// wire.OperatorSigHeader; send body and hdr unchanged, as one message.
func Sign(seed []byte, msg Message) (body []byte, hdr nats.Header, err error) {
	return signBody(seed, func() ([]byte, error) {
		if msg.V == 0 {
			msg.V = messageVersion
		}
		if msg.SignedAt.IsZero() {
			msg.SignedAt = time.Now()
		}
		msg.SignedAt = msg.SignedAt.UTC()
		body, err := json.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("encoding the operator message: %w", err)
		}
		if _, err := DecodeMessage(body); err != nil {
			return nil, err
		}
		return body, nil
	})
}

// signBody reads seed, has encode make the body, and signs it.
func signBody(seed []byte, encode func() ([]byte, error)) (body []byte, hdr nats.Header, err error) {
	kp, err := nkeys.ParseDecoratedUserNKey(seed)
	if err != nil {
		// The error never quotes the seed.
		return nil, nil, fmt.Errorf("reading the operator's nkey seed: want an nkey user seed (SU…): %w", err)
	}
	defer kp.Wipe()
	if body, err = encode(); err != nil {
		return nil, nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, nil, fmt.Errorf("deriving the operator's public key: %w", err)
	}
	sig, err := kp.Sign(body)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the operator message: %w", err)
	}
	hdr = nats.Header{}
	hdr.Set(wire.OperatorKeyHeader, pub)
	hdr.Set(wire.OperatorSigHeader, base64.RawURLEncoding.EncodeToString(sig))
	return body, hdr, nil
}

// Send sends a signed operator decision (body and hdr
// from Sign) to gated.operator.<tenant>.<proposal_id> and
// returns the verdict that replaces the held one. Errors: a
// *Refusal (400 also when body does not decode; matching
// ErrRefused and the sentinel of its code),
// fleet.ErrServiceUnavailable when no gated serves the endpoint (started
// without --operators), or a NATS error such as a context deadline. When
// ctx has no deadline it waits fleet.DefaultWait for the reply.
func Send(ctx context.Context, nc *nats.Conn, body []byte, hdr nats.Header) (*gated.Verdict, error) {
	m, err := DecodeMessage(body)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fleet.DefaultWait)
		defer cancel()
	}
	subject := wire.OperatorSubject(m.Tenant, m.ProposalID)
	req := &nats.Msg{Subject: subject, Data: body, Header: hdr}
	reply, err := nc.RequestMsgWithContext(ctx, req)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w: nothing answers %s: is gated running with --operators?", fleet.ErrServiceUnavailable, subject)
	}
	if err != nil {
		return nil, fmt.Errorf("sending the operator decision on %s: %w", subject, err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		r := &Refusal{Reason: reply.Header.Get(micro.ErrorHeader)}
		if _, err := fmt.Sscanf(code, "%d", &r.Code); err != nil {
			r.Code = 500
		}
		return nil, r
	}
	var v gated.Verdict
	if err := json.Unmarshal(reply.Data, &v); err != nil {
		return nil, fmt.Errorf("decoding the reply on %s: %w", subject, err)
	}
	if v.Tenant != m.Tenant || v.ProposalID != m.ProposalID {
		return nil, fmt.Errorf("the reply on %s is the verdict of %s.%s", subject, v.Tenant, v.ProposalID)
	}
	return &v, nil
}
