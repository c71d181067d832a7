// Command fleet is a simulated fleet of AI agents that puts gated in front
// of its tools. Each agent is a goroutine with its own fleet.ToolGate; its
// tools are plain Go functions wrapped with fleet.Guard, so reads run at
// once and every change runs only when gated approves it. The agents work through
// a realistic mix: reads, routine restarts and scale-outs, credential
// rotations, database changes that the policy routes to the dba persona,
// destructive operations, marketplace skills, and agents that try to skip
// review or approve themselves.
//
//	go run ./examples/fleet --nats-url nats://127.0.0.1:4222 --agents 8 --proposals 200
//
// It prints one line per tool call and a summary by outcome. It exits 1
// when a call got no answer or a tool ran without an approval.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		// -h or --help: the flag package printed the usage, as asked.
	case err != nil:
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

type options struct {
	natsURL   string
	agents    int
	calls     int
	tenants   []string
	seed      uint64
	wait      time.Duration
	jsonLines bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var tenants string
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.natsURL, "nats-url", nats.DefaultURL, "NATS server gated listens on")
	fs.IntVar(&o.agents, "agents", 8, "agents working at once")
	fs.IntVar(&o.calls, "proposals", 200, "tool calls the fleet makes in all; reads among them run without a proposal")
	fs.StringVar(&tenants, "tenants", "acme,initech", "tenants the agents work for, comma-separated")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the mix: the same seed makes the same calls")
	fs.DurationVar(&o.wait, "wait", 90*time.Second, "how long one call waits for its verdict")
	fs.BoolVar(&o.jsonLines, "json", false, "print JSON lines (one per call, then the summary) instead of text")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, t := range strings.Split(tenants, ",") {
		if t = strings.TrimSpace(t); t != "" {
			if !gated.ValidTenant(t) {
				return o, fmt.Errorf("--tenants: %q is not a tenant token ([a-z0-9_-]{1,64})", t)
			}
			o.tenants = append(o.tenants, t)
		}
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.agents < 1:
		return o, errors.New("--agents must be at least 1")
	case o.calls < 0:
		return o, errors.New("--proposals must not be negative")
	case len(o.tenants) == 0:
		return o, errors.New("--tenants names no tenant")
	case o.wait <= 0:
		return o, errors.New("--wait must be positive")
	}
	return o, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(o.natsURL, nats.Name("gated-fleet"), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w (is gated serve running?)", o.natsURL, err)
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc)
	if err != nil {
		return err
	}
	f := &simulation{client: client, opts: o, runID: runID(), printer: newPrinter(out, o.jsonLines)}
	plan := makePlan(o)
	var wg sync.WaitGroup
	for i := range o.agents {
		a, err := f.newAgent(i)
		if err != nil {
			return err
		}
		wg.Go(func() { a.work(ctx, plan[i]) })
	}
	wg.Wait()
	sum := f.printer.finish()
	if err := ctx.Err(); err != nil {
		return err
	}
	if sum.Unanswered > 0 {
		return fmt.Errorf("%d calls got no verdict", sum.Unanswered)
	}
	if sum.ToolRuns != sum.Reads+sum.Outcomes[gated.OutcomeApproved] {
		return fmt.Errorf("tools ran %d times for %d reads and %d approvals", sum.ToolRuns, sum.Reads, sum.Outcomes[gated.OutcomeApproved])
	}
	return nil
}

// runID names this run's hosts, so that two runs within gated's
// parallel-operation window do not change the same simulated host.
func runID() string {
	return fmt.Sprintf("%04x", rand.Uint32()&0xffff)
}

// scenario is one kind of call an agent makes.
type scenario int

const (
	listServices      scenario = iota // read: runs without a proposal
	restartService                    // write, SOP-001: approved
	scaleDeployment                   // write, SOP-002: approved
	rotateCredentials                 // write, SOP-003: approved
	createIndex                       // write, db_*: routed to dba, no SOP: rejected
	dropTable                         // destructive, db_*: routed to dba, no SOP: rejected
	killProcess                       // destructive, no SOP: rejected at review
	runSkill                          // a marketplace skill, no SOP: rejected
	skipReview                        // restart asking to skip review: no_skip_review
	forceApprove                      // restart approving itself: unsupported_force_approve
	restartEverywhere                 // tenant-wide restart: quorum of 2, blocked unless two personas can review
)

