package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// awaitPoll is how often AwaitDecision reads the stored verdict besides
// listening on the verdict subject.
const awaitPoll = 2 * time.Second

// AwaitDecision waits for the final verdict of a proposal whose verdict,
// held, is held for an operator (held.Final() is false), and returns it:
// approved or rejected by an operator's signed decision, or timeout at
// the hold's deadline. A held verdict is never an approval; act only on
// what this returns, after CheckVerdict. It listens on the verdict subject
// and reads the stored verdict (the only right it needs besides the
// subject is the direct get of Verdict), and an approval counts only when
// the stored verdict confirms it. A final held is returned as it is.
//
// ctx bounds the wait; without a deadline it waits until the hold's
// deadline and a minute more for an action held for an operator, else
// the client's default wait. Errors: ErrNoVerdict when ctx ends first,
// ErrIDReused when the key now holds another proposal's verdict, or a
// NATS error.
func (c *Client) AwaitDecision(ctx context.Context, held *gated.Verdict) (*gated.Verdict, error) {
	if held == nil {
		return nil, fmt.Errorf("%w: no held verdict to wait on", ErrBadProposal)
	}
	if held.Final() {
		return held, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		wait := c.opts.wait
		if h := held.AwaitingOperator; h != nil {
			wait = time.Until(h.Deadline) + time.Minute
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	a := Address{Tenant: held.Tenant, ID: held.ProposalID, Action: held.Action}
	digest := held.ProposalSHA256
	ch := make(chan *nats.Msg, 16)
	sub, err := c.nc.ChanSubscribe(wire.VerdictSubject(a.Tenant, a.ID), ch)
	if err != nil {
		return nil, fmt.Errorf("subscribing to verdicts: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return nil, fmt.Errorf("subscribing to verdicts: %w", err)
	}
	// The decision may have come before the subscription: look first.
	check := func() (*gated.Verdict, bool, error) {
		v, err := c.storedVerdict(ctx, a)
		if err != nil {
			return nil, false, nil // look again; the subject may answer first
		}
		v, err = answer(a, digest, v)
		if err != nil {
			return nil, false, err
		}
		return v, v.Final(), nil
	}
	poll := time.NewTicker(awaitPoll)
	defer poll.Stop()
	for {
		if v, final, err := check(); err != nil || final {
			return v, err
		}
		select {
		case m := <-ch:
			v, ok := verdictMessage(a, m.Data)
			if !ok || !v.Final() {
				continue
			}
			if v, err := c.confirm(ctx, a, digest, v); err == nil && v.Final() {
				return v, nil
			}
		case <-poll.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: proposal %s held for an operator: %v", ErrNoVerdict, a.Key(), ctx.Err())
		}
	}
}
