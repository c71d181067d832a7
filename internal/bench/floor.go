package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The floor is what the same traffic costs through bare JetStream, with
// no policy and no review: the fleet publishes each proposal to a work
// queue stream, a responder takes it from a durable consumer, appends a
// record to a log stream and waits for the append's acknowledgement,
// publishes a reply of a verdict's size, and acknowledges the message. It
// is gated's own sequence (consume, store the trail, answer, ack) with
// nothing decided, so gated/floor is what deciding costs.
const (
	floorIn       = "BENCH_FLOOR_IN"
	floorLog      = "BENCH_FLOOR_LOG"
	floorConsumer = "bench-floor"
	floorPrefix   = "bench.floor."
)

// FloorSizes are the message sizes the floor copies from gated's run, per
// path: the proposal, the reply (the verdict) and the log record (the
// audit trail of one proposal).
type FloorSizes struct {
	Proposal, Reply, Log int
}

// floorMsgs are one path's proposal, log record and reply.
type floorMsgs struct {
	proposal, log, reply []byte
}

// Floor is a running floor: its streams, its responder and its fleet.
type Floor struct {
	nc, rnc *nats.Conn
	js      jetstream.JetStream
	sizes   map[Path]FloorSizes
	cc      jetstream.ConsumeContext
	sem     chan struct{}
	wg      sync.WaitGroup
	replies *replies
	timeout time.Duration
	// msgs holds each path's messages, filled to the path's sizes.
	msgs     map[Path]floorMsgs
	nonce    string
	replicas int
	mu       sync.Mutex
	respErr  error
}

// FloorOptions configures a floor.
type FloorOptions struct {
	// Sizes per path. Paths missing here are not sent.
	Sizes map[Path]FloorSizes
	// InFlight bounds messages the responder works on at once (gated's
	// --max-in-flight); PullMax is how many the consumer fetches ahead.
	InFlight, PullMax int
	// Replicas of the two streams, as gated's.
	Replicas int
	// Timeout bounds the wait for one reply.
	Timeout time.Duration
	// Nonce makes the subjects of this run its own.
	Nonce string
}

// StartFloor creates the floor's streams (anew: any left from an earlier
// run are deleted first) and starts its responder on its own connection
// rnc, as gated has its own; nc is the fleet's connection.
func StartFloor(ctx context.Context, nc, rnc *nats.Conn, o FloorOptions) (*Floor, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		return nil, err
	}
	rjs, err := jetstream.New(rnc, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		return nil, err
	}
	f := &Floor{nc: nc, rnc: rnc, js: js, sizes: o.Sizes, sem: make(chan struct{}, max(o.InFlight, 1)),
		timeout: o.Timeout, msgs: map[Path]floorMsgs{}, nonce: o.Nonce, replicas: max(o.Replicas, 1)}
	for p, s := range o.Sizes {
		f.msgs[p] = floorMsgs{
			proposal: []byte(strings.Repeat("p", max(s.Proposal, 1))),
			log:      []byte(strings.Repeat("l", max(s.Log, 1))),
			reply:    []byte(strings.Repeat("r", max(s.Reply, 1))),
		}
	}
	if err := f.deleteStreams(ctx); err != nil {
		return nil, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: floorIn, Subjects: []string{floorPrefix + "in.>"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Replicas: f.replicas, Duplicates: 2 * time.Minute,
	}); err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", floorIn, err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: floorLog, Subjects: []string{floorPrefix + "log.>"}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, Replicas: f.replicas,
	}); err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", floorLog, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, floorIn, jetstream.ConsumerConfig{
		Durable: floorConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: 4 * max(o.InFlight, 1),
	}); err != nil {
		return nil, fmt.Errorf("creating consumer %s: %w", floorConsumer, err)
	}
	// The responder's consumer handle must use its own connection.
	rcons, err := rjs.Consumer(ctx, floorIn, floorConsumer)
	if err != nil {
		return nil, fmt.Errorf("binding consumer %s: %w", floorConsumer, err)
	}
	f.cc, err = rcons.Consume(func(m jetstream.Msg) {
		f.sem <- struct{}{}
		f.wg.Go(func() {
			defer func() { <-f.sem }()
			f.respond(rjs, m)
		})
	}, jetstream.PullMaxMessages(max(o.PullMax, 1)))
	if err != nil {
		return nil, fmt.Errorf("consuming %s: %w", floorIn, err)
	}
	if f.replies, err = newReplies(nc, floorPrefix+"out."+o.Nonce+"."); err != nil {
		return nil, err
	}
	return f, nil
}

// respond is the floor's whole work for one message.
func (f *Floor) respond(js jetstream.JetStream, m jetstream.Msg) {
	// Subject: bench.floor.in.<nonce>.<path>.<i>
	rest := strings.TrimPrefix(m.Subject(), floorPrefix+"in.")
	nonce, key, _ := strings.Cut(rest, ".")
	path, _, _ := strings.Cut(key, ".")
	p := Path(path)
	ack, err := js.PublishAsync(floorPrefix+"log."+key, f.msgs[p].log)
	if err == nil {
		select {
		case <-ack.Ok():
		case err = <-ack.Err():
		}
	}
	if err != nil {
		f.fail(err)
		_ = m.Nak()
		return
	}
	if err := f.rnc.Publish(floorPrefix+"out."+nonce+"."+key, f.msgs[p].reply); err != nil {
		f.fail(err)
		_ = m.Nak()
		return
	}
	_ = m.Ack()
}

func (f *Floor) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.respErr == nil {
		f.respErr = err
	}
}

// Send is the floor's Sender.
func (f *Floor) Send(ctx context.Context, p Path, i int) (Answer, error) {
	msgs, ok := f.msgs[p]
	if !ok {
		return Answer{}, fmt.Errorf("the floor has no size for path %s", p)
	}
	key := fmt.Sprintf("%s.%d", p, i)
	msg := nats.NewMsg(floorPrefix + "in." + f.nonce + "." + key)
	msg.Data = msgs.proposal
	msg.Header.Set(jetstream.MsgIDHeader, f.nonce+"."+key)
	r, err := publishAndWait(ctx, f.js, f.replies, key, msg, f.timeout)
	if err != nil {
		return Answer{}, err
	}
	return Answer{Size: len(r.data)}, nil
}

// Close stops the responder and deletes the floor's streams.
func (f *Floor) Close(ctx context.Context) error {
	if f.replies != nil {
		f.replies.close()
	}
	if f.cc != nil {
		f.cc.Stop()
		<-f.cc.Closed()
	}
	f.wg.Wait()
	err := f.deleteStreams(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.respErr, err)
}

func (f *Floor) deleteStreams(ctx context.Context) error {
	for _, name := range []string{floorIn, floorLog} {
		if err := f.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("deleting stream %s: %w", name, err)
		}
	}
	return nil
}
