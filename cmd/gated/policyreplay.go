package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

// policyReplayOptions are the flags of `gated policy replay`.
type policyReplayOptions struct {
	bundle      policySourceOptions
	personasDir string
	url         string
	conn        natsConnOptions
	dataDir     string
	since       time.Duration
	fromSeq     uint64
	tenant      string
	format      string
	failOnFlip  bool
	show        int
	progress    string
	rereview    rereviewOptions
	integrity   replayIntegrityOptions
	workers     int
}

func policyReplayCmd() *cobra.Command {
	o := &policyReplayOptions{}
	c := &cobra.Command{
		Use:   "replay --policies DIR",
		Short: "Decide the recorded proposals again under a candidate policy and count what flips",
		Long: `replay reads the audit stream (of a running NATS server, --nats-url, or of
the embedded server's --data-dir while no gated runs on it) and decides every
recorded proposal again under the candidate bundle, with the input the live
decision had: the proposal, the persona, the target's history and the clock,
as its policy.decided record keeps them. It compares the two decisions as
shadow mode does (a flip is a difference of outcome) and prints old -> new
outcome counts, differences by kind, flips by rule, tenant and action, and the
first --show flips with both decisions. A proposal that both policies send to
the same reviewers keeps its recorded review result when those reviewers are
unchanged in the candidate set-up (the same persona revision, model and
plugin version, with --personas and the plugins serve would load); otherwise
it is counted "review stale" and named. One they send to other reviewers
(persona, quorum, also) is counted and named as a review change.
--rereview PERSONA runs that persona's candidate reviewer (a real plugin
process) again on its recorded review requests and reports its agreement
with the recorded decisions: the flip rate, Cohen's kappa and the
disagreements. A proposal whose input cannot be rebuilt is counted and
named. The range is checked as "audit verify" checks the stream, with the
records' MACs given --audit-key-file (with --data-dir, its audit.key), and
its end against the stream's last sequence (every tenant) and --anchors; a
range with a record altered, forged or missing is reported and the replay
fails, never counted as complete.
Exit status: 0 replayed, 4 --fail-on-flip and an outcome flipped, 1 the range
is not intact or an error, 2 bad usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.integrity.stdin = cmd.InOrStdin()
			return runPolicyReplay(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := c.Flags()
	o.bundle.register(f)
	f.StringVar(&o.personasDir, "personas", "", "directory of persona files (*.md) added to the built-in personas")
	f.StringVar(&o.url, "nats-url", nats.DefaultURL, "NATS server URL of the deployment whose history to replay")
	f.StringVar(&o.dataDir, "data-dir", "", "replay the embedded server's JetStream files in this directory instead of --nats-url")
	f.DurationVar(&o.since, "since", 0, "replay the records of this last period, e.g. 24h (default: all)")
	f.Uint64Var(&o.fromSeq, "from-seq", 0, "replay from this audit stream sequence")
	f.StringVar(&o.tenant, "tenant", "", "replay this tenant's proposals only")
	f.StringVar(&o.format, "format", "text", "text or json")
	f.BoolVar(&o.failOnFlip, "fail-on-flip", false, "exit 4 when any outcome flips, for CI")
	f.IntVar(&o.show, "show", 10, "list the first N flipped proposals with both decisions, and the first N whose reviewers change; -1 lists all")
	f.StringVar(&o.progress, "progress", "auto", "progress line on stderr: auto (on a terminal), on or off")
	o.integrity.register(f)
	f.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "goroutines that decode and decide (1 decides on one)")
	o.conn.register(f)
	o.rereview.register(f)
	return c
}

// exitFlipped is the exit status of a replay with --fail-on-flip that
// flipped an outcome.
const exitFlipped = 4

func (o *policyReplayOptions) check() error {
	switch {
	case o.bundle.dir == "":
		return usageError("--policies DIR is required: the candidate policy to replay")
	case o.since < 0:
		return usageError("--since %s: want a positive duration", o.since)
	case o.since > 0 && o.fromSeq > 0:
		return usageError("give --since or --from-seq, not both")
	case o.tenant != "" && !engine.ValidTenant(o.tenant):
		return usageError("--tenant %q must match [a-z0-9_-]{1,64}", o.tenant)
	case o.workers < 1:
		return usageError("--workers %d: want 1 or more", o.workers)
	case o.show < -1:
		return usageError("--show %d: want 0 or more, or -1 for all", o.show)
	case o.progress != "auto" && o.progress != "on" && o.progress != "off":
		return usageError("--progress %q: want auto, on or off", o.progress)
	}
	if err := o.rereview.check(); err != nil {
		return err
	}
	return checkFormat(o.format)
}

func runPolicyReplay(ctx context.Context, w, errw io.Writer, o *policyReplayOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	reg, err := loadPersonas(o.personasDir, errw)
	if err != nil {
		return err
	}
	keys, anchors, err := o.integrity.load(o.dataDir, o.tenant)
	if err != nil {
		return err
	}
	b, _, err := loadPolicyBundle(&o.bundle, nil, errw)
	if err != nil {
		return err
	}
	ev, err := policies.Compile(ctx, b, o.bundle.compileOptions()...)
	if err != nil {
		return fmt.Errorf("compiling the candidate policy: %w", err)
	}
	js, closeConn, err := o.connect()
	if err != nil {
		return err
	}
	defer closeConn()
	reviewers := newCandidateReviewers(o, reg, ev, js.Conn())
	defer reviewers.close()
	var rr *rereviewer
	if o.rereview.persona != "" {
		if rr, err = newRereviewer(ctx, o.rereview.persona, &o.rereview, o.show, reviewers); err != nil {
			return err
		}
		// On an early return the workers stop before the plugins do.
		defer rr.finish()
	}
	q := audit.Query{Tenant: o.tenant, StartSeq: o.fromSeq}
	if o.since > 0 {
		q.Since = time.Now().Add(-o.since)
	}
	var read atomic.Int64
	total, err := rangeSize(ctx, js, q)
	if err != nil {
		return err
	}
	stop := startProgress(errw, o.progress, "replay", total, &read)
	defer replayGC()()
	rep, err := replayHistory(ctx, js, q, ev, reg, replayConfig{show: o.show, read: &read, workers: o.workers,
		keys: keys, anchors: anchors, reviewers: reviewers, rereview: rr})
	stop()
	if err != nil {
		return err
	}
	if o.format == "json" {
		err = writeJSON(w, rep)
	} else {
		err = writeReplayText(w, rep)
	}
	if err != nil {
		return err
	}
	switch {
	case !rep.Intact:
		return &exitError{code: exitFailure, err: errors.New("the audit range is not intact: the replay is incomplete"), silent: true}
	case o.failOnFlip && rep.Flips > 0:
		return &exitError{code: exitFlipped, err: fmt.Errorf("%d outcome(s) flipped", rep.Flips), silent: true}
	}
	return nil
}

// connect opens JetStream on --nats-url, or on an embedded server over
// --data-dir that listens on a free local port.
func (o *policyReplayOptions) connect() (jetstream.JetStream, func(), error) {
	url := o.url
	var shutdown func()
	if o.dataDir != "" {
		// The lock keeps a serve off the files while the replay reads them.
		lock, err := bus.LockDataDir(o.dataDir)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: stop the gated that holds it, or replay through --nats-url", err)
		}
		s, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: o.dataDir}, zap.NewNop())
		if err != nil {
			lock.Release()
			return nil, nil, fmt.Errorf("opening the data dir %s: %w", o.dataDir, err)
		}
		url, shutdown = s.ClientURL(), func() { s.Shutdown(); s.WaitForShutdown(); lock.Release() }
	}
	nc, err := o.conn.connect(url, "gated-policy-replay", nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		if shutdown != nil {
			shutdown()
		}
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	closeAll := func() {
		nc.Close()
		if shutdown != nil {
			shutdown()
		}
	}
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("opening JetStream: %w", err)
	}
	return js, closeAll, nil
}

// rangeSize estimates how many messages the query reads, for the
// progress line: the stream's messages from the start sequence on.
func rangeSize(ctx context.Context, js jetstream.JetStream, q audit.Query) (int, error) {
	s, err := js.Stream(ctx, audit.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, audit.ErrNoStream
	}
	if err != nil {
		return 0, fmt.Errorf("opening stream %s: %w", audit.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", audit.Stream, err)
	}
	first := max(info.State.FirstSeq, q.StartSeq)
	if info.State.LastSeq < first {
		return 0, nil
	}
	return int(info.State.LastSeq - first + 1), nil
}

// replayConfig tunes replayHistory.
type replayConfig struct {
	// show is how many flips the report lists.
	show int
	// read counts the messages read, for a progress line; may be nil.
	read *atomic.Int64
	// keys are the audit keys whose MACs the range check accepts.
	keys [][]byte
	// reviewers is the candidate reviewer set-up recorded reviews are
	// checked against; nil counts every recorded review stale.
	reviewers *candidateReviewers
	// rereview, when set, runs a candidate reviewer again on the recorded
	// review requests of its persona.
	rereview *rereviewer
	// anchors are heads kept from an earlier audit verify.
	anchors []audit.Head
	// workers is how many goroutines decode and decide; GOMAXPROCS when
	// 0 or less.
	workers int
}

// maxNamed bounds how many unrebuildable proposals the report names.
const maxNamed = 100

// replayReport is what a replay found.
type replayReport struct {
	// Revision is the candidate policy's.
	Revision string `json:"revision"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	Records  uint64 `json:"records"`
	// Intact is false when the range check found a problem (Problems).
	Intact   bool            `json:"intact"`
	Problems []audit.Problem `json:"problems"`
	// Integrity says what the range check covered: MACs, the range's end.
	Integrity replayIntegrity `json:"integrity"`
	// Verdicts is how many verdicts the range holds; Replayed how many
	// of them were decided again.
	Verdicts int `json:"verdicts"`
	Replayed int `json:"replayed"`
	Flips    int `json:"flips"`
	// Outcomes counts old -> new outcomes, e.g. "approved -> rejected".
	Outcomes      map[string]int `json:"outcomes"`
	FlipsByRule   map[string]int `json:"flips_by_rule"`
	FlipsByTenant map[string]int `json:"flips_by_tenant"`
	FlipsByAction map[string]int `json:"flips_by_action"`
	// ReviewReused counts proposals both policies send to review, whose
	// recorded review result is kept: their reviewers are unchanged.
	ReviewReused int `json:"review_reused"`
	// ReviewStale counts such proposals whose recorded reviewer changed
	// in the candidate set-up (or cannot be told): their recorded result
	// is kept in the counts above, and the first maxNamed are named.
	ReviewStale      int             `json:"review_stale"`
	ReviewStaleNamed []replayMissing `json:"review_stale_named"`
	// Rereview is what --rereview found; absent without it.
	Rereview *rereviewReport `json:"rereview,omitempty"`
	// ReviewChanged counts proposals both policies send to review, but
	// not to the same reviewers (persona, quorum, also): not a flip of
	// outcome, yet the recorded review does not stand for the candidate.
	// ReviewChanges names them, as many as the flips listed.
	ReviewChanged int                  `json:"review_changed"`
	ReviewChanges []replayReviewChange `json:"review_changes"`
	// Differences counts the proposals by kind of difference between the
	// recorded and the candidate's policy decision, as shadow mode counts
	// them (engine.CompareShadow): error, outcome (a flip), denies, route.
	Differences map[string]int `json:"differences"`
	// NotPolicy counts verdicts the policy did not decide, by stage
	// (invalid proposals, duplicates): the candidate cannot change them.
	NotPolicy map[string]int `json:"not_policy"`
	// Unrebuildable counts the verdicts whose input could not be rebuilt;
	// Unnamed how many of them are beyond the first maxNamed listed.
	Unrebuildable      int             `json:"unrebuildable"`
	UnrebuildableNamed []replayMissing `json:"unrebuildable_named"`
	Shown              []replayFlip    `json:"first_flips"`
	// Workers is how many goroutines decoded and decided. Seconds is the
	// wall time of the whole replay and Rate the proposals it decided per
	// second of it, reading included. The read and the decisions overlap:
	// ReadSeconds is the wall time the reader spent reading, not waiting
	// for the workers, and DecideSeconds the wall time the workers had
	// records to decode and decide, not waiting for the reader; each rate
	// is what that side sustains.
	Workers       int     `json:"workers"`
	Seconds       float64 `json:"seconds"`
	Rate          float64 `json:"replayed_per_second"`
	ReadSeconds   float64 `json:"read_seconds"`
	DecideSeconds float64 `json:"decide_seconds"`
	ReadRate      float64 `json:"read_records_per_second"`
	DecideRate    float64 `json:"decided_per_second"`

	reviewers *candidateReviewers
	// outcomeKeys are the keys of Outcomes, made once per pair.
	outcomeKeys map[[2]engine.Outcome]string
}

// replayMissing names a verdict whose input could not be rebuilt.
type replayMissing struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Seq    uint64 `json:"seq"`
	Why    string `json:"why"`
}

