package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/pluginv1"
)

// auditLog collects the events a review records through the host.
type auditLog struct {
	mu     sync.Mutex
	events []recorded
}

type recorded struct {
	Event string
	Data  map[string]any
}

func (a *auditLog) record(_ context.Context, event string, data any) {
	raw, _ := json.Marshal(data)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	a.mu.Lock()
	a.events = append(a.events, recorded{event, m})
	a.mu.Unlock()
}

func (a *auditLog) named(event string) []recorded {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []recorded
	for _, e := range a.events {
		if e.Event == event {
			out = append(out, e)
		}
	}
	return out
}

// withReason sets the proposal's reason, which the caller plugin reads as
// its script, in both the decoded proposal and the bytes sent.
func withReason(t *testing.T, req *engine.ReviewRequest, reason string) {
	t.Helper()
	req.Proposal.Reason = reason
	raw, err := json.Marshal(req.Proposal)
	if err != nil {
		t.Fatal(err)
	}
	req.ProposalJSON = raw
}

// callTools runs the caller plugin with a script of calls and returns the
// outcome of each, keyed by tool name.
func callTools(t *testing.T, h *Host, req engine.ReviewRequest) map[string]string {
	t.Helper()
	r, err := h.Route(reviewer)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Review(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if err := json.Unmarshal([]byte(res.Notes), &out); err != nil {
		t.Fatalf("caller notes %q: %v", res.Notes, err)
	}
	return out
}

func TestBrokeredToolCallsAreCheckedAgainstTheBag(t *testing.T) {
	h := startHost(t, helperSpec(t, "caller"))
	var log auditLog
	req := reviewRequest(t, "host_restart_service", &gated.SOP{ID: "SOP-001", Title: "Restart", Rollback: "start the old unit", Steps: []string{"drain", "restart"}})
	withReason(t, &req, `get_proposal,get_sop_text={"id":"SOP-001"},get_verdict_history,run_shell={"cmd":"rm -rf /"},ns.web_skill`)
	req.Tools = []string{"get_proposal", "get_sop_text"}
	req.Audit = log.record
	out := callTools(t, h, req)

	if got := out["get_proposal"]; !strings.HasPrefix(got, "ok: ") || !strings.Contains(got, `"host_restart_service"`) {
		t.Errorf("get_proposal: %s", got)
	}
	if got := out["get_sop_text"]; !strings.HasPrefix(got, "ok: ") || !strings.Contains(got, "start the old unit") || !strings.Contains(got, "1. drain") {
		t.Errorf("get_sop_text: %s", got)
	}
	for _, denied := range []string{"get_verdict_history", "run_shell", "ns.web_skill"} {
		if got := out[denied]; !strings.HasPrefix(got, "denied: ") {
			t.Errorf("%s was not refused: %s", denied, got)
		}
	}
	called, refused := log.named(gated.EventToolCalled), log.named(gated.EventToolDenied)
	if len(called) != 2 || len(refused) != 3 {
		t.Fatalf("audit: %d tool.called and %d tool.denied events, want 2 and 3: %+v", len(called), len(refused), log.events)
	}
	for _, e := range append(called, refused...) {
		if e.Data["review_id"] != req.ReviewID || len(e.Data["args_sha256"].(string)) != 64 {
			t.Errorf("event %s lacks the review id or the arguments' hash: %v", e.Event, e.Data)
		}
	}
	for _, e := range refused {
		if e.Data["tool"] == "run_shell" && !strings.Contains(e.Data["why"].(string), "not in this review's tool bag") {
			t.Errorf("run_shell refusal says %q", e.Data["why"])
		}
	}
}

func TestForwardedToolCarriesTheReview(t *testing.T) {
	h, err := NewHost(zaptest.NewLogger(t), "caller", helperSpec(t, "caller"))
	if err != nil {
		t.Fatal(err)
	}
	var got ToolRequest
	h.SetTools(ToolConfig{
		Forward: func(_ context.Context, name string, req ToolRequest) ([]byte, error) {
			got = req
			if name == "slow_tool" {
				time.Sleep(time.Second)
				return []byte(`{}`), nil
			}
			return []byte(`{"services":["nginx","redis"]}`), nil
		},
		CallTimeout: 100 * time.Millisecond,
	})
	t.Cleanup(h.Close)
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var log auditLog
	req := reviewRequest(t, "host_restart_service", nil)
	withReason(t, &req, `host_list_services={"host":"web-1"}`)
	req.Tools = []string{"host_list_services"}
	req.Audit = log.record
	out := callTools(t, h, req)
	if want := `ok: {"services":["nginx","redis"]}`; out["host_list_services"] != want {
		t.Errorf("host_list_services: %s, want %s", out["host_list_services"], want)
	}
	if got.Tenant != "acme" || got.ProposalID != "p1" || got.ReviewID != req.ReviewID || string(got.Args) != `{"host":"web-1"}` {
		t.Errorf("forwarded request %+v", got)
	}

	req.ReviewID = "rv2"
	withReason(t, &req, "slow_tool")
	req.Tools = []string{"slow_tool"}
	out = callTools(t, h, req)
	if got := out["slow_tool"]; !strings.HasPrefix(got, "failed: ") || !strings.Contains(got, "deadline") {
		t.Errorf("a tool over its time limit: %s", got)
	}
}

func TestToolHostRefusesReviewsNotInProgress(t *testing.T) {
	var rs reviews
	th := &toolHost{plugin: "a", reviews: &rs, cfg: &ToolConfig{}}
	other := &toolHost{plugin: "b", reviews: &rs, cfg: &ToolConfig{}}
	req := engine.ReviewRequest{ReviewID: "rv1", ProposalJSON: []byte(`{"id":"p1"}`), Tools: []string{"get_proposal"}}
	lr, err := rs.add("a", &req)
	if err != nil {
		t.Fatal(err)
	}
	call := func(th *toolHost, id, tool, args string) error {
		_, err := th.CallTool(t.Context(), &pluginv1.CallToolRequest{ReviewId: id, Name: tool, ArgsJson: []byte(args)})
		return err
	}
	if err := call(th, "rv1", "get_proposal", ""); err != nil {
		t.Fatalf("a live review's own tool: %v", err)
	}
	cases := []struct {
		note      string
		th        *toolHost
		id, tool  string
		args      string
		code      codes.Code
		afterDone bool
	}{
		{note: "unknown review", th: th, id: "rv9", tool: "get_proposal", code: codes.PermissionDenied},
		{note: "another plugin's review", th: other, id: "rv1", tool: "get_proposal", code: codes.PermissionDenied},
		{note: "tool outside the bag", th: th, id: "rv1", tool: "get_sop_text", code: codes.PermissionDenied},
		{note: "name with a dot", th: th, id: "rv1", tool: "get.proposal", code: codes.InvalidArgument},
		{note: "arguments not an object", th: th, id: "rv1", tool: "get_proposal", args: `[1]`, code: codes.InvalidArgument},
		{note: "arguments too large", th: th, id: "rv1", tool: "get_proposal", args: `{"x":"` + strings.Repeat("a", maxToolArgsBytes) + `"}`, code: codes.InvalidArgument},
		{note: "review finished", th: th, id: "rv1", tool: "get_proposal", code: codes.PermissionDenied, afterDone: true},
	}
	for _, tc := range cases {
		if tc.afterDone {
			rs.remove(lr)
		}
		err := call(tc.th, tc.id, tc.tool, tc.args)
		if status.Code(err) != tc.code {
			t.Errorf("%s: err = %v, want code %s", tc.note, err, tc.code)
		}
	}
	if _, err := rs.add("a", &engine.ReviewRequest{}); err == nil {
		t.Error("a review without an id was registered")
	}
}

func TestSOPReviewerReadsTheSOPThroughTheHost(t *testing.T) {
	_, r := startReviewer(t, "sop")
	var log auditLog
	req := reviewRequest(t, "host_restart_service", &gated.SOP{ID: "SOP-001", Title: "Restart", Actions: []string{"host_restart_service"}, Rollback: "start the old unit"})
	req.Tools = []string{"get_sop_text", "get_proposal"}
	req.Audit = log.record
	res, err := r.Review(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, why := engine.Judge(res, reviewer); !ok {
		t.Fatalf("not approved: %s\n%s", why, res.Text)
	}
	if n := len(log.named(gated.EventToolCalled)); n != 1 {
		t.Fatalf("%d tool.called events, want the one get_sop_text lookup", n)
	}
}

func TestGarbageTextIsARejection(t *testing.T) {
	_, r := startReviewer(t, "garbage")
	res, err := r.Review(t.Context(), reviewRequest(t, "host_restart_service", nil))
	if err != nil {
		t.Fatal(err)
	}
	_, ok, why := engine.Judge(res, reviewer)
	if ok || !strings.Contains(why, "not a decision line") {
		t.Fatalf("approved = %v, why = %q; want a rejection naming the missing decision line", ok, why)
	}
}

func TestConcurrencyLimitQueuesReviews(t *testing.T) {
	spec := helperSpec(t, "count")
	spec.MaxConcurrency = 2
	h := startHost(t, spec)
	r, err := h.Route(reviewer)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	peaks := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := reviewRequest(t, "host_restart_service", nil)
			req.ReviewID = "rv" + strconv.Itoa(i)
			res, err := r.Review(t.Context(), req)
			if err != nil {
				t.Error(err)
				return
			}
			peaks[i], _ = strconv.Atoi(res.Notes)
		})
	}
	wg.Wait()
	for i, p := range peaks {
		if p < 1 || p > 2 {
			t.Errorf("review %d saw %d reviews at once in the plugin; the limit is 2", i, p)
		}
	}

	// A review that cannot get a slot before its deadline fails with the
	// deadline, without reaching the plugin.
	hold, release := context.WithCancel(t.Context())
	defer release()
	for i := range 2 {
		go func() {
			req := reviewRequest(t, "host_restart_service", nil)
			req.ReviewID = "hold" + strconv.Itoa(i)
			_, _ = r.Review(hold, req)
		}()
	}
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	req := reviewRequest(t, "host_restart_service", nil)
	req.ReviewID = "late"
	if _, err := r.Review(ctx, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued past its deadline: err = %v", err)
	}
}

