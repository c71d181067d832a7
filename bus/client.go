package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine"
)

// ErrBadProposal means a proposal cannot even be addressed: it is not a
// JSON object with valid tenant, id and action tokens. gated itself never
// sees it.
var ErrBadProposal = errors.New("proposal cannot be addressed")

// ErrNoVerdict means no verdict arrived before the context ended.
var ErrNoVerdict = errors.New("no verdict before the deadline")

// ErrIDReused means the id was already used by a different proposal of the
// same tenant. The stream drops the new one as a duplicate, so it was
// never decided: choose a new id.
var ErrIDReused = errors.New("proposal id already used by a different proposal")

// Client is the fleet side: it publishes proposals and waits for their
// verdicts. It is safe for concurrent use.
type Client struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// NewClient wraps a connection.
func NewClient(nc *nats.Conn) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Client{nc: nc, js: js}, nil
}

// Address is what a proposal must carry to be published: its tenant, id
// and action tokens.
type Address struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Action string `json:"action"`
}

// AddressOf reads the address of a raw proposal. It checks only what
// publishing needs; gated validates the rest and answers invalid.
func AddressOf(data []byte) (Address, error) {
	var a Address
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("%w: %v", ErrBadProposal, err)
	}
	switch {
	case !engine.ValidTenant(a.Tenant):
		return a, fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrBadProposal, a.Tenant)
	case !engine.ValidID(a.ID):
		return a, fmt.Errorf("%w: id %q must match [A-Za-z0-9_-]{1,128}", ErrBadProposal, a.ID)
	case !engine.ValidAction(a.Action):
		return a, fmt.Errorf("%w: action %q must match [A-Za-z0-9_-]{1,128}", ErrBadProposal, a.Action)
	}
	return a, nil
}

// Propose publishes a raw proposal and waits for its verdict until ctx
// ends. It subscribes to the verdict subject before publishing, and when
// the stream reports the proposal as a duplicate of one already sent, it
// reads the stored verdict instead of waiting for a new one.
func (c *Client) Propose(ctx context.Context, data []byte) (*engine.Verdict, error) {
	a, err := AddressOf(data)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
	}
	ch := make(chan *nats.Msg, 1)
	sub, err := c.nc.ChanSubscribe(VerdictSubject(a.Tenant, a.ID), ch)
	if err != nil {
		return nil, fmt.Errorf("subscribing to verdicts: %w", err)
	}
	defer sub.Unsubscribe()
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return nil, fmt.Errorf("subscribing to verdicts: %w", err)
	}

	msg := nats.NewMsg(engine.ProposalSubjectPrefix + a.Tenant + "." + a.Action)
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, a.Tenant+"."+a.ID)
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	// answer accepts only a verdict for exactly these bytes: an earlier
	// proposal's verdict under the same id, or a message that merely claims
	// to be a verdict, is not this proposal's answer.
	answer := func(v *engine.Verdict) (*engine.Verdict, error) {
		if v.Tenant != a.Tenant || v.ProposalID != a.ID {
			return nil, fmt.Errorf("verdict names %s.%s, want %s.%s", v.Tenant, v.ProposalID, a.Tenant, a.ID)
		}
		if v.ProposalSHA256 != "" && v.ProposalSHA256 != digest {
			return nil, fmt.Errorf("%w: %s.%s", ErrIDReused, a.Tenant, a.ID)
		}
		return v, nil
	}
	ack, err := c.js.PublishMsg(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("publishing proposal %s.%s: %w", a.Tenant, a.ID, err)
	}
	if ack.Duplicate {
		if v, err := c.Verdict(ctx, a.Tenant, a.ID); err == nil {
			return answer(v)
		}
	}
	// Poll the bucket now and then as well: a verdict published while a
	// duplicate was in flight would otherwise be missed.
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
	for {
		select {
		case m := <-ch:
			var v engine.Verdict
			if err := json.Unmarshal(m.Data, &v); err != nil {
				return nil, fmt.Errorf("decoding verdict on %s: %w", m.Subject, err)
			}
			return answer(&v)
		case <-poll.C:
			if !ack.Duplicate {
				continue
			}
			if v, err := c.Verdict(ctx, a.Tenant, a.ID); err == nil {
				return answer(v)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: proposal %s.%s: %v", ErrNoVerdict, a.Tenant, a.ID, ctx.Err())
		}
	}
}

// Verdict looks up a stored verdict; it returns engine.ErrNotFound when
// there is none.
func (c *Client) Verdict(ctx context.Context, tenant, id string) (*engine.Verdict, error) {
	kv, err := c.js.KeyValue(ctx, VerdictBucket)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", VerdictBucket, err)
	}
	return NewVerdictStore(kv).Get(ctx, tenant, id)
}
