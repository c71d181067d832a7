package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/plugins/llm"
)

// TestServeRefusesBadBudgets: a budgets file with a bad limit stops serve
// at start-up with the file and line, before anything starts.
func TestServeRefusesBadBudgets(t *testing.T) {
	for _, tc := range []struct{ note, file, want string }{
		{"zero interval", "defaults:\n  agent:\n    proposals: 10/0s\n", ":3: defaults.agent.proposals: \"10/0s\": the interval must be positive"},
		{"negative interval", "tenants:\n  acme:\n    agents:\n      bot: {reads: 5/-1m}\n", ":4: tenants.acme.agents.bot.reads: \"5/-1m\": the interval must be positive"},
		{"not a limit", "tenants:\n  acme:\n    tenant:\n      reviews_in_flight: lots\n", ":4: tenants.acme.tenant.reviews_in_flight"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "budgets.yaml", tc.file)
			code, out, err := runGated(t, "serve", "--budgets", path, "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0")
			if code != exitUsage || err == nil || !strings.Contains(err.Error(), path+tc.want) {
				t.Fatalf("serve: exit %d, %v, want exit %d naming %q\n%s", code, err, exitUsage, path+tc.want, out)
			}
		})
	}
}

// TestServeBudgetsAcrossTwoProcesses: two serve processes on one server
// share the counters: the agent's reads limit admits exactly its count,
// whichever process decides, refuses the next with a budget verdict,
// counts it in /metrics, and gated budgets show prints the counters.
// With the counter bucket gone, /readyz says no review starts.
func TestServeBudgetsAcrossTwoProcesses(t *testing.T) {
	s := natstest.Server(t)
	url := s.ClientURL()
	file := writeFile(t, t.TempDir(), "budgets.yaml", "tenants:\n  acme:\n    agents:\n      a: {reads: 3/1h}\n")
	// The refusals are counted by tenant: the operator opts in to
	// tenant names on /metrics.
	http1, stop1 := startServe(t, url, "--budgets", file, "--metrics-tenant-labels")
	defer stop1()
	http2, stop2 := startServe(t, url, "--budgets", file, "--metrics-tenant-labels")
	defer stop2()
	client := fleetClient(t, url)
	for i := range 3 {
		if v := propose(t, client, readProposal(fmt.Sprintf("r%d", i), "nginx")); v.Outcome != gated.OutcomeApproved {
			t.Fatalf("read %d: %s (%s), want approved", i, v.Outcome, v.Reason)
		}
	}
	v := propose(t, client, readProposal("r3", "nginx"))
	if v.Outcome != gated.OutcomeBlocked || v.Approved || v.Budget == nil || v.Budget.Limit != gated.LimitReads {
		t.Fatalf("the fourth read: %s (%s), want blocked by the reads budget", v.Outcome, v.Reason)
	}
	// Exactly one process refused it; the two together count one refusal.
	refusals := 0
	for _, addr := range []string{http1, http2} {
		if strings.Contains(scrape(t, addr), `gated_budget_refused_total{limit="reads",tenant="acme"} 1`) {
			refusals++
		}
	}
	if refusals != 1 {
		t.Fatalf("%d processes count the refusal in /metrics, want 1", refusals)
	}

	// The refusal is written by the process that counted it within an
	// interval (200 ms): show reads the records until it is there.
	var code int
	var out string
	var err error
	for range 200 {
		code, out, err = runGated(t, "budgets", "show", "acme", "--nats-url", url, "--budgets", file)
		if code != 0 {
			t.Fatalf("budgets show: exit %d, %v\n%s", code, err, out)
		}
		if strings.Contains(out, "1 (1 by budget)") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, want := range []string{"agent a", "3 of 3/1h", "1 (1 by budget)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("budgets show lacks %q:\n%s", want, out)
		}
	}

	code, out, err = runGated(t, "budgets", "reset", "acme", "--nats-url", url)
	if code != 0 || !strings.Contains(out, "removed 2 budget records of tenant acme") {
		t.Fatalf("budgets reset: exit %d, %v\n%s", code, err, out)
	}
	// The limit admits again at once.
	if v := propose(t, client, readProposal("r4", "nginx")); v.Outcome != gated.OutcomeApproved {
		t.Fatalf("a read after the reset: %s (%s), want approved", v.Outcome, v.Reason)
	}

	_, js := natstest.Connect(t, s)
	if err := js.DeleteKeyValue(t.Context(), budget.Bucket); err != nil && err != jetstream.ErrBucketNotFound {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + http1 + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body server.Readiness
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || body.Ready || !strings.Contains(body.Reason, "budget counters cannot be reached") {
		t.Fatalf("/readyz with no counter bucket: %d %+v", resp.StatusCode, body)
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServeTokenBudgetFromTheModelsUsage: the bundled llm reviewer
// reports the tokens the model server counted (15 a review), and the
// agent's token budget of 30 an hour refuses the third review before the
// model is asked again.
func TestServeTokenBudgetFromTheModelsUsage(t *testing.T) {
	model, calls := fakeOpenAI(t)
	t.Setenv(llm.EnvOpenAIBaseURL, model)
	t.Setenv(llm.EnvOpenAIAPIKey, "test-key")
	personasDir := t.TempDir()
	writeFile(t, personasDir, "reviewer.md", llmReviewer)
	s := natstest.Server(t)
	file := writeFile(t, t.TempDir(), "budgets.yaml", "tenants:\n  acme:\n    agent: {tokens: 30/1h}\n")
	_, stop := startServe(t, s.ClientURL(), "--budgets", file, "--personas", personasDir, "--default-plugin", "llm")
	defer stop()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	write := func(i int) []byte {
		return fmt.Appendf(nil, `{"v":1,"id":"w%d","tenant":"acme","action":"host_restart_service","class":"write","blast_radius":"single_device",`+
			`"target":{"device_id":%d},"reason":"restart %d","operator":{"id":"alice","roles":["sre"]},"requested_by":{"agent":"a","session":"s"}}`, i, i, i)
	}
	for i := range 2 {
		v := propose(t, client, write(i))
		if v.Stage != gated.StageReview || len(v.Reviews) != 1 || v.Reviews[0].Tokens.Prompt+v.Reviews[0].Tokens.Completion != 15 {
			t.Fatalf("w%d: %s at %s (%s), want a review reporting 15 tokens", i, v.Outcome, v.Stage, v.Reason)
		}
	}
	v := propose(t, client, write(2))
	if v.Budget == nil || v.Budget.Limit != gated.LimitTokens || v.Budget.Used != 30 || v.Approved {
		t.Fatalf("w2: %s at %s (%s), want refused by the token budget at 30 used", v.Outcome, v.Stage, v.Reason)
	}
	if n := calls(); n != 2 {
		t.Fatalf("the model was called %d times, want 2: a refused review asks nothing", n)
	}
}

// serveReloadingBudgets starts serve on a budgets file holding limits,
// read again every 50 ms, and returns the file's directory, serve's HTTP
// address and a fleet client.
func serveReloadingBudgets(t *testing.T, limits string) (dir, httpAddr string, client *fleet.Client) {
	t.Helper()
	s := natstest.Server(t)
	dir = t.TempDir()
	file := writeFile(t, dir, "budgets.yaml", limits)
	httpAddr, stop := startServe(t, s.ClientURL(), "--budgets", file, "--budgets-poll", "50ms")
	t.Cleanup(stop)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if client, err = fleet.NewClient(nc); err != nil {
		t.Fatal(err)
	}
	return dir, httpAddr, client
}

// TestServeReloadsBudgets: a changed budgets file replaces the limits of
// a running serve; a bad one is refused and the limits in force stay.
func TestServeReloadsBudgets(t *testing.T) {
	dir, httpAddr, client := serveReloadingBudgets(t, "tenants:\n  acme:\n    agents:\n      a: {reads: 100/1h}\n")
	if v := propose(t, client, readProposal("r0", "nginx")); v.Outcome != gated.OutcomeApproved {
		t.Fatalf("r0: %s (%s)", v.Outcome, v.Reason)
	}
	// A bad file: refused, the limit of 100 stays.
	writeFile(t, dir, "budgets.yaml", "tenants:\n  acme:\n    agents:\n      a: {reads: 1/0s}\n")
	waitMetric(t, httpAddr, `gated_budget_reloads_total{result="refused"} 1`)
	if v := propose(t, client, readProposal("r1", "nginx")); v.Outcome != gated.OutcomeApproved {
		t.Fatalf("r1 after a bad file: %s (%s), want the limits in force kept", v.Outcome, v.Reason)
	}
	// A good one with a limit of 2 reads: two were admitted, the next is
	// refused.
	writeFile(t, dir, "budgets.yaml", "tenants:\n  acme:\n    agents:\n      a: {reads: 2/1h}\n")
	waitMetric(t, httpAddr, `gated_budget_reloads_total{result="applied"} 1`)
	v := propose(t, client, readProposal("r2", "nginx"))
	if v.Budget == nil || v.Budget.Max != 2 || v.Budget.Limit != gated.LimitReads {
		t.Fatalf("r2 after the new limit: %s (%s), want refused by reads at 2", v.Outcome, v.Reason)
	}
}

// TestServeBudgetsReloadRefusesAnEmptyFile: a budgets file is empty
// between its truncation and its write, and an editor that fails leaves
// it so. Read then, it must not put the defaults in force in place of the
// file's limits: it is refused, and the limits in force stay.
func TestServeBudgetsReloadRefusesAnEmptyFile(t *testing.T) {
	dir, httpAddr, client := serveReloadingBudgets(t, "tenants:\n  acme:\n    agents:\n      a: {reads: 2/1h}\n")
	for _, id := range []string{"r0", "r1"} {
		if v := propose(t, client, readProposal(id, "nginx")); v.Outcome != gated.OutcomeApproved {
			t.Fatalf("%s: %s (%s)", id, v.Outcome, v.Reason)
		}
	}
	writeFile(t, dir, "budgets.yaml", "")
	// The reload of the empty file is counted one way or the other.
	body := waitMetric(t, httpAddr, `gated_budget_reloads_total{result="refused"} 1`, `gated_budget_reloads_total{result="applied"} 1`)
	if !strings.Contains(body, `gated_budget_reloads_total{result="refused"} 1`) {
		t.Errorf("the empty budgets file was applied, want it refused")
	}
	v := propose(t, client, readProposal("r2", "nginx"))
	if v.Budget == nil || v.Budget.Max != 2 || v.Budget.Limit != gated.LimitReads {
		t.Fatalf("r2 after an empty budgets file: %s (%s), want refused by the reads limit of 2 in force", v.Outcome, v.Reason)
	}
}