// replayDecision is one side of a flip.
type replayDecision struct {
	Outcome engine.Outcome `json:"outcome"`
	Stage   engine.Stage   `json:"stage"`
	Reason  string         `json:"reason"`
	Denies  []engine.Deny  `json:"denies"`
}

// replayFlip is one proposal whose outcome flipped.
type replayFlip struct {
	Tenant string         `json:"tenant"`
	ID     string         `json:"id"`
	Action string         `json:"action"`
	Seq    uint64         `json:"seq"`
	Old    replayDecision `json:"old"`
	New    replayDecision `json:"new"`
	// Kinds and Rules are how the two policy decisions differ, as
	// engine.CompareShadow says (and shadow mode records).
	Kinds []string `json:"kinds"`
	Rules []string `json:"rules"`
}

// outcomeReview is the new outcome of a proposal the candidate sends to a
// review that was never asked: the recorded decision settled it at policy.
const outcomeReview engine.Outcome = "review"

// recordedPolicy is what replay reads of a policy.decided record.
type recordedPolicy struct {
	Action      string              `json:"action"`
	Denies      []engine.Deny       `json:"denies"`
	Review      engine.Route        `json:"review"`
	Run         *engine.RunPolicy   `json:"run"`
	Error       string              `json:"error"`
	Input       *engine.ReplayInput `json:"input"`
	SOP         string              `json:"sop"`
	DeniedTools []string            `json:"denied_tools"`

	// reviews are the proposal's reviews, from their records; reviewErr
	// says why they cannot be read, when a record does not decode.
	reviews   []*recordedReview
	reviewErr string
}

