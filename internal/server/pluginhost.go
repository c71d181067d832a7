package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/policies"
)

// ToolConfig answers reviewers' tool calls: the SOP catalog and tool
// descriptions of the policy in force, and NATS requests for the rest.
func ToolConfig(nc *nats.Conn, live *policies.Live, timeout time.Duration) plugins.ToolConfig {
	return plugins.ToolConfig{
		CallTimeout: timeout,
		SOP: func(id string) (*gated.SOP, bool) {
			return live.Current().Catalog().SOP(id)
		},
		Describe: func(name string) (string, string, bool) {
			t, ok := live.Current().Catalog().Tool(name)
			return t.Description, string(t.InputSchema), ok
		},
		Forward: func(ctx context.Context, name string, req plugins.ToolRequest) ([]byte, error) {
			body, err := json.Marshal(req)
			if err != nil {
				return nil, err
			}
			subject := wire.ToolSubject(name)
			msg, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: body})
			switch {
			case errors.Is(err, nats.ErrNoResponders):
				return nil, fmt.Errorf("no service answers %s", subject)
			case err != nil:
				return nil, fmt.Errorf("requesting %s: %w", subject, err)
			}
			if why := msg.Header.Get(wire.ToolErrorHeader); why != "" {
				return nil, fmt.Errorf("%s answered an error: %s", subject, why)
			}
			return msg.Data, nil
		},
	}
}

// auditHostEvents records the plugin host's own events (a plugin started,
// refused, exited) in the audit stream, each on a trail of its own.
// Events are queued so the host never waits for the stream; the returned
// function drains the queue.
func auditHostEvents(host *plugins.Host, trails func() engine.AuditTrail, log *zap.Logger) (stop func()) {
	return auditCountedHostEvents(host, trails, nil, log)
}

// auditCountedHostEvents is auditHostEvents that also hands every event to
// count (nil: none), for metrics; count must not block.
func auditCountedHostEvents(host *plugins.Host, trails func() engine.AuditTrail, count func(gated.AuditEvent), log *zap.Logger) (stop func()) {
	queue := make(chan gated.AuditEvent, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range queue {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := trails().Seal(ctx, ev); err != nil {
				log.Error("auditing a plugin event", zap.String("event", ev.Event), zap.Error(err))
			}
			cancel()
		}
	}()
	var mu sync.Mutex
	closed := false
	host.SetEvents(func(ev gated.AuditEvent) {
		if count != nil {
			count(ev)
		}
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		select {
		case queue <- ev:
		default:
			log.Error("plugin event dropped: the audit queue is full", zap.String("event", ev.Event), zap.ByteString("data", ev.Data))
		}
	})
	return func() {
		host.Close()
		mu.Lock()
		closed = true
		close(queue)
		mu.Unlock()
		<-done
	}
}