// mix weighs the scenarios, out of 100.
var mix = []struct {
	s      scenario
	weight int
}{
	{listServices, 24}, {restartService, 24}, {scaleDeployment, 10}, {rotateCredentials, 5},
	{createIndex, 7}, {dropTable, 5}, {killProcess, 5}, {runSkill, 6}, {skipReview, 6}, {forceApprove, 5},
	{restartEverywhere, 3},
}

// call is one planned tool call.
type call struct {
	n int // the call's number in the run
	s scenario
}

// makePlan deals the calls to the agents: call n goes to agent n mod
// agents, and the seed alone decides its scenario.
func makePlan(o options) [][]call {
	rng := rand.New(rand.NewPCG(o.seed, 0x9a7ed))
	plan := make([][]call, o.agents)
	for n := range o.calls {
		pick := rng.IntN(100)
		s := mix[len(mix)-1].s
		for _, m := range mix {
			if pick < m.weight {
				s = m.s
				break
			}
			pick -= m.weight
		}
		plan[n%o.agents] = append(plan[n%o.agents], call{n: n, s: s})
	}
	return plan
}

// simulation is one run of the fleet: the agents' shared client, the
// options, and where the calls are printed.
type simulation struct {
	client  fleet.Proposer
	opts    options
	runID   string
	printer *printer
	// gateOpts are further options of every agent's tool gate.
	gateOpts []fleet.ToolGateOption
}

// Tool arguments.
type (
	hostArgs struct{ Host string }
	svcArgs  struct {
		Host, Service string
		Flags         gated.Flags
		Everywhere    bool // every host of the tenant
	}
	scaleArgs struct {
		Deployment string
		From, To   int
	}
	credArgs  struct{ Database string }
	indexArgs struct{ Database, Table, Column string }
	tableArgs struct{ Database, Table string }
	procArgs  struct {
		Host string
		PID  int
	}
	skillArgs struct{ Skill, Input string }
)

// agent is one simulated agent: its ToolGate and its guarded tools.
type agent struct {
	name    string
	tenant  string
	f       *simulation
	last    atomic.Pointer[gated.Verdict] // the verdict of the agent's current call
	runs    int
	list    func(context.Context, hostArgs) (string, error)
	restart func(context.Context, svcArgs) (string, error)
	scale   func(context.Context, scaleArgs) (string, error)
	rotate  func(context.Context, credArgs) (string, error)
	index   func(context.Context, indexArgs) (string, error)
	drop    func(context.Context, tableArgs) (string, error)
	kill    func(context.Context, procArgs) (string, error)
	skill   func(context.Context, skillArgs) (string, error)
}

