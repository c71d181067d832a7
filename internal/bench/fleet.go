package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// replies hands each message on a wildcard subscription to the one
// sender waiting for its subject: one subscription for the whole fleet,
// as a fleet with many agents in one process would have it, instead of
// one per proposal.
type replies struct {
	prefix  string
	mu      sync.Mutex
	waiting map[string]chan reply
	sub     *nats.Subscription
}

// reply is an answer and when it came; sent is when its request went
// out.
type reply struct {
	data []byte
	sent time.Time
	at   time.Time
}

func newReplies(nc *nats.Conn, prefix string) (*replies, error) {
	r := &replies{prefix: prefix, waiting: map[string]chan reply{}}
	sub, err := nc.Subscribe(prefix+">", func(m *nats.Msg) {
		at := time.Now()
		key := strings.TrimPrefix(m.Subject, prefix)
		r.mu.Lock()
		ch := r.waiting[key]
		delete(r.waiting, key)
		r.mu.Unlock()
		if ch != nil {
			ch <- reply{data: m.Data, at: at}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s>: %w", prefix, err)
	}
	// No answer may be dropped because the fleet fell behind.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		return nil, fmt.Errorf("subscribing to %s>: %w", prefix, err)
	}
	r.sub = sub
	return r, nil
}

func (r *replies) expect(key string) chan reply {
	ch := make(chan reply, 1)
	r.mu.Lock()
	r.waiting[key] = ch
	r.mu.Unlock()
	return ch
}

func (r *replies) forget(key string) {
	r.mu.Lock()
	delete(r.waiting, key)
	r.mu.Unlock()
}

func (r *replies) close() { _ = r.sub.Unsubscribe() }

// publishAndWait publishes msg to JetStream, and waits for the stream's
// acknowledgement and for the answer under key, at most timeout.
func publishAndWait(ctx context.Context, js jetstream.JetStream, r *replies, key string, msg *nats.Msg, timeout time.Duration) (reply, error) {
	ch := r.expect(key)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sent := time.Now()
	ack, err := js.PublishMsgAsync(msg)
	if err != nil {
		r.forget(key)
		return reply{}, fmt.Errorf("publishing %s: %w", msg.Subject, err)
	}
	// The answer may come before the acknowledgement; both are needed.
	var answer reply
	acked, answered := false, false
	for !acked || !answered {
		select {
		case answer = <-ch:
			answered = true
		case <-okOf(ack, acked):
			acked = true
		case err := <-errOf(ack, acked):
			r.forget(key)
			return reply{}, fmt.Errorf("publishing %s: %w", msg.Subject, err)
		case <-ctx.Done():
			r.forget(key)
			if acked {
				return reply{}, fmt.Errorf("no answer to %s within %s", msg.Subject, timeout)
			}
			return reply{}, fmt.Errorf("publishing %s: no acknowledgement within %s", msg.Subject, timeout)
		}
	}
	answer.sent = sent
	return answer, nil
}

// okOf and errOf are the channels of a pending acknowledgement, or nil
// (which never fires) once it was received.
func okOf(ack jetstream.PubAckFuture, done bool) <-chan *jetstream.PubAck {
	if done {
		return nil
	}
	return ack.Ok()
}

func errOf(ack jetstream.PubAckFuture, done bool) <-chan error {
	if done {
		return nil
	}
	return ack.Err()
}

// GatedFleet sends proposals to gated and waits for their verdicts.
type GatedFleet struct {
	// SameClock says gated runs on this host, so that the stage times
	// that compare its clock with this process's are measured
	// (StageTimes).
	SameClock bool

	js      jetstream.JetStream
	gen     Proposals
	tenant  string
	timeout time.Duration
	bodies  map[Path][][]byte
	ids     map[Path][]string
	actions map[Path]string
	replies *replies
}

// NewGatedFleet builds the fleet and marshals every proposal of the plan
// ahead of time, so the measurement does not include the fleet's own JSON
// encoding.
func NewGatedFleet(nc *nats.Conn, gen Proposals, counts map[Path]int, timeout time.Duration) (*GatedFleet, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		return nil, err
	}
	f := &GatedFleet{js: js, gen: gen, tenant: gen.Tenant, timeout: timeout,
		bodies: map[Path][][]byte{}, ids: map[Path][]string{}, actions: map[Path]string{}}
	for p, n := range counts {
		for i := range n {
			pr := gen.New(p, i)
			body, err := json.Marshal(pr)
			if err != nil {
				return nil, err
			}
			f.bodies[p] = append(f.bodies[p], body)
			f.ids[p] = append(f.ids[p], pr.ID)
			f.actions[p] = pr.Action
		}
	}
	if f.replies, err = newReplies(nc, wire.VerdictSubjectPrefix+gen.Tenant+"."); err != nil {
		return nil, err
	}
	return f, nil
}

