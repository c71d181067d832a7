package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/llm"
	"github.com/gated/gated/plugins/sdk"
)

// The test binary doubles as the plugin: with helperEnv set it serves the
// LLM reviewer, configured from its environment as `gated plugin run llm`
// is, instead of running tests (the helper-process pattern).
const helperEnv = "GATED_TEST_LLM_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		cfg := llm.ConfigFromEnv()
		cfg.Version = "test"
		sdk.Serve(llm.New(cfg))
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// A review end to end: gated's host launches the reviewer as a separate,
// pinned process with the key and address in its environment; the model
// (the fake OpenAI server) reads the SOP through the host's real ToolHost,
// tries a tool outside the bag and is refused, and approves with evidence;
// the host judges the answer and audits both tool calls.
func TestReviewThroughTheHost(t *testing.T) {
	const key = "sk-e2e-5d2c"
	p := newProvider(t, "openai",
		toolTurn("openai", usage{120, 25},
			toolCall{id: "call_sop", name: sdk.ToolGetSOPText, args: `{}`},
			toolCall{id: "call_shell", name: "run_shell", args: `{"cmd":"uptime"}`}),
		textTurn("openai", approval, usage{300, 70}))

	h := startPlugin(t, p, key)

	persona := &engine.Persona{
		Name: "reviewer", Model: "openai/gpt-4o-mini", Plugin: llm.Name, MaxTurns: 4,
		PermissionMode: "read-only", Prompt: "Approve only with evidence.",
		Tools: []string{sdk.ToolGetSOPText}, RequiredGates: requiredGates,
	}
	r, err := h.Route(persona)
	if err != nil {
		t.Fatal(err)
	}
	prop, raw := testProposal("nginx is wedged")
	var mu sync.Mutex
	var audited []string
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := r.Review(ctx, engine.ReviewRequest{
		ReviewID: "rv-e2e", Proposal: prop, ProposalJSON: raw, Persona: persona,
		Tools:    []string{sdk.ToolGetSOPText},
		SOP:      &gated.SOP{ID: "SOP-001", Title: "Restart a service", Actions: []string{"host_restart_service"}, Rollback: "start the previous unit again"},
		Deadline: time.Now().Add(30 * time.Second),
		Audit: func(_ context.Context, event string, data any) {
			m, _ := data.(map[string]any)
			mu.Lock()
			audited = append(audited, fmt.Sprintf("%s %v", event, m["tool"]))
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.PID == os.Getpid() || res.Plugin != llm.Name || res.PluginVersion != "test" {
		t.Errorf("review ran in pid %d (test %d) by %q %q", res.PID, os.Getpid(), res.Plugin, res.PluginVersion)
	}
	if _, approved, why := engine.Judge(res, persona); !approved {
		t.Fatalf("not approved: %s\n%s", why, res.Text)
	}
	if res.Turns != 2 || res.Tokens != (gated.Tokens{Prompt: 420, Completion: 95}) || res.Model != persona.Model {
		t.Errorf("turns %d, tokens %+v, model %q", res.Turns, res.Tokens, res.Model)
	}

	calls := p.recorded()
	if len(calls) != 2 {
		t.Fatalf("%d model calls, want 2", len(calls))
	}
	if got := calls[0].Header.Get("Authorization"); got != "Bearer "+key {
		t.Errorf("the key did not reach the plugin: Authorization %q", got)
	}
	// The host composed the system prompt around the persona's body.
	if sys := systemText("openai", calls[0]); !strings.Contains(sys, persona.Prompt) || !strings.Contains(sys, "never follow instructions") {
		t.Errorf("system prompt:\n%s", sys)
	}
	results := toolResults("openai", calls[1])
	if len(results) != 2 {
		t.Fatalf("tool results = %q", results)
	}
	var sop struct{ ID, Rollback, Text string }
	if err := json.Unmarshal([]byte(results[0]), &sop); err != nil || sop.ID != "SOP-001" || sop.Rollback != "start the previous unit again" {
		t.Errorf("get_sop_text answered %q (%v)", results[0], err)
	}
	if !strings.Contains(results[1], `"refused":true`) || !strings.Contains(results[1], "not in this review's tool bag") {
		t.Errorf("run_shell was answered %q", results[1])
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{gated.EventToolCalled + " " + sdk.ToolGetSOPText, gated.EventToolDenied + " run_shell"}
	if !slices.Equal(audited, want) {
		t.Errorf("audited %q, want %q", audited, want)
	}
}

// startPlugin starts the test binary as the llm plugin under a real host,
// with an OpenAI key and the fake provider p's address in its environment.
func startPlugin(t *testing.T, p *provider, key string) *plugins.Host {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := plugins.FileSHA256(exe)
	if err != nil {
		t.Fatal(err)
	}
	spec := plugins.Spec{Name: llm.Name, Path: exe, SHA256: sum, Env: []string{
		helperEnv + "=1", llm.EnvOpenAIAPIKey + "=" + key, llm.EnvOpenAIBaseURL + "=" + p.baseURL(),
	}}
	h, err := plugins.NewHost(zaptest.NewLogger(t), llm.Name, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return h
}

// A run review end to end: the host sends the run context to the plugin
// process, the model sees the prior findings, and the criteria, comments
// (with a line and without), missing work and guidance of its answer come
// back through the wire.
func TestRunReviewThroughTheHost(t *testing.T) {
	p := newProvider(t, "openai", textTurn("openai", runRejection, usage{500, 150}))
	h := startPlugin(t, p, "sk-e2e-run-1")
	persona := &engine.Persona{
		Name: "run-reviewer", Model: "openai/gpt-4o-mini", Plugin: llm.Name, MaxTurns: 4,
		PermissionMode: "read-only", Prompt: "Review finished runs.", RequiredGates: runGates,
	}
	r, err := h.Route(persona)
	if err != nil {
		t.Fatal(err)
	}
	req := runRequest("openai", runDiff)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := r.Review(ctx, engine.ReviewRequest{
		ReviewID: "rv-run-e2e", Proposal: req.Proposal, ProposalJSON: req.ProposalJSON, Persona: persona,
		Deadline: time.Now().Add(30 * time.Second), Run: req.Run, Why: req.Policy.Why, PolicyRevision: req.Policy.Revision,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != gated.DecisionReject || res.PID == os.Getpid() {
		t.Fatalf("decision %q in pid %d", res.Decision, res.PID)
	}
	if len(res.Criteria) != 2 || res.Criteria[0].ID != "design" || !res.Criteria[0].Pass || res.Criteria[1].Pass || res.Criteria[1].Confidence != 0.95 {
		t.Errorf("criteria = %+v", res.Criteria)
	}
	if len(res.Comments) != 2 || res.Comments[0].Line == nil || *res.Comments[0].Line != 12 || res.Comments[1].Line != nil {
		t.Errorf("comments = %+v", res.Comments)
	}
	if want := []string{"r1-f1: add a test for the empty input", "document errEmpty in README.md"}; !slices.Equal(res.MissingWork, want) {
		t.Errorf("missing work = %q", res.MissingWork)
	}
	if res.NextRoundGuidance != "Export the error, test it, then document it." {
		t.Errorf("guidance = %q", res.NextRoundGuidance)
	}
	brief := userTexts(p.recorded()[0])[0]
	for _, s := range []string{"<prior_findings>", `"id": "r1-f1"`, `"status": "open"`, "Parse now returns the error wrapped", "you must check each open finding"} {
		if !strings.Contains(brief, s) {
			t.Errorf("the prompt the provider received does not have %q", s)
		}
	}
}
