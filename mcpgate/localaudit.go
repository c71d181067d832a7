package mcpgate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gated/gated"
)

// LocalReporter sends a batch of the gate's local decisions to gated,
// which records them (fleet.Grants.ReportLocal).
type LocalReporter interface {
	ReportLocal(ctx context.Context, b gated.LocalBatch) error
}

const (
	// localQueue bounds the local decisions waiting to be sent: a call
	// never waits for the audit path; one that finds the queue full is
	// counted and logged as lost.
	localQueue = 8192
	// localLinger is how long a decision waits for others to share its
	// batch.
	localLinger = 20 * time.Millisecond
	// localAttempts bounds the sends of one batch.
	localAttempts = 4
)

// localRecorder sends the gate's local decisions to gated in batches,
// beside the calls: a call enqueues its decision and goes on.
type localRecorder struct {
	tenant string
	report LocalReporter
	log    *zap.Logger
	q      chan gated.LocalDecision
	lost   atomic.Uint64
	done   chan struct{}
}

func newLocalRecorder(ctx context.Context, tenant string, report LocalReporter, log *zap.Logger) *localRecorder {
	r := &localRecorder{tenant: tenant, report: report, log: log, q: make(chan gated.LocalDecision, localQueue), done: make(chan struct{})}
	go r.run(ctx)
	return r
}

// add queues d, or counts it lost when the queue is full.
func (r *localRecorder) add(d gated.LocalDecision) {
	select {
	case r.q <- d:
	default:
		r.lose(1, "the queue of local decisions is full")
	}
}

// run sends batches until ctx ends, then what is queued, and closes done.
func (r *localRecorder) run(ctx context.Context) {
	defer close(r.done)
	var batch []gated.LocalDecision
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case d := <-r.q:
			if len(batch) == 0 {
				timer.Reset(localLinger)
			}
			if batch = append(batch, d); len(batch) == gated.MaxLocalDecisions {
				timer.Stop()
				r.send(ctx, batch)
				batch = nil
			}
		case <-timer.C:
			r.send(ctx, batch)
			batch = nil
		case <-ctx.Done():
			for drained := false; !drained; {
				select {
				case d := <-r.q:
					if batch = append(batch, d); len(batch) == gated.MaxLocalDecisions {
						r.send(ctx, batch)
						batch = nil
					}
				default:
					drained = true
				}
			}
			r.send(ctx, batch)
			return
		}
	}
}

// send sends one batch, a few times if it must; a batch that cannot be
// sent is counted and logged as lost.
func (r *localRecorder) send(ctx context.Context, batch []gated.LocalDecision) {
	if len(batch) == 0 {
		return
	}
	if r.report == nil {
		r.lose(len(batch), "the gate has no way to report them to gated")
		return
	}
	b := gated.LocalBatch{V: gated.SchemaVersion, Tenant: r.tenant, Decisions: batch}
	var err error
	for attempt := range localAttempts {
		// A send outlives the gate's context by a few seconds, so that
		// the decisions of its last calls are sent when it stops.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = r.report.ReportLocal(sctx, b)
		cancel()
		if err == nil {
			return
		}
		if attempt < localAttempts-1 {
			time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
		}
	}
	r.lose(len(batch), err.Error())
}

func (r *localRecorder) lose(n int, why string) {
	total := r.lost.Add(uint64(n))
	r.log.Error("local decisions not recorded by gated", zap.Int("lost", n), zap.Uint64("lost_total", total), zap.String("reason", why))
}

// LocalLost is how many of the gate's local decisions were not sent to
// gated: the queue was full, or gated could not be reached.
func (g *Gate) LocalLost() uint64 { return g.local.lost.Load() }

// Drain waits, once the context New was given has ended, until the
// local decisions queued are sent to gated, or counted lost.
func (g *Gate) Drain() { <-g.local.done }

// decidedLocally records that the precheck approved call p (of MCP
// method, naming name, with the arguments the agent sent) with s, and
// returns the _meta["gated/verdict"] of its result.
func (g *Gate) decidedLocally(p *gated.Proposal, method, name string, args []byte, s gated.Settled) map[string]any {
	sum := sha256.Sum256(args)
	g.local.add(gated.LocalDecision{
		Action: p.Action, Agent: g.cfg.Agent, ArgumentsSHA256: hex.EncodeToString(sum[:]), At: time.Now().UTC(),
		Class: p.Class, ID: p.ID, Method: method, Name: name, Outcome: s.Outcome, PolicyRevision: g.cfg.PolicyRevision, Stage: s.Stage,
	})
	return map[string]any{
		"tenant":          p.Tenant,
		"proposal_id":     p.ID,
		"outcome":         string(s.Outcome),
		"stage":           string(s.Stage),
		"reason":          s.Reason,
		"decided":         "locally",
		"policy_revision": g.cfg.PolicyRevision,
		"audit":           "pending",
	}
}