func TestOversizedAnswersAreCut(t *testing.T) {
	res := engine.ReviewResult{
		Text: "Decision: approve", Decision: gated.DecisionApprove,
		Notes: strings.Repeat("n", 100<<10), MissingWork: make([]string, 500),
		NextRoundGuidance: strings.Repeat("g", 100<<10),
		Warnings:          []string{strings.Repeat("w", 20<<10)},
		Comments:          []gated.Comment{{Path: "a.go", Body: strings.Repeat("c", 20<<10)}},
	}
	for i := range 100 {
		res.Gates = append(res.Gates, gated.GateResult{Name: "filler" + strconv.Itoa(i), Passed: true})
	}
	res.Gates = append(res.Gates, gated.GateResult{Name: "sop_covers", Passed: true})
	bound(&res)
	const cut = "gated cut the reviewer's oversized notes, next_round_guidance, gates, comments.body, missing_work, warnings"
	if len(res.Notes) > maxFieldBytes+200 || !strings.Contains(res.Notes, cut) {
		t.Fatalf("notes %d bytes, ending %q", len(res.Notes), res.Notes[len(res.Notes)-120:])
	}
	// The cut is also the first warning, ahead of the reviewer's own, so
	// the engine's run limits keep it.
	if len(res.Warnings) != 2 || res.Warnings[0] != cut || len(res.Warnings[1]) > maxRunItemBytes+len("…") {
		t.Fatalf("warnings %d, first %q", len(res.Warnings), res.Warnings[0])
	}
	// Gates keep the action bound; run output keeps the ceilings of the
	// run limits, which the engine applies.
	if len(res.Gates) != maxListItems || len(res.MissingWork) != gated.CeilingRunMaxItems {
		t.Fatalf("%d gates, %d missing work items kept", len(res.Gates), len(res.MissingWork))
	}
	if n := len(res.NextRoundGuidance); n < gated.CeilingRunMaxGuidanceBytes || n > gated.CeilingRunMaxGuidanceBytes+len("…") {
		t.Fatalf("next_round_guidance kept %d bytes", n)
	}
	if n := len(res.Comments[0].Body); n > gated.CeilingRunMaxItemBytes+len("…") {
		t.Fatalf("comment body kept %d bytes", n)
	}
	// The required gate past the cut is not reported, so no approval.
	if _, ok, why := engine.Judge(res, &engine.Persona{Name: "r", RequiredGates: []string{"sop_covers"}}); ok {
		t.Fatalf("approved after the cut: %s", why)
	}
}