func (f *simulation) newAgent(i int) (*agent, error) {
	a := &agent{name: fmt.Sprintf("agent-%02d", i+1), tenant: f.opts.tenants[i%len(f.opts.tenants)], f: f}
	gate, err := fleet.NewToolGate(f.client, fleet.Identity{
		Tenant: a.tenant, Agent: a.name, Session: f.runID + "-" + a.name, Operator: &gated.Principal{ID: "alice", Roles: []string{"sre"}},
	}, append([]fleet.ToolGateOption{fleet.WithReviewTimeout(f.opts.wait), fleet.WithVerdictObserver(func(_ *gated.Proposal, v *gated.Verdict) { a.last.Store(v) })}, f.gateOpts...)...)
	if err != nil {
		return nil, err
	}
	prod := []string{"production"}
	a.list = fleet.Guard(gate, fleet.ToolSpec[hostArgs]{Action: "host_list_services", Class: gated.ClassRead},
		simulate(a, func(x hostArgs) string { return "listed services on " + x.Host }))
	a.restart = fleet.Guard(gate, fleet.ToolSpec[svcArgs]{
		Action: "host_restart_service", Class: gated.ClassWrite,
		Describe: func(x svcArgs) fleet.Change {
			if x.Everywhere {
				return fleet.Change{
					Target: map[string]any{"hosts": "all", "service": x.Service, "rollout": x.Host, "tags": prod},
					Reason: "roll " + x.Service + " on every host for the openssl fix", BlastRadius: gated.BlastTenantWide,
				}
			}
			return fleet.Change{
				Target: map[string]any{"host": x.Host, "service": x.Service, "tags": prod},
				Reason: x.Service + " on " + x.Host + " fails its health checks", BlastRadius: gated.BlastSingleDevice, Flags: x.Flags,
			}
		},
	}, simulate(a, func(x svcArgs) string { return "restarted " + x.Service + " on " + x.Host }))
	a.scale = fleet.Guard(gate, fleet.ToolSpec[scaleArgs]{
		Action: "k8s_scale_deployment", Class: gated.ClassWrite,
		Describe: func(x scaleArgs) fleet.Change {
			return fleet.Change{
				Target: map[string]any{"deployment": x.Deployment, "replicas": x.From, "tags": prod},
				Reason: fmt.Sprintf("p95 latency is over budget; scale %s from %d to %d replicas", x.Deployment, x.From, x.To),
				// A deployment's pods span the cluster's nodes.
				BlastRadius: gated.BlastCluster,
			}
		},
	}, simulate(a, func(x scaleArgs) string { return fmt.Sprintf("scaled %s to %d", x.Deployment, x.To) }))
	a.rotate = fleet.Guard(gate, fleet.ToolSpec[credArgs]{
		Action: "rotate_db_credentials", Class: gated.ClassWrite,
		Describe: func(x credArgs) fleet.Change {
			return fleet.Change{Target: map[string]any{"database": x.Database, "tags": prod},
				Reason: "the credential of " + x.Database + " is 90 days old", BlastRadius: gated.BlastCluster}
		},
	}, simulate(a, func(x credArgs) string { return "rotated the credential of " + x.Database }))
	a.index = fleet.Guard(gate, fleet.ToolSpec[indexArgs]{
		Action: "db_create_index", Class: gated.ClassWrite,
		Describe: func(x indexArgs) fleet.Change {
			return fleet.Change{Target: map[string]any{"database": x.Database, "table": x.Table, "tags": prod},
				Reason: "queries on " + x.Table + "." + x.Column + " scan the whole table", BlastRadius: gated.BlastCluster}
		},
	}, simulate(a, func(x indexArgs) string { return "indexed " + x.Table + "." + x.Column }))
	a.drop = fleet.Guard(gate, fleet.ToolSpec[tableArgs]{
		Action: "db_drop_table", Class: gated.ClassDestructive,
		Describe: func(x tableArgs) fleet.Change {
			return fleet.Change{Target: map[string]any{"database": x.Database, "table": x.Table, "tags": prod},
				Reason: x.Table + " has had no reads in a year", BlastRadius: gated.BlastCluster}
		},
	}, simulate(a, func(x tableArgs) string { return "dropped " + x.Table }))
	a.kill = fleet.Guard(gate, fleet.ToolSpec[procArgs]{
		Action: "kill_process", Class: gated.ClassDestructive,
		Describe: func(x procArgs) fleet.Change {
			return fleet.Change{Target: map[string]any{"host": x.Host, "pid": x.PID, "tags": prod},
				Reason: fmt.Sprintf("pid %d on %s holds 90%% CPU", x.PID, x.Host), BlastRadius: gated.BlastSingleDevice}
		},
	}, simulate(a, func(x procArgs) string { return fmt.Sprintf("killed %d on %s", x.PID, x.Host) }))
	a.skill = fleet.Guard(gate, fleet.ToolSpec[skillArgs]{
		Action: "market_web_skill", Class: gated.ClassWrite,
		Describe: func(x skillArgs) fleet.Change {
			return fleet.Change{Target: map[string]any{"skill": x.Skill, "input": x.Input},
				Reason: "a marketplace skill can fill in the change ticket", BlastRadius: gated.BlastSingleDevice}
		},
	}, simulate(a, func(x skillArgs) string { return "ran skill " + x.Skill }))
	return a, nil
}

// simulate is a tool that only says what it did; it counts its runs.
func simulate[A any](a *agent, say func(A) string) func(context.Context, A) (string, error) {
	return func(_ context.Context, args A) (string, error) {
		a.runs++
		return say(args), nil
	}
}

// work makes the agent's calls one after another, as an agent would.
func (a *agent) work(ctx context.Context, calls []call) {
	for _, c := range calls {
		if ctx.Err() != nil {
			return
		}
		a.last.Store(nil)
		before := a.runs
		action, class, ran, err := a.do(ctx, c)
		a.f.printer.record(result{
			Agent: a.name, Tenant: a.tenant, Action: action, Class: class,
			Verdict: a.last.Load(), Ran: ran, Err: err, ToolRuns: a.runs - before,
		})
	}
}

