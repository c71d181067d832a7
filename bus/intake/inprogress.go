package intake

import (
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// keepAlive tells JetStream that the proposals being worked on still
// are, so that a long review is not redelivered to another gated mid-way:
// it sends an in-progress ack for each message every third of the ack
// wait, looking every sixth. One goroutine does it for every message.
func (w *Worker) keepAlive() {
	every := w.ackWait / 3
	t := time.NewTicker(every / 2)
	defer t.Stop()
	var due []jetstream.Msg
	for {
		select {
		case <-t.C:
		case <-w.alive.closed:
			return
		}
		due = w.alive.due(time.Now(), every, due[:0])
		for _, msg := range due {
			if err := msg.InProgress(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				w.log.Debug("in-progress ack", zap.Error(err))
			}
		}
		clear(due)
	}
}

// inProgress is the set of messages being worked on, with when each was
// last acknowledged as in progress (or arrived).
type inProgress struct {
	mu     sync.Mutex
	msgs   map[jetstream.Msg]time.Time
	closed chan struct{}
	once   sync.Once
}

func newInProgress() *inProgress {
	return &inProgress{msgs: make(map[jetstream.Msg]time.Time), closed: make(chan struct{})}
}

func (p *inProgress) add(msg jetstream.Msg) {
	now := time.Now()
	p.mu.Lock()
	p.msgs[msg] = now
	p.mu.Unlock()
}

func (p *inProgress) remove(msg jetstream.Msg) {
	p.mu.Lock()
	delete(p.msgs, msg)
	p.mu.Unlock()
}

// due appends to into the messages last kept alive every or longer ago,
// and counts them as kept alive now.
func (p *inProgress) due(now time.Time, every time.Duration, into []jetstream.Msg) []jetstream.Msg {
	p.mu.Lock()
	defer p.mu.Unlock()
	for msg, last := range p.msgs {
		if now.Sub(last) >= every {
			into = append(into, msg)
			p.msgs[msg] = now
		}
	}
	return into
}

func (p *inProgress) close() { p.once.Do(func() { close(p.closed) }) }
