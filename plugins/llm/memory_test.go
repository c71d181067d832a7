package llm_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/llm"
	"github.com/gated/gated/plugins/sdk"
)

// BenchmarkReviewsInFlight holds 2,000 reviews at once on a model that
// answers none until all have arrived, through a real host and the llm
// reviewer's own process, as gated-bench's sustained run does, and reports
// the reviewer process's resident set then: rss-MB in all, rss-B/review
// its growth per review in flight. Linux only (it reads /proc).
func BenchmarkReviewsInFlight(b *testing.B) {
	const n = 2000
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("needs /proc")
	}
	var arrived atomic.Int64
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "x", "object": "chat.completion", "model": "bench",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": approval}}},
			"usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 1},
		})
	})
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	p := &provider{srv: srv}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	sum, err := plugins.FileSHA256(exe)
	if err != nil {
		b.Fatal(err)
	}
	spec := plugins.Spec{Name: llm.Name, Path: exe, SHA256: sum, MaxConcurrency: n, Env: []string{
		helperEnv + "=1", llm.EnvOpenAIAPIKey + "=sk-bench", llm.EnvOpenAIBaseURL + "=" + p.baseURL(),
	}}
	h, err := plugins.NewHost(zap.NewNop(), llm.Name, spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	if err := h.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	reg, err := personas.Builtin()
	if err != nil {
		b.Fatal(err)
	}
	base, ok := reg.ByName("reviewer")
	if !ok {
		b.Fatal("no built-in reviewer persona")
	}
	persona := *base
	persona.Plugin, persona.Model, persona.MaxTurns = llm.Name, "openai/bench", 2
	persona.Tools = []string{sdk.ToolGetSOPText, "get_proposal"}
	r, err := h.Route(&persona)
	if err != nil {
		b.Fatal(err)
	}
	pid := 0
	for _, in := range h.Plugins() {
		pid = in.PID
	}
	rss := func() int64 {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				v, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
				return v << 10
			}
		}
		return 0
	}
	for range b.N {
		var wg sync.WaitGroup
		before := rss()
		for i := range n {
			wg.Go(func() {
				prop, raw := testProposal("nginx is wedged " + strconv.Itoa(i))
				prop.ID = "p-" + strconv.Itoa(i)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				res, err := r.Review(ctx, engine.ReviewRequest{
					ReviewID: "rv-" + strconv.Itoa(i), Proposal: prop, ProposalJSON: raw, Persona: &persona,
					Tools:    persona.Tools,
					SOP:      &gated.SOP{ID: "SOP-001", Title: "Restart a service", Actions: []string{"host_restart_service"}, Rollback: "start the previous unit again"},
					Deadline: time.Now().Add(2 * time.Minute),
					Audit:    func(context.Context, string, any) {},
				})
				if err != nil {
					b.Error(err)
					return
				}
				if _, ok, why := engine.Judge(res, &persona); !ok {
					b.Errorf("not approved: %s", why)
				}
			})
		}
		for arrived.Load() < int64(n) { // every review waits on the model
			time.Sleep(10 * time.Millisecond)
		}
		held := rss()
		close(release)
		wg.Wait()
		b.ReportMetric(float64(held-before)/float64(n), "rss-B/review")
		b.ReportMetric(float64(held)/(1<<20), "rss-MB")
	}
}
