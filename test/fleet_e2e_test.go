package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

// fleetClient connects a fleet.Client to a running gated.
func fleetClient(t *testing.T, url string, opts ...nats.Option) *fleet.Client {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// exampleProposal reads one of examples/proposals as a typed proposal.
func exampleProposal(t *testing.T, name string) *gated.Proposal {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../examples/proposals", name))
	if err != nil {
		t.Fatal(err)
	}
	var p gated.Proposal
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestFleetClientAgainstGated drives the Go client and the Gate through
// the real gated, its policy and its reviewer process.
func TestFleetClientAgainstGated(t *testing.T) {
	g := startGated(t)
	client := fleetClient(t, g.natsURL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	blocked := exampleProposal(t, "approved.json")
	blocked.ID, blocked.Reviewer = "fleet-blocked-1", "no-such-persona"
	blocked.Target = map[string]any{"device_id": 701, "service": "nginx"}
	invalid := exampleProposal(t, "approved.json")
	invalid.ID, invalid.Class = "fleet-invalid-1", "maybe"
	tests := []struct {
		note    string
		p       *gated.Proposal
		outcome gated.Outcome
		want    error
	}{
		{note: "approved by the sop reviewer", p: exampleProposal(t, "approved.json"), outcome: gated.OutcomeApproved},
		{note: "rejected at policy", p: exampleProposal(t, "rejected-skip-review.json"), outcome: gated.OutcomeRejected, want: fleet.ErrReviewRejected},
		{note: "rejected by the reviewer", p: exampleProposal(t, "rejected-no-sop.json"), outcome: gated.OutcomeRejected, want: fleet.ErrReviewRejected},
		{note: "blocked: no such persona", p: blocked, outcome: gated.OutcomeBlocked, want: fleet.ErrReviewBlocked},
		{note: "invalid class", p: invalid, outcome: gated.OutcomeInvalid, want: fleet.ErrProposalInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			v, err := client.Propose(ctx, tc.p)
			if v == nil || v.Outcome != tc.outcome {
				t.Fatalf("verdict %+v, err %v; want outcome %s", v, err, tc.outcome)
			}
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}

	// The Gate: the tool runs once on approval, never otherwise.
	gate, err := fleet.NewToolGate(client, fleet.Identity{Tenant: "acme", Agent: "fleet-test-agent", Operator: &gated.Principal{ID: "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	// A guarded tool's arguments encode as a JSON object: the proposal
	// carries them, and the tool runs with exactly those.
	type device struct {
		ID int `json:"device_id"`
	}
	type table struct {
		Name string `json:"table"`
	}
	restart := fleet.Guard(gate, fleet.ToolSpec[device]{
		Action: "host_restart_service", Class: gated.ClassWrite,
		Describe: func(d device) fleet.Change {
			return fleet.Change{Target: map[string]any{"device_id": d.ID, "service": "nginx"}, Reason: "wedged", BlastRadius: gated.BlastSingleDevice}
		},
	}, func(context.Context, device) (string, error) { runs.Add(1); return "restarted", nil })
	drop := fleet.Guard(gate, fleet.ToolSpec[table]{
		Action: "db_drop_table", Class: gated.ClassDestructive,
		Describe: func(t table) fleet.Change {
			return fleet.Change{Target: map[string]any{"table": t.Name}, Reason: "unused", BlastRadius: gated.BlastCluster}
		},
	}, func(context.Context, table) (string, error) { runs.Add(1); return "dropped", nil })
	if out, err := restart(ctx, device{702}); err != nil || out != "restarted" || runs.Load() != 1 {
		t.Fatalf("approved restart: %q, %v, %d runs", out, err, runs.Load())
	}
	// The same device again, moments later: target_cooldown refuses it.
	if _, err := restart(ctx, device{702}); !errors.Is(err, fleet.ErrReviewRejected) || runs.Load() != 1 {
		t.Fatalf("second restart: err %v, %d runs; want ErrReviewRejected and no run", err, runs.Load())
	}
	var ve *fleet.VerdictError
	if _, err := drop(ctx, table{"orders_2019"}); !errors.As(err, &ve) || ve.Verdict.Reviews[0].Persona != "dba" || runs.Load() != 1 {
		t.Fatalf("drop: err %v, %d runs; want a rejection by the dba persona and no run", err, runs.Load())
	}
}

// TestReviewServiceAgainstGated asks gated's micro service for reviews and
// reads its discovery endpoints.
func TestReviewServiceAgainstGated(t *testing.T) {
	g := startGated(t)
	nc, err := nats.Connect(g.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := func(subject string, data []byte) *nats.Msg {
		t.Helper()
		m, err := nc.Request(subject, data, time.Minute)
		if err != nil {
			t.Fatalf("request on %s: %v", subject, err)
		}
		return m
	}
	approved, err := os.ReadFile("../examples/proposals/approved.json")
	if err != nil {
		t.Fatal(err)
	}
	m := req("gated.review.acme", approved)
	var v gated.Verdict
	if err := json.Unmarshal(m.Data, &v); err != nil || v.Outcome != gated.OutcomeApproved || v.Stage != gated.StageReview {
		t.Fatalf("reply %s (%v), headers %v", m.Data, err, m.Header)
	}
	// Stored, like every verdict.
	if stored, err := fleetClient(t, g.natsURL).Verdict(t.Context(), "acme", v.ProposalID); err != nil || stored.AuditSeq != v.AuditSeq {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	refusals := []struct {
		subject string
		data    []byte
		code    string
	}{
		{"gated.review.initech", approved, "403"},
		{"gated.review", []byte("restart it"), "400"},
		{"gated.review", []byte(`{"tenant":"acme","id":"x"}`), "400"},
	}
	for _, r := range refusals {
		m := req(r.subject, r.data)
		if code := m.Header.Get(micro.ErrorCodeHeader); code != r.code || m.Header.Get(micro.ErrorHeader) == "" {
			t.Fatalf("%s %q: code %q (%s), want %s", r.subject, r.data, code, m.Header.Get(micro.ErrorHeader), r.code)
		}
	}

	var info micro.Info
	if err := json.Unmarshal(req("$SRV.INFO.gated", nil).Data, &info); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
	}
	if info.Name != "gated" || strings.Join(subjects, ",") != "gated.review,gated.review.*" {
		t.Fatalf("info %+v", info)
	}
	var stats micro.Stats
	if err := json.Unmarshal(req("$SRV.STATS.gated", nil).Data, &stats); err != nil {
		t.Fatal(err)
	}
	counts := map[string][2]int{}
	for _, ep := range stats.Endpoints {
		counts[ep.Subject] = [2]int{ep.NumRequests, ep.NumErrors}
	}
	if counts["gated.review.*"] != [2]int{2, 1} || counts["gated.review"] != [2]int{2, 2} {
		t.Fatalf("stats requests/errors %v; want gated.review.* 2/1 and gated.review 2/2", counts)
	}
}

func TestProposeViaServiceAndVerdictGet(t *testing.T) {
	g := startGated(t)
	tests := []struct {
		file string
		exit int
	}{
		{"approved.json", 0},
		{"rejected-skip-review.json", 3},
		{"invalid.json", 3},
	}
	for _, tc := range tests {
		code, out, stderr := propose(t, g.natsURL, "--via-service", "-f", filepath.Join("../examples/proposals", tc.file))
		if code != tc.exit {
			t.Fatalf("%s: exit %d, want %d\n%s%s", tc.file, code, tc.exit, out, stderr)
		}
	}
	verdictGet := func(url string, args ...string) (int, string, string) {
		return run(t, exec.Command(gatedBin, append([]string{"verdict", "get", "--nats-url", url}, args...)...))
	}
	code, out, stderr := verdictGet(g.natsURL, "acme", "demo-approved-1")
	var v gated.Verdict
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Outcome != gated.OutcomeApproved {
		t.Fatalf("verdict get: exit %d\n%s%s", code, out, stderr)
	}
	for _, tc := range []struct {
		url  string
		args []string
		exit int
		say  string
	}{
		{g.natsURL, []string{"acme", "never-proposed"}, 3, "no verdict stored for tenant acme, proposal never-proposed"},
		{g.natsURL, []string{"Acme", "x"}, 2, "tenant"},
		{g.natsURL, []string{"acme"}, 2, "missing ID: usage: gated verdict get TENANT ID"},
		{"nats://" + freeAddr(t), []string{"acme", "x"}, 1, "connecting to NATS"},
	} {
		code, _, stderr := verdictGet(tc.url, tc.args...)
		if code != tc.exit || !strings.Contains(stderr, tc.say) {
			t.Errorf("verdict get %v: exit %d, stderr %q; want %d saying %q", tc.args, code, stderr, tc.exit, tc.say)
		}
	}

	// Without the service, --via-service fails as unavailable.
	off := startGated(t, "--review-service=false")
	code, _, stderr = propose(t, off.natsURL, "--via-service", "-f", "../examples/proposals/approved.json")
	if code != 1 || !strings.Contains(stderr, "review service unavailable") {
		t.Fatalf("--review-service=false: exit %d, stderr %q", code, stderr)
	}
}

// TestFleetExample runs examples/fleet against gated.
func TestFleetExample(t *testing.T) {
	fleetBin := filepath.Join(t.TempDir(), "fleet")
	build := exec.Command("go", "build", "-o", fleetBin, "../examples/fleet")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/fleet: %v\n%s", err, out)
	}
	g := startGated(t)
	code, out, stderr := run(t, exec.Command(fleetBin, "--nats-url", g.natsURL, "--agents", "4", "--proposals", "80", "--json"))
	if code != 0 {
		t.Fatalf("fleet exit %d\n%s\n%s", code, out, stderr)
	}
	var sum struct {
		Summary struct {
			Calls      int                   `json:"calls"`
			Reads      int                   `json:"reads"`
			Proposals  int                   `json:"proposals"`
			Outcomes   map[gated.Outcome]int `json:"outcomes"`
			ByReviewer map[string]int        `json:"by_reviewer"`
			ByRule     map[string]int        `json:"by_rule"`
			Unanswered int                   `json:"unanswered"`
			ToolRuns   int                   `json:"tool_runs"`
		} `json:"summary"`
	}
	client := fleetClient(t, g.natsURL)
	lines, checked := 0, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l struct {
			Tenant     string        `json:"tenant"`
			Class      gated.Class   `json:"class"`
			ProposalID string        `json:"proposal_id"`
			Outcome    gated.Outcome `json:"outcome"`
			Ran        string        `json:"ran"`
		}
		if strings.HasPrefix(sc.Text(), `{"summary"`) {
			if err := json.Unmarshal(sc.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines++
		if (l.Ran != "") != (l.Class == gated.ClassRead || l.Outcome == gated.OutcomeApproved) {
			t.Fatalf("line %q: a tool ran without an approval, or an approved one did not", sc.Text())
		}
		if l.ProposalID != "" && checked < 5 {
			checked++
			stored, err := client.Verdict(t.Context(), l.Tenant, l.ProposalID)
			if err != nil || stored.Outcome != l.Outcome {
				t.Fatalf("printed %s for %s.%s; stored %+v (%v)", l.Outcome, l.Tenant, l.ProposalID, stored, err)
			}
		}
	}
	s := sum.Summary
	switch {
	case s.Calls != 80 || lines != 80:
		t.Fatalf("%d calls, %d lines; want 80", s.Calls, lines)
	case s.Reads == 0 || s.Proposals != s.Calls-s.Reads || s.Unanswered != 0:
		t.Fatalf("summary %+v", s)
	case s.Outcomes[gated.OutcomeApproved] == 0 || s.Outcomes[gated.OutcomeRejected] == 0:
		t.Fatalf("the default bundle should approve some and reject some: %v", s.Outcomes)
	case s.ToolRuns != s.Reads+s.Outcomes[gated.OutcomeApproved]:
		t.Fatalf("tools ran %d times for %d reads and %d approvals", s.ToolRuns, s.Reads, s.Outcomes[gated.OutcomeApproved])
	case s.ByReviewer["dba"] == 0 || s.ByReviewer["reviewer"] == 0:
		t.Fatalf("reviews by persona %v; database changes go to dba", s.ByReviewer)
	case s.ByRule["no_skip_review"] == 0 || s.ByRule["unsupported_force_approve"] == 0:
		t.Fatalf("policy denies %v; want no_skip_review and unsupported_force_approve", s.ByRule)
	}
}

// TestFleetClientWithTenantPermissionsOnly runs gated on an external
// server where tenant acme has exactly the rights fleet.Client documents,
// with an inbox prefix of its own and no JetStream API rights, and checks
// that every client call works without a permissions violation.
func TestFleetClientWithTenantPermissionsOnly(t *testing.T) {
	s := natstest.ServerWithOptions(t, &server.Options{
		JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "gated", Password: "gated-pw"},
			{Username: "acme", Password: "acme-pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{
					"gated.proposals.acme.*",
					"$JS.API.DIRECT.GET.KV_GATED_VERDICTS.$KV.GATED_VERDICTS.acme.*",
					"gated.review.acme",
				}},
				Subscribe: &server.SubjectPermission{Allow: []string{"gated.verdicts.acme.*", "gated.status.acme.*", "_INBOX_acme.>"}},
			}},
		},
	})
	startGated(t, "--nats-url", s.ClientURL(), "--nats-user", "gated", "--nats-password", "gated-pw")

	violations := make(chan error, 16)
	client := fleetClient(t, s.ClientURL(), nats.UserInfo("acme", "acme-pw"), nats.CustomInboxPrefix("_INBOX_acme"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p := exampleProposal(t, "read-pass-through.json")
	if _, err := client.Propose(ctx, p); err != nil {
		t.Fatalf("Propose: %v", err)
	}
	if _, err := client.Propose(ctx, p); err != nil { // a duplicate: read back by direct get
		t.Fatalf("Propose again: %v", err)
	}
	if v, err := client.Verdict(ctx, "acme", p.ID); err != nil || !v.Approved {
		t.Fatalf("Verdict: %+v, %v", v, err)
	}
	if _, err := client.Verdict(ctx, "acme", "never-proposed"); !errors.Is(err, gated.ErrNotFound) {
		t.Fatalf("Verdict of a missing key: err = %v, want gated.ErrNotFound", err)
	}
	data, err := os.ReadFile("../examples/proposals/approved.json")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := client.RequestReview(ctx, data); err != nil || !v.Approved {
		t.Fatalf("RequestReview: %+v, %v", v, err)
	}
	watched := exampleProposal(t, "read-pass-through.json")
	watched.ID = "watched-read-1"
	var stages []gated.StatusStage
	if _, err := client.ProposeWith(ctx, watched, fleet.WithStatus(func(u fleet.StatusUpdate) {
		if u.Status != nil {
			stages = append(stages, u.Status.Stage)
		}
	})); err != nil || len(stages) == 0 || stages[len(stages)-1] != gated.StatusDecided {
		t.Fatalf("ProposeWith(WithStatus): %v, stages %v", err, stages)
	}
	select {
	case err := <-violations:
		t.Fatalf("the client needed a right fleet.Client does not document: %v", err)
	default:
	}
}