// do makes one call through the agent's guarded tools.
func (a *agent) do(ctx context.Context, c call) (action string, class gated.Class, ran string, err error) {
	host := fmt.Sprintf("web-%s-%03d", a.f.runID, c.n)
	db := fmt.Sprintf("orders-%s-%03d", a.f.runID, c.n)
	switch c.s {
	case listServices:
		ran, err = a.list(ctx, hostArgs{Host: host})
		return "host_list_services", gated.ClassRead, ran, err
	case restartService:
		ran, err = a.restart(ctx, svcArgs{Host: host, Service: "nginx"})
	case skipReview:
		ran, err = a.restart(ctx, svcArgs{Host: host, Service: "nginx", Flags: gated.Flags{SkipReview: true}})
	case forceApprove:
		ran, err = a.restart(ctx, svcArgs{Host: host, Service: "api", Flags: gated.Flags{ForceApprove: true, UserConfirmed: true}})
	case restartEverywhere:
		ran, err = a.restart(ctx, svcArgs{Host: host, Service: "nginx", Everywhere: true})
	case scaleDeployment:
		ran, err = a.scale(ctx, scaleArgs{Deployment: "checkout-" + a.f.runID + fmt.Sprintf("-%03d", c.n), From: 3, To: 5})
		return "k8s_scale_deployment", gated.ClassWrite, ran, err
	case rotateCredentials:
		ran, err = a.rotate(ctx, credArgs{Database: db})
		return "rotate_db_credentials", gated.ClassWrite, ran, err
	case createIndex:
		ran, err = a.index(ctx, indexArgs{Database: db, Table: "orders", Column: "customer_id"})
		return "db_create_index", gated.ClassWrite, ran, err
	case dropTable:
		ran, err = a.drop(ctx, tableArgs{Database: db, Table: "orders_archive_2019"})
		return "db_drop_table", gated.ClassDestructive, ran, err
	case killProcess:
		ran, err = a.kill(ctx, procArgs{Host: host, PID: 4000 + c.n})
		return "kill_process", gated.ClassDestructive, ran, err
	case runSkill:
		ran, err = a.skill(ctx, skillArgs{Skill: "ticket-filler", Input: host})
		return "market_web_skill", gated.ClassWrite, ran, err
	}
	return "host_restart_service", gated.ClassWrite, ran, err
}

// result is what one call came to.
type result struct {
	Agent, Tenant, Action string
	Class                 gated.Class
	Verdict               *gated.Verdict
	Ran                   string
	Err                   error
	ToolRuns              int
}

// line is a result as printed.
type line struct {
	Agent      string        `json:"agent"`
	Tenant     string        `json:"tenant"`
	Action     string        `json:"action"`
	Class      gated.Class   `json:"class"`
	ProposalID string        `json:"proposal_id,omitempty"`
	Outcome    gated.Outcome `json:"outcome,omitempty"`
	Stage      gated.Stage   `json:"stage,omitempty"`
	By         string        `json:"by,omitempty"` // the persona that reviewed, or the policy rule that denied
	Reason     string        `json:"reason,omitempty"`
	Ran        string        `json:"ran,omitempty"`
	Error      string        `json:"error,omitempty"`
}

// Summary is what the run came to; with --json it is the last line.
type Summary struct {
	Calls      int                   `json:"calls"`
	Reads      int                   `json:"reads"`
	Proposals  int                   `json:"proposals"`
	Outcomes   map[gated.Outcome]int `json:"outcomes"`
	ByStage    map[string]int        `json:"by_stage"` // "outcome/stage"
	ByReviewer map[string]int        `json:"by_reviewer"`
	ByRule     map[string]int        `json:"by_rule"`
	Unanswered int                   `json:"unanswered"`
	ToolRuns   int                   `json:"tool_runs"`
	Elapsed    float64               `json:"elapsed_s"`
}

type printer struct {
	mu    sync.Mutex
	out   io.Writer
	json  bool
	start time.Time
	sum   Summary
}

func newPrinter(out io.Writer, jsonLines bool) *printer {
	return &printer{out: out, json: jsonLines, start: time.Now(), sum: Summary{
		Outcomes: map[gated.Outcome]int{}, ByStage: map[string]int{}, ByReviewer: map[string]int{}, ByRule: map[string]int{},
	}}
}

