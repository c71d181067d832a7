package policies

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

func TestPoolDecidesAsTheEvaluator(t *testing.T) {
	e := mustEvaluator(t)
	pool := NewPool(e, 2)
	defer pool.Close()
	if pool.Revision() != e.Revision() {
		t.Fatalf("pool revision %q, want the evaluator's %q", pool.Revision(), e.Revision())
	}
	read := writeProposal()
	read.Class, read.Action = gated.ClassRead, "host_list_services"
	forced := writeProposal()
	forced.Flags.ForceApprove = true
	var wg sync.WaitGroup
	for i := range 32 {
		p := []*gated.Proposal{writeProposal(), read, forced}[i%3]
		wg.Go(func() {
			in := engine.PolicyInput{Proposal: p, Persona: reviewerPersona}
			want, err := e.Evaluate(t.Context(), in)
			if err != nil {
				t.Error(err)
				return
			}
			got, err := pool.Evaluate(t.Context(), in)
			if err != nil {
				t.Error(err)
				return
			}
			got.Eval, want.Eval = 0, 0
			if !reflect.DeepEqual(got, want) {
				t.Errorf("proposal %s: pooled decision %+v, want %+v", p.Action, got, want)
			}
		})
	}
	wg.Wait()
}

// gatePolicy holds every evaluation until release is closed, and counts
// how many run at once.
type gatePolicy struct {
	release      chan struct{}
	running, max atomic.Int32
	started      chan struct{}
}

func (g *gatePolicy) Evaluate(ctx context.Context, _ engine.PolicyInput) (engine.PolicyDecision, error) {
	n := g.running.Add(1)
	for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
	}
	g.started <- struct{}{}
	<-g.release
	g.running.Add(-1)
	return engine.PolicyDecision{Revision: "gate"}, nil
}

func (g *gatePolicy) Revision() string { return "gate" }

func TestPoolRunsOnItsOwnGoroutines(t *testing.T) {
	g := &gatePolicy{release: make(chan struct{}), started: make(chan struct{}, 8)}
	pool := NewPool(g, 2)
	defer pool.Close()
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if d, err := pool.Evaluate(t.Context(), engine.PolicyInput{}); err != nil || d.Revision != "gate" {
				t.Errorf("decision %+v, %v", d, err)
			}
		})
	}
	<-g.started
	<-g.started
	// Two goroutines are busy: a third caller waits for one instead of
	// evaluating on its own goroutine. It gives up when its context ends.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := pool.Evaluate(ctx, engine.PolicyInput{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting for a busy pool with a cancelled context: err = %v, want context.Canceled", err)
	}
	close(g.release)
	wg.Wait()
	if m := g.max.Load(); m != 2 {
		t.Fatalf("%d evaluations ran at once on a pool of 2", m)
	}
}

func TestPoolAfterClose(t *testing.T) {
	e := mustEvaluator(t)
	pool := NewPool(e, 0)
	pool.Close()
	pool.Close() // idempotent
	d, err := pool.Evaluate(t.Context(), engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona})
	if err != nil || !d.Review.Required {
		t.Fatalf("evaluation after Close: %+v, %v; want the evaluator's decision", d, err)
	}
}