// TestAnswersWithinBoundsAreKept checks that an answer within every bound
// comes through the host unchanged, warnings included.
func TestAnswersWithinBoundsAreKept(t *testing.T) {
	res := engine.ReviewResult{
		Text: "Decision: reject", Decision: gated.DecisionReject, Notes: "fine",
		MissingWork: []string{"add a test"}, NextRoundGuidance: "add the test first",
		Warnings: []string{"criterion style was not judged"},
		Comments: []gated.Comment{{Path: "a.go", Body: "nil check"}},
	}
	want := res
	want.MissingWork, want.Warnings, want.Comments = slices.Clone(res.MissingWork), slices.Clone(res.Warnings), slices.Clone(res.Comments)
	bound(&res)
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("bound changed an answer within bounds:\n got %+v\nwant %+v", res, want)
	}
}

func TestValidToolName(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	names := []string{
		"", "a", "get_sop_text", "ns-web_skill", "Z9", "a.b", "a b", "a/b", "ns.web_skill", "é", "a\x00", "\xff",
		strings.Repeat("x", 127), strings.Repeat("x", 128), strings.Repeat("x", 129), strings.Repeat("é", 64),
	}
	for c := range 256 {
		names = append(names, string(rune(c)), "a"+string([]byte{byte(c)}))
	}
	for _, n := range names {
		if got, want := validToolName(n), pattern.MatchString(n); got != want {
			t.Errorf("validToolName(%q) = %v, want %v", n, got, want)
		}
	}
}