func (p *printer) record(r result) {
	l := line{Agent: r.Agent, Tenant: r.Tenant, Action: r.Action, Class: r.Class, Ran: r.Ran}
	if v := r.Verdict; v != nil {
		l.ProposalID, l.Outcome, l.Stage, l.Reason = v.ProposalID, v.Outcome, v.Stage, v.Reason
		switch {
		case v.Policy != nil && len(v.Policy.Denies) > 0:
			l.By = v.Policy.Denies[0].Rule
		case len(v.Reviews) > 0:
			l.By = v.Reviews[0].Persona
		}
	}
	if r.Err != nil && r.Verdict == nil {
		l.Error = r.Err.Error()
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	s := &p.sum
	s.Calls++
	s.ToolRuns += r.ToolRuns
	switch {
	case r.Class == gated.ClassRead:
		s.Reads++
	case r.Verdict != nil:
		s.Proposals++
		s.Outcomes[l.Outcome]++
		s.ByStage[string(l.Outcome)+"/"+string(l.Stage)]++
		if len(r.Verdict.Reviews) > 0 {
			s.ByReviewer[r.Verdict.Reviews[0].Persona]++
		}
		if r.Verdict.Policy != nil {
			for _, d := range r.Verdict.Policy.Denies {
				s.ByRule[d.Rule]++
			}
		}
	default:
		s.Proposals++
		s.Unanswered++
	}
	if p.json {
		data, _ := json.Marshal(l)
		fmt.Fprintln(p.out, string(data))
		return
	}
	switch {
	case r.Class == gated.ClassRead && r.Err == nil:
		fmt.Fprintf(p.out, "%s %-8s %-22s %-9s %-6s %-26s %s\n", l.Agent, l.Tenant, l.Action, "read", "-", "no proposal", l.Ran)
	case r.Verdict != nil:
		detail := l.Reason
		if l.Ran != "" {
			detail = l.Ran + ": " + detail
		}
		fmt.Fprintf(p.out, "%s %-8s %-22s %-9s %-6s %-26s %s\n", l.Agent, l.Tenant, l.Action, l.Outcome, l.Stage, l.By, detail)
	default:
		fmt.Fprintf(p.out, "%s %-8s %-22s %-9s %-6s %-26s %s\n", l.Agent, l.Tenant, l.Action, "no answer", "-", "-", l.Error)
	}
}

// finish prints the summary and returns it.
func (p *printer) finish() Summary {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sum
	s.Elapsed = time.Since(p.start).Seconds()
	if p.json {
		data, _ := json.Marshal(map[string]Summary{"summary": s})
		fmt.Fprintln(p.out, string(data))
		return s
	}
	fmt.Fprintf(p.out, "\n%d tool calls in %.1fs: %d reads ran without a proposal, %d proposals; tools ran %d times\n\n",
		s.Calls, s.Elapsed, s.Reads, s.Proposals, s.ToolRuns)
	tw := tabwriter.NewWriter(p.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "outcome\tproposals\tshare\tstages")
	outcomes := []gated.Outcome{gated.OutcomeApproved, gated.OutcomeRejected, gated.OutcomeBlocked,
		gated.OutcomeError, gated.OutcomeTimeout, gated.OutcomeInvalid}
	for _, o := range outcomes {
		n := s.Outcomes[o]
		if n == 0 {
			continue
		}
		var stages []string
		for k, c := range s.ByStage {
			if out, stage, _ := strings.Cut(k, "/"); out == string(o) {
				stages = append(stages, fmt.Sprintf("%s %d", stage, c))
			}
		}
		sort.Strings(stages)
		fmt.Fprintf(tw, "%s\t%d\t%.0f%%\t%s\n", o, n, 100*float64(n)/float64(max(s.Proposals, 1)), strings.Join(stages, ", "))
	}
	if s.Unanswered > 0 {
		fmt.Fprintf(tw, "no answer\t%d\t%.0f%%\t\n", s.Unanswered, 100*float64(s.Unanswered)/float64(max(s.Proposals, 1)))
	}
	_ = tw.Flush()
	if len(s.ByRule) > 0 {
		fmt.Fprintf(p.out, "\npolicy rules that denied: %s\n", counts(s.ByRule))
	}
	if len(s.ByReviewer) > 0 {
		fmt.Fprintf(p.out, "reviewed by persona: %s\n", counts(s.ByReviewer))
	}
	return s
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