// decodeRecordedPolicy reads a policy.decided record's data; data that
// does not decode is kept as the reason the input cannot be rebuilt.
func decodeRecordedPolicy(data []byte) *recordedPolicy {
	var p recordedPolicy
	if err := json.Unmarshal(data, &p); err != nil {
		return &recordedPolicy{Error: "the policy.decided record does not decode: " + err.Error()}
	}
	return &p
}

// settledAtPolicy says whether the recorded decision settled the proposal
// before any review.
func (p *recordedPolicy) settledAtPolicy() bool {
	return len(p.Denies) > 0 || !p.Review.Required || p.Review.Blocked != ""
}

// newReplayReport is an empty report of a replay under revision.
func newReplayReport(revision string) *replayReport {
	return &replayReport{
		Revision: revision, Outcomes: map[string]int{}, FlipsByRule: map[string]int{},
		FlipsByTenant: map[string]int{}, FlipsByAction: map[string]int{}, NotPolicy: map[string]int{},
		UnrebuildableNamed: []replayMissing{}, Shown: []replayFlip{},
		ReviewChanges: []replayReviewChange{}, Differences: map[string]int{}, ReviewStaleNamed: []replayMissing{},
	}
}

// missing counts a verdict whose input cannot be rebuilt, and names it.
func (rep *replayReport) missing(r *replayEvent, why string) {
	rep.Unrebuildable++
	if len(rep.UnrebuildableNamed) < maxNamed {
		rep.UnrebuildableNamed = append(rep.UnrebuildableNamed, replayMissing{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Seq: r.Seq, Why: why})
	}
}

