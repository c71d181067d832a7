package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/engine"
)

// MaxDeliveriesAdvisory is where JetStream announces that it stopped
// delivering a proposal to the gated consumer after MaxDeliver deliveries.
const MaxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + ProposalsStream + "." + ConsumerName

// AbandonedQueue is the queue group of the advisory subscription: one
// gated of those sharing the consumer answers each abandoned proposal.
const AbandonedQueue = "gated"

// maxDeliveriesAdvisory is the part of JetStream's
// io.nats.jetstream.advisory.v1.max_deliver advisory gated reads.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// watchAbandoned answers the proposals JetStream gives up on: every
// delivery crashed, stalled or was returned, so no verdict may ever be
// published and the proposer would wait forever. JetStream says so in an
// advisory, sent only while someone listens: on a redelivery due after
// the last one, which a pulling gated asks for, or (MaxDeliver 1) when the
// only delivery's ack wait runs out. Start subscribes before it pulls, and
// Stop unsubscribes after it stopped pulling.
func (w *Worker) watchAbandoned() error {
	sub, err := w.nc.QueueSubscribe(MaxDeliveriesAdvisory, AbandonedQueue, w.onMaxDeliveries)
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", MaxDeliveriesAdvisory, err)
	}
	w.advisories = sub
	return nil
}

// stopAbandoned unsubscribes from the advisories and waits for the answer
// being given, if any; none starts afterwards.
func (w *Worker) stopAbandoned() {
	w.abandonedMu.Lock()
	w.abandonedOff = true
	w.abandonedMu.Unlock()
	if w.advisories != nil {
		_ = w.advisories.Unsubscribe()
	}
}

func (w *Worker) onMaxDeliveries(m *nats.Msg) {
	// One answer at a time: abandoned proposals are rare, and Stop waits
	// for the one under way by taking the lock.
	w.abandonedMu.Lock()
	defer w.abandonedMu.Unlock()
	if w.abandonedOff {
		return
	}
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
		w.log.Warn("unreadable max deliveries advisory", zap.ByteString("advisory", m.Data), zap.Error(err))
		return
	}
	if adv.Stream != ProposalsStream || adv.Consumer != ConsumerName {
		return
	}
	if err := w.answerAbandoned(adv.StreamSeq, int(adv.Deliveries)); err != nil {
		// The message stays in the stream, unanswered; say so loudly.
		w.log.Error("answering an abandoned proposal", zap.Uint64("stream_seq", adv.StreamSeq), zap.Error(err))
	}
}

// answerAbandoned gives the abandoned proposal at stream sequence seq its
// error verdict (or the verdict stored earlier), publishes it, and only
// then removes the message from the work queue.
func (w *Worker) answerAbandoned(seq uint64, deliveries int) error {
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	m, err := w.res.Proposals.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // answered and acknowledged meanwhile
	}
	if err != nil {
		return fmt.Errorf("reading %s at %d: %w", ProposalsStream, seq, err)
	}
	d := engine.Delivery{
		Subject: m.Subject, Data: m.Data, MsgID: m.Header.Get(jetstream.MsgIDHeader),
		Attempt: deliveries, StreamSeq: seq, Trail: w.trails(),
	}
	w.log.Warn("JetStream stopped delivering a proposal; answering it",
		zap.String("subject", m.Subject), zap.Uint64("stream_seq", seq), zap.Int("deliveries", deliveries))
	v := w.decider.GiveUp(ctx, d, errors.New("no delivery was acknowledged (gated crashed or stalled on each)"))
	if v.ProposalID != "" {
		if err := w.publishVerdict(v); err != nil {
			return fmt.Errorf("publishing verdict %s.%s: %w", v.Tenant, v.ProposalID, err)
		}
	}
	if err := w.res.Proposals.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("removing answered proposal %d from %s: %w", seq, ProposalsStream, err)
	}
	return nil
}
