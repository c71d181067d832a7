package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/strictjson"
)

// DecodeContinuation decodes a continuation strictly: one JSON object
// with no field unknown to schema version gated.SchemaVersion, valid
// tenant and run id tokens, a round of at least 2 (the round after a
// reviewed one) within max_rounds, and a link to the verdict of the
// review it follows. Field names are matched as encoding/json does (case
// folded). Errors wrap ErrMalformedFollowUp.
func DecodeContinuation(data []byte) (*gated.Continuation, error) {
	var c gated.Continuation
	if err := decodeStrict(data, &c); err != nil {
		return nil, err
	}
	if err := checkFollowUp(c.V, c.Tenant, c.RunID, c.Review); err != nil {
		return nil, err
	}
	switch {
	case c.Round < 2:
		return nil, malformed("round %d: a continuation asks for the round after a reviewed one, at least 2", c.Round)
	case c.Round > c.MaxRounds:
		return nil, malformed("round %d is past max_rounds %d", c.Round, c.MaxRounds)
	case c.Review.Round != c.Round-1:
		return nil, malformed("review of round %d does not precede round %d", c.Review.Round, c.Round)
	}
	return &c, nil
}

// DecodeEscalation decodes an escalation strictly, as DecodeContinuation
// does a continuation: rounds must be at least 1 and the review must be
// of the last round. Errors wrap ErrMalformedFollowUp.
func DecodeEscalation(data []byte) (*gated.Escalation, error) {
	var e gated.Escalation
	if err := decodeStrict(data, &e); err != nil {
		return nil, err
	}
	if err := checkFollowUp(e.V, e.Tenant, e.RunID, e.Review); err != nil {
		return nil, err
	}
	switch {
	case e.Rounds < 1:
		return nil, malformed("rounds %d: an escalation follows at least one reviewed round", e.Rounds)
	case e.MaxRounds < 1:
		return nil, malformed("max_rounds %d must be at least 1", e.MaxRounds)
	case e.Review.Round != e.Rounds:
		return nil, malformed("review of round %d is not the last round %d", e.Review.Round, e.Rounds)
	}
	return &e, nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformedFollowUp, fmt.Sprintf(format, args...))
}

// decodeStrict decodes exactly one JSON object into v, refusing fields v
// does not have.
func decodeStrict(data []byte, v any) error {
	if err := strictjson.Decode(data, v); errors.Is(err, strictjson.ErrTrailingData) {
		return malformed("data after the JSON object")
	} else if err != nil {
		return malformed("%v", err)
	}
	return nil
}

func checkFollowUp(v int, tenant, runID string, review gated.ReviewLink) error {
	switch {
	case v != gated.SchemaVersion:
		return malformed("schema version %d, want %d", v, gated.SchemaVersion)
	case !gated.ValidTenant(tenant) || tenant == gated.UnknownTenant:
		return malformed("tenant %q must match [a-z0-9_-]{1,64}", tenant)
	case !gated.ValidID(runID):
		return malformed("run_id %q must match [A-Za-z0-9_-]{1,128}", runID)
	case !gated.ValidID(review.ProposalID):
		return malformed("review.proposal_id %q must match [A-Za-z0-9_-]{1,128}", review.ProposalID)
	case review.Verdict != wire.VerdictSubject(tenant, review.ProposalID):
		return malformed("review.verdict %q is not the verdict subject of %s.%s", review.Verdict, tenant, review.ProposalID)
	}
	return nil
}

// FollowUpMessage is a follow-up type: gated.Continuation or
// gated.Escalation.
type FollowUpMessage interface {
	gated.Continuation | gated.Escalation
}

// FollowUpFeed reads follow-ups from the run stream in the order they were
// stored, from the first one the stream still holds, and then waits for
// new ones. It is an ordered consumer: it needs no durable state, and
// picks up where it was after a reconnect. It is not safe for concurrent
// use; call Stop when done.
type FollowUpFeed[T FollowUpMessage] struct {
	msgs   jetstream.MessagesContext
	decode func(subject string, data []byte) (*T, error)
}

// Next returns the next follow-up, waiting until one is stored or ctx
// ends (then it returns ctx's error). A message that is not a well-formed
// follow-up for the feed's subject returns an error wrapping
// ErrMalformedFollowUp; the feed moves past it, so Next may be called
// again. Other errors come from JetStream.
func (f *FollowUpFeed[T]) Next(ctx context.Context) (*T, error) {
	m, err := f.msgs.Next(jetstream.NextContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("reading %s: %w", wire.RunsStream, err)
	}
	return f.decode(m.Subject(), m.Data())
}

// Stop ends the feed; Next then fails.
func (f *FollowUpFeed[T]) Stop() { f.msgs.Stop() }

// Continuations follows the continuations of one run: each asks the run's
// worker for the next round. Errors: ErrBadProposal when tenant or run id
// is not a valid token, or a JetStream error (no run stream, or the user
// may not create a consumer on it).
//
// The feed is an ordered consumer filtered to the run's subject; the
// rights a tenant's NATS user needs for it are in Client's list.
func (c *Client) Continuations(ctx context.Context, tenant, runID string) (*FollowUpFeed[gated.Continuation], error) {
	if !gated.ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrBadProposal, tenant)
	}
	if !gated.ValidID(runID) {
		return nil, fmt.Errorf("%w: run id %q must match [A-Za-z0-9_-]{1,128}", ErrBadProposal, runID)
	}
	subject := wire.ContinuationSubject(tenant, runID)
	return follow(ctx, c.js, subject, func(subj string, data []byte) (*gated.Continuation, error) {
		if subj != subject {
			return nil, malformed("message on %s in a feed of %s", subj, subject)
		}
		cont, err := DecodeContinuation(data)
		if err != nil {
			return nil, fmt.Errorf("continuation on %s: %w", subj, err)
		}
		if cont.Tenant != tenant || cont.RunID != runID {
			return nil, malformed("continuation on %s names run %s.%s", subj, cont.Tenant, cont.RunID)
		}
		return cont, nil
	})
}

// Escalations follows the escalations of a tenant's runs: each hands a run
// that used its last round to a human. Errors: ErrBadProposal when tenant
// is not a valid token, or a JetStream error.
// The rights a tenant's NATS user needs are in Client's list.
func (c *Client) Escalations(ctx context.Context, tenant string) (*FollowUpFeed[gated.Escalation], error) {
	if !gated.ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrBadProposal, tenant)
	}
	subject := wire.EscalationSubject(tenant)
	return follow(ctx, c.js, subject, func(subj string, data []byte) (*gated.Escalation, error) {
		if subj != subject {
			return nil, malformed("message on %s in a feed of %s", subj, subject)
		}
		esc, err := DecodeEscalation(data)
		if err != nil {
			return nil, fmt.Errorf("escalation on %s: %w", subj, err)
		}
		if esc.Tenant != tenant {
			return nil, malformed("escalation on %s names tenant %s", subj, esc.Tenant)
		}
		return esc, nil
	})
}

func follow[T FollowUpMessage](ctx context.Context, js jetstream.JetStream, subject string, decode func(string, []byte) (*T, error)) (*FollowUpFeed[T], error) {
	cons, err := js.OrderedConsumer(ctx, wire.RunsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("following %s: %w", subject, err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("following %s: %w", subject, err)
	}
	return &FollowUpFeed[T]{msgs: msgs, decode: decode}, nil
}