// verdict counts the verdict record r and decides its proposal again
// from its policy.decided record p (nil when the range holds none). r is
// a record audit.DecodeRecord returned: its data is valid JSON.
func (rep *replayReport) verdict(ctx context.Context, ev *policies.Evaluator, reg engine.Personas,
	r *replayEvent, p *recordedPolicy, show int) {
	rep.Verdicts++
	old, err := decodeRecordedVerdict(r.Event.Data)
	if err != nil {
		rep.missing(r, "the verdict record does not decode: "+err.Error())
		return
	}
	rep.replay(ctx, ev, reg, r, p, &old, show)
}

// replay decides the proposal of verdict record r again, from its
// policy.decided record p (nil when the range holds none).
func (rep *replayReport) replay(ctx context.Context, ev *policies.Evaluator, reg engine.Personas,
	r *replayEvent, p *recordedPolicy, old *recordedVerdict, show int) {
	if p == nil {
		if old.Stage == engine.StageValidation || old.Stage == engine.StageDedupe {
			rep.NotPolicy[string(old.Stage)]++
			return
		}
		rep.missing(r, "no policy.decided record of the proposal in the range")
		return
	}
	switch {
	case p.Input == nil && p.Error != "":
		rep.missing(r, "the recorded evaluation failed and kept no input: "+p.Error)
		return
	case p.Input == nil:
		rep.missing(r, "the policy.decided record keeps no input (recorded by an older gated)")
		return
	}
	prop, err := engine.DecodeProposal(p.Input.Proposal, r.Event.Tenant, p.Action, engine.Limits{})
	if err != nil {
		rep.missing(r, "the recorded proposal does not decode: "+err.Error())
		return
	}
	rep.Replayed++
	in := engine.PolicyInput{Proposal: prop, History: p.Input.History, RunRecord: p.Input.RunRecord, Budget: p.Input.Budget, Now: p.Input.Now}
	oldSide := replayDecision{Outcome: old.Outcome, Stage: old.Stage, Reason: old.Reason, Denies: sortedDenies(p.Denies)}
	var newSide replayDecision
	pd, routed, err := engine.EvaluateRouted(ctx, ev.Evaluate, reg, in, p.Input.Persona, true)
	cmp := compareRecorded(prop, reg, p, pd, routed, err)
	switch settled, done := engine.PolicyOutcome(prop, pd, routed); {
	case err != nil:
		newSide = replayDecision{Outcome: engine.OutcomeError, Stage: engine.StagePolicy, Reason: "policy evaluation failed: " + err.Error(), Denies: []engine.Deny{}}
	case done:
		newSide = replayDecision{Outcome: settled.Outcome, Stage: settled.Stage, Reason: settled.Reason, Denies: settled.Denies}
	case !p.settledAtPolicy() && cmp.ReviewChanged():
		// Not reused: the recorded review is not the candidate's reviewers'.
		newSide = oldSide
		newSide.Denies = settled.Denies
		rep.reviewChanged(r, prop.Action, cmp, show)
	case !p.settledAtPolicy():
		rep.keepReview(ctx, r, p, routed.Name, pd.Review.Quorum, rep.reviewers)
		newSide = oldSide
		newSide.Denies = settled.Denies
	default:
		newSide = replayDecision{Outcome: outcomeReview, Stage: engine.StageReview, Reason: "the candidate sends it to a review the recorded decision never asked", Denies: settled.Denies}
	}
	rep.Outcomes[rep.outcomeKey(oldSide.Outcome, newSide.Outcome)]++
	for _, k := range cmp.Kinds {
		rep.Differences[k]++
	}
	if !cmp.Flipped() {
		return
	}
	rep.Flips++
	for _, rule := range flipRules(oldSide.Denies, newSide.Denies) {
		rep.FlipsByRule[rule]++
	}
	rep.FlipsByTenant[r.Event.Tenant]++
	rep.FlipsByAction[prop.Action]++
	if listed(len(rep.Shown), show) {
		rep.Shown = append(rep.Shown, replayFlip{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Action: prop.Action, Seq: r.Seq,
			Old: oldSide, New: newSide, Kinds: cmp.Kinds, Rules: nonNil(cmp.Rules)})
	}
}

