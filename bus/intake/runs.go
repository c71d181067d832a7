package intake

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine/wire"
)

// FollowUps publishes the follow-ups of run verdicts, continuations and
// escalations, into the run stream: once per run and round, however often
// the verdict is replayed. The worker sends one for every verdict it
// publishes, and so does the operator endpoint for a verdict it replaces.
// It is safe for concurrent use.
type FollowUps struct {
	js       jetstream.JetStream
	verdicts *store.Verdicts
}

// NewFollowUps builds a publisher that publishes on js and keeps track of
// what it sent in the run records of verdicts.
func NewFollowUps(js jetstream.JetStream, verdicts *store.Verdicts) *FollowUps {
	return &FollowUps{js: js, verdicts: verdicts}
}

// Send publishes the follow-up of v, a stored verdict, and waits until the
// run stream has stored it. Call it before v is published and its
// proposal acknowledged: an error means the follow-up may not be stored,
// and the delivery must be retried; the retry replays v and calls Send
// again.
//
// Send publishes only what gated.FollowUp builds from v, and only when
// the run record holds v's round for v's proposal, with v's follow-up,
// not yet marked sent; then it marks the round sent. A verdict without a
// follow-up, a round another proposal of the run decided, and a follow-up
// sent already send nothing and return nil. A round missing from the
// record (its gated died between storing v and recording the round) is
// recorded first, as store.Verdicts.Create would have.
//
// A crash between publishing and marking the round sent has the follow-up
// published again on the replay: the stream drops it as a duplicate by
// its Nats-Msg-Id when the replay comes within RunsDuplicateWindow.
func (p *FollowUps) Send(ctx context.Context, v *gated.Verdict) error {
	subject, msgID, body, ok := gated.FollowUp(v)
	if !ok {
		return nil
	}
	round, err := p.verdicts.PendingRound(ctx, v)
	if err != nil {
		return err
	}
	if round == nil {
		return nil
	}
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	if _, err := p.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(wire.RunsStream)); err != nil {
		return fmt.Errorf("publishing the %s of round %d of run %s.%s: %w", v.Run.Next, v.Run.Round, v.Tenant, v.Run.RunID, err)
	}
	return p.verdicts.MarkSent(ctx, v)
}