// get_sop_text answers the same JSON object, byte for byte, as encoding a
// map of its fields does.
func TestSOPTextAnswer(t *testing.T) {
	sops := []*gated.SOP{
		{ID: "SOP-001", Title: "Restart", Rollback: "start the old unit"},
		{ID: "SOP-002", Title: "Drain <node> & \"move\"", Actions: []string{"host_drain", "host_restart_service"},
			Steps: []string{"drain", "wait for <0 pods>", "restart"}, Rollback: "uncordon"},
		{ID: "SOP-003", Actions: []string{}, Steps: []string{}},
		{ID: "SOP-\u2028", Title: "caf\xe9 \U0001F600", Steps: []string{"\t"}},
	}
	for _, sop := range sops {
		t.Run(sop.ID, func(t *testing.T) {
			th := &toolHost{cfg: &ToolConfig{}}
			got, err := th.sopText(engine.ReviewRequest{SOP: sop}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(map[string]any{
				"id": sop.ID, "title": sop.Title, "actions": sop.Actions, "rollback": sop.Rollback,
				"steps": sop.Steps, "text": renderSOP(sop),
			})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("answer\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestRenderSOP(t *testing.T) {
	tests := []struct {
		sop  gated.SOP
		want string
	}{
		{sop: gated.SOP{ID: "SOP-001", Title: "Restart", Rollback: "start the old unit"},
			want: "# SOP-001: Restart\n\nRollback: start the old unit\n"},
		{sop: gated.SOP{ID: "SOP-002", Title: "Drain", Actions: []string{"host_drain", "host_restart_service"},
			Steps: []string{"drain", "wait", "restart", "check", "5", "6", "7", "8", "9", "ten"}},
			want: "# SOP-002: Drain\n\nCovers: host_drain, host_restart_service\n\nSteps:\n1. drain\n2. wait\n3. restart\n4. check\n5. 5\n6. 6\n7. 7\n8. 8\n9. 9\n10. ten\n\nRollback: none written\n"},
		{sop: gated.SOP{ID: "SOP-003", Actions: []string{}, Steps: []string{}, Rollback: "%d %s"},
			want: "# SOP-003: \n\nRollback: %d %s\n"},
	}
	for _, tc := range tests {
		if got := renderSOP(&tc.sop); got != tc.want {
			t.Errorf("%s:\n%q\nwant\n%q", tc.sop.ID, got, tc.want)
		}
	}
}

// A tool call ends after the call timeout, or at the review's deadline if
// that comes first.
func TestCallDeadline(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		note    string
		timeout time.Duration
		review  time.Time
		want    time.Time
	}{
		{note: "default timeout, no review deadline", want: now.Add(DefaultToolCallTimeout)},
		{note: "negative timeout is the default", timeout: -time.Second, want: now.Add(DefaultToolCallTimeout)},
		{note: "configured timeout", timeout: time.Second, review: now.Add(time.Minute), want: now.Add(time.Second)},
		{note: "review ends first", timeout: time.Minute, review: now.Add(time.Second), want: now.Add(time.Second)},
		{note: "review already over", timeout: time.Minute, review: now.Add(-time.Second), want: now.Add(-time.Second)},
		{note: "same instant", timeout: time.Second, review: now.Add(time.Second), want: now.Add(time.Second)},
	}
	for _, tc := range tests {
		if got := callDeadline(now, tc.timeout, tc.review); !got.Equal(tc.want) {
			t.Errorf("%s: %s, want %s", tc.note, got, tc.want)
		}
	}
}