// outcomeKey is the key of Outcomes for a change from old to cur.
func (rep *replayReport) outcomeKey(old, cur engine.Outcome) string {
	pair := [2]engine.Outcome{old, cur}
	k, ok := rep.outcomeKeys[pair]
	if !ok {
		k = string(old) + " -> " + string(cur)
		if rep.outcomeKeys == nil {
			rep.outcomeKeys = map[[2]engine.Outcome]string{}
		}
		rep.outcomeKeys[pair] = k
	}
	return k
}

func sortedDenies(d []engine.Deny) []engine.Deny {
	out := slices.Clone(d)
	if out == nil {
		out = []engine.Deny{}
	}
	slices.SortStableFunc(out, func(a, b engine.Deny) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

// flipRules names the rules that made a flip: those that deny on one side
// only, or "(routing)" when the denies are the same and the routing or
// the review changed the outcome.
func flipRules(old, cur []engine.Deny) []string {
	if rules := engine.RulesDeniedOnOneSide(old, cur); len(rules) > 0 {
		return rules
	}
	return []string{"(routing)"}
}

// writeReplayText prints the report for a person.
func writeReplayText(w io.Writer, rep *replayReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "candidate policy revision %s\n", rep.Revision)
	fmt.Fprintf(&b, "audit range: seq %d-%d, %d records\n", rep.FirstSeq, rep.LastSeq, rep.Records)
	writeIntegrityText(&b, rep.Integrity)
	if !rep.Intact {
		fmt.Fprintf(&b, "RANGE NOT INTACT: %d problem(s); the replay below is incomplete\n", len(rep.Problems))
		for _, p := range rep.Problems {
			fmt.Fprintf(&b, "  seq %d tenant %s: %s: %s\n", p.Seq, p.Tenant, p.Kind, p.Detail)
		}
	}
	fmt.Fprintf(&b, "verdicts: %d, replayed: %d, flipped: %d, not decided by the policy: %d, input not rebuildable: %d\n",
		rep.Verdicts, rep.Replayed, rep.Flips, sumCounts(rep.NotPolicy), rep.Unrebuildable)
	fmt.Fprintf(&b, "reviews reused: %d proposal(s) both policies send to review keep their recorded result, the reviewers unchanged; review stale: %d (reviewer changed, result kept)\n",
		rep.ReviewReused, rep.ReviewStale)
	writeReviewChangesText(&b, rep)
	writeCounts(&b, "outcomes (old -> new)", rep.Outcomes)
	writeCounts(&b, "differences by kind (as shadow mode counts them)", rep.Differences)
	writeCounts(&b, "flips by rule", rep.FlipsByRule)
	writeCounts(&b, "flips by tenant", rep.FlipsByTenant)
	writeCounts(&b, "flips by action", rep.FlipsByAction)
	writeCounts(&b, "not decided by the policy, by stage", rep.NotPolicy)
	if len(rep.Shown) > 0 {
		fmt.Fprintf(&b, "first %d flip(s):\n", len(rep.Shown))
		for _, f := range rep.Shown {
			fmt.Fprintf(&b, "  %s.%s (%s, seq %d)\n    old: %s at %s: %s\n    new: %s at %s: %s\n", f.Tenant, f.ID, f.Action, f.Seq,
				f.Old.Outcome, f.Old.Stage, f.Old.Reason, f.New.Outcome, f.New.Stage, f.New.Reason)
		}
	}
	if rep.Unrebuildable > 0 {
		fmt.Fprintf(&b, "input not rebuildable (%d, first %d named):\n", rep.Unrebuildable, len(rep.UnrebuildableNamed))
		for _, m := range rep.UnrebuildableNamed {
			fmt.Fprintf(&b, "  %s.%s (seq %d): %s\n", m.Tenant, m.ID, m.Seq, m.Why)
		}
	}
	if rep.ReviewStale > 0 {
		fmt.Fprintf(&b, "review stale (%d, first %d named):\n", rep.ReviewStale, len(rep.ReviewStaleNamed))
		for _, m := range rep.ReviewStaleNamed {
			fmt.Fprintf(&b, "  %s.%s (seq %d): %s\n", m.Tenant, m.ID, m.Seq, m.Why)
		}
	}
	if rep.Rereview != nil {
		writeRereviewText(&b, rep.Rereview)
	}
	fmt.Fprintf(&b, "replayed %d in %.2fs (%.0f/s) on %d worker(s): read %d records in %.2fs (%.0f/s), decided in %.2fs (%.0f/s)\n",
		rep.Replayed, rep.Seconds, rep.Rate, rep.Workers, rep.Records, rep.ReadSeconds, rep.ReadRate, rep.DecideSeconds, rep.DecideRate)
	_, err := io.WriteString(w, b.String())
	return err
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// writeCounts prints a titled count table, largest first.
func writeCounts(b *strings.Builder, title string, m map[string]int) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	fmt.Fprintf(b, "%s:\n", title)
	for _, k := range keys {
		fmt.Fprintf(b, "  %8d  %s\n", m[k], k)
	}
}