// Close ends the fleet's subscription.
func (f *GatedFleet) Close() { f.replies.close() }

// BodySize is the mean proposal size of a path, in bytes.
func (f *GatedFleet) BodySize(p Path) int {
	if len(f.bodies[p]) == 0 {
		return 0
	}
	n := 0
	for _, b := range f.bodies[p] {
		n += len(b)
	}
	return n / len(f.bodies[p])
}

// Send is the fleet's Sender for the proposals prepared by NewGatedFleet.
func (f *GatedFleet) Send(ctx context.Context, p Path, i int) (Answer, error) {
	if i >= len(f.bodies[p]) {
		return Answer{}, fmt.Errorf("proposal %d of path %s was not prepared", i, p)
	}
	return f.send(ctx, p, f.ids[p][i], f.actions[p], f.bodies[p][i])
}

// SendNew is a Sender that builds each proposal as it goes.
func (f *GatedFleet) SendNew(ctx context.Context, p Path, i int) (Answer, error) {
	pr := f.gen.New(p, i)
	body, err := json.Marshal(pr)
	if err != nil {
		return Answer{}, err
	}
	return f.send(ctx, p, pr.ID, pr.Action, body)
}

func (f *GatedFleet) send(ctx context.Context, p Path, id, action string, body []byte) (Answer, error) {
	msg := nats.NewMsg(wire.ProposalSubjectPrefix + f.tenant + "." + action)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, f.tenant+"."+id)
	r, err := publishAndWait(ctx, f.js, f.replies, id, msg, f.timeout)
	if err != nil {
		return Answer{}, err
	}
	a := Answer{Size: len(r.data)}
	v, err := checkVerdict(p, id, r.data)
	if err != nil {
		return a, err
	}
	a.Stages = stageTimes(r, v.DecidedAt, v.LatencyMS, f.SameClock)
	return a, nil
}

// verdictHead is what the bench reads of a verdict.
type verdictHead struct {
	ID        string        `json:"proposal_id"`
	Outcome   gated.Outcome `json:"outcome"`
	Stage     gated.Stage   `json:"stage"`
	Reason    string        `json:"reason"`
	DecidedAt time.Time     `json:"decided_at"`
	LatencyMS float64       `json:"latency_ms"`
	Reviews   []struct {
		Plugin string `json:"plugin"`
	} `json:"reviews"`
}

// checkVerdict reads the verdict of proposal id on path p and returns an
// UnexpectedError unless it is the path's: its outcome and stage, and
// reviews by the path's reviewer plugins and no other.
func checkVerdict(p Path, id string, data []byte) (verdictHead, error) {
	var v verdictHead
	if err := json.Unmarshal(data, &v); err != nil {
		return v, &UnexpectedError{ID: id, Reason: "the verdict is not JSON: " + err.Error()}
	}
	outcome, stage := p.Expect()
	if v.ID != id || v.Outcome != outcome || v.Stage != stage {
		return v, &UnexpectedError{ID: id, Outcome: v.Outcome, Stage: v.Stage, Reason: v.Reason}
	}
	plugins := make([]string, len(v.Reviews))
	for i, rv := range v.Reviews {
		plugins[i] = rv.Plugin
	}
	if want := p.Reviewers(); !slices.Equal(plugins, want) {
		return v, &UnexpectedError{ID: id, Outcome: v.Outcome, Stage: v.Stage,
			Reason: fmt.Sprintf("reviewed by plugins %q, where the %s path is reviewed by %q alone (see docs/BENCHMARKS.md)", plugins, p, want)}
	}
	return v, nil
}

// stageTimes splits the wait for reply r at the verdict's decision,
// decided at decided after latencyMS of deciding (the verdict's own
// figures). Without the same clock only the deciding is known. Times the
// two clocks' rounding would make negative count as zero.
func stageTimes(r reply, decided time.Time, latencyMS float64, sameClock bool) *StageTimes {
	if decided.IsZero() || latencyMS < 0 {
		return nil
	}
	deciding := time.Duration(latencyMS * float64(time.Millisecond))
	st := &StageTimes{Deciding: deciding, SameClock: sameClock}
	if sameClock {
		st.ToGated = max(decided.Add(-deciding).Sub(r.sent), 0)
		st.AfterDeciding = max(r.at.Sub(decided), 0)
	}
	return st
}

// UnexpectedError is a verdict other than the one the path expects.
type UnexpectedError struct {
	ID      string
	Outcome gated.Outcome
	Stage   gated.Stage
	Reason  string
}

func (e *UnexpectedError) Error() string {
	return fmt.Sprintf("proposal %s got %s at stage %s: %s", e.ID, e.Outcome, e.Stage, e.Reason)
}

// unexpected tells an answer that was not the expected one from no
// answer at all.
func unexpected(err error) bool {
	var u *UnexpectedError
	return errors.As(err, &u)
}
