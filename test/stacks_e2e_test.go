package test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/bench"
)

// TestReviewsInFlightKeepSmallStacks holds reviews at a model that does
// not answer and reads, from serve's own runtime metrics (as gated-bench
// reads them, bench.GoRuntimeOf), the goroutine
// stack each review in flight keeps in gated. A review waiting on its
// plugin keeps the frames under it (the worker's, the engine's decision,
// reviewOne, the plugin route's, gRPC's): while they fit in 16 KB a
// review keeps a 16 KB stack, and past it 32 KB, which at the thousands of
// reviews in flight a slow model keeps is tens of megabytes more. The
// bound sits between the two sizes.
func TestReviewsInFlightKeepSmallStacks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gated and its plugin processes")
	}
	const reviews = 300
	llm, err := bench.ServeLLM("127.0.0.1:0", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	g, err := bench.StartGated(ctx, bench.GatedOptions{
		Exe: gatedBin, Dir: t.TempDir(), LLMBaseURL: llm.BaseURL(),
		Args: []string{"--http", httpAddr, "--budgets", unlimitedBudgets(t), "--llm-max-concurrency", "1024"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The model lets its calls go first, so that the reviews end before
	// gated is stopped.
	t.Cleanup(func() { _ = g.Stop(10 * time.Second) })
	t.Cleanup(func() { _ = llm.Close() })

	js := connectJS(t, g.URL)
	readRuntime := bench.GoRuntimeOf(httpAddr)
	before, err := readRuntime()
	if err != nil {
		t.Fatal(err)
	}
	gen := bench.Proposals{Tenant: "acme", Nonce: "stacks"}
	for i := range reviews {
		p := gen.New(bench.PathLLM, i)
		body, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(wire.ProposalSubjectPrefix + p.Tenant + "." + p.Action)
		msg.Data = body
		msg.Header.Set(jetstream.MsgIDHeader, p.Tenant+"."+p.ID)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	for llm.Arrived() < reviews {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d reviews reached the model before %v; the end of gated's log:\n%s",
				llm.Arrived(), reviews, ctx.Err(), logEnd(g.Log))
		case <-time.After(50 * time.Millisecond):
		}
	}
	during, err := readRuntime()
	if err != nil {
		t.Fatal(err)
	}
	goroutines := during.Goroutines - before.Goroutines
	if goroutines < reviews {
		t.Fatalf("%d goroutines more with %d reviews in flight (%+v, then %+v): each review waits on one", goroutines, reviews, before, during)
	}
	perReview := (during.StackBytes - before.StackBytes) / goroutines
	t.Logf("%d reviews in flight: %d goroutines and %d KB of stacks more, %d bytes a goroutine",
		reviews, goroutines, (during.StackBytes-before.StackBytes)>>10, perReview)
	if perReview > 24<<10 {
		t.Errorf("each goroutine gated added for a review in flight keeps %d bytes of stack, want at most %d: "+
			"the frames under a review waiting on its plugin grew past 16 KB", perReview, 24<<10)
	}
}

// logEnd is the last few KB of the log at path.
func logEnd(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b[max(0, len(b)-4096):])
}
