package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/agreement"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/sop"
	"github.com/gated/gated/policies"
)

// rereviewOptions are the flags of `gated policy replay` that concern
// reviewers: which plugins the candidate set-up loads (as serve finds
// them), and the persona --rereview runs again.
type rereviewOptions struct {
	persona       string
	concurrency   int
	timeout       time.Duration
	pluginsDir    string
	defaultPlugin string
}

func (o *rereviewOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.persona, "rereview", "", "run the candidate reviewer of this persona again on its recorded review requests and report its agreement with the recorded decisions")
	f.IntVar(&o.concurrency, "rereview-concurrency", 4, "reviews --rereview runs at once")
	f.DurationVar(&o.timeout, "rereview-timeout", 0, "time limit of one review of --rereview (default: the persona's timeout, else 60s)")
	f.StringVar(&o.pluginsDir, "plugins-dir", "", "directory of reviewer plugin executables pinned by gated-plugins.lock, as serve loads them")
	f.StringVar(&o.defaultPlugin, "default-plugin", sop.Name, "plugin that reviews for personas naming none, as serve's")
}

func (o *rereviewOptions) check() error {
	switch {
	case o.concurrency < 1 || o.concurrency > 1024:
		return usageError("--rereview-concurrency %d: want 1 to 1024", o.concurrency)
	case o.timeout < 0:
		return usageError("--rereview-timeout %s: want a positive duration", o.timeout)
	}
	return nil
}

// recordedReview is what a replay reads of one review of a proposal: its
// review.started record and, once it ended, its review.finished record.
type recordedReview struct {
	Seq uint64
	// PolicyRevision is the revision of the policy that routed the review.
	PolicyRevision string
	Started        reviewStartedRecord
	// Finished is nil while the range holds no review.finished record of
	// the review.
	Finished *reviewFinishedRecord
}

// reviewStartedRecord is the data of a review.started record that a
// replay reads.
type reviewStartedRecord struct {
	ReviewID        string   `json:"review_id"`
	Persona         string   `json:"persona"`
	Plugin          string   `json:"plugin"`
	Tools           []string `json:"tools"`
	PersonaRevision string   `json:"persona_revision"`
	Model           string   `json:"model"`
}

// reviewFinishedRecord is the data of a review.finished record that a
// replay reads.
type reviewFinishedRecord struct {
	ReviewID      string `json:"review_id"`
	Plugin        string `json:"plugin"`
	PluginVersion string `json:"plugin_version"`
	Decision      string `json:"decision"`
	Outcome       string `json:"outcome"`
	Error         string `json:"error"`
	Why           string `json:"why"`
	Model         string `json:"model"`
}

// category is the review's result as --rereview compares it: the
// decision of a review that ended (approve, reject), or what ended it
// otherwise (error, timeout, blocked), which is never an approval.
func (f *reviewFinishedRecord) category() string {
	switch {
	case f.Error != "" && f.Outcome != "":
		return f.Outcome
	case f.Error != "":
		return string(engine.OutcomeError)
	case f.Decision == "":
		return "none"
	}
	return f.Decision
}

// why is the one line that explains the recorded result.
func (f *reviewFinishedRecord) why() string {
	if f.Error != "" {
		return f.Error
	}
	return f.Why
}

// decodeReviewStarted reads a review.started record's data.
func decodeReviewStarted(data []byte) (reviewStartedRecord, error) {
	var s reviewStartedRecord
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("decoding a review.started record: %w", err)
	}
	return s, s.check()
}

// check refuses a review.started record without what replay needs of it.
func (s *reviewStartedRecord) check() error {
	if s.ReviewID == "" || s.Persona == "" {
		return errors.New("decoding a review.started record: review_id and persona are required")
	}
	return nil
}

// decodeReviewFinished reads a review.finished record's data.
func decodeReviewFinished(data []byte) (reviewFinishedRecord, error) {
	var f reviewFinishedRecord
	if err := json.Unmarshal(data, &f); err != nil {
		return f, fmt.Errorf("decoding a review.finished record: %w", err)
	}
	return f, f.check()
}

// check refuses a review.finished record without what replay needs of it.
func (f *reviewFinishedRecord) check() error {
	if f.ReviewID == "" {
		return errors.New("decoding a review.finished record: review_id is required")
	}
	return nil
}

// reviewRecord is a review.started or review.finished record's data as
// replay reads it: started or finished (the one of its event), or err.
type reviewRecord struct {
	started  *reviewStartedRecord
	finished *reviewFinishedRecord
	err      error
}

// decodeReviewRecord reads the data of r, a review.started or
// review.finished record, with encoding/json.
func decodeReviewRecord(r *replayEvent) reviewRecord {
	var rr reviewRecord
	switch r.Event.Event {
	case engine.EventReviewStarted:
		s, err := decodeReviewStarted(r.Event.Data)
		rr.started, rr.err = &s, err
	case engine.EventReviewDone:
		f, err := decodeReviewFinished(r.Event.Data)
		rr.finished, rr.err = &f, err
	}
	return rr
}

// addReviewRecord keeps a review.started or review.finished record of the
// proposal p decided. A record that does not decode is kept as the reason
// the proposal's reviews cannot be checked.
func (p *recordedPolicy) addReviewRecord(r *replayEvent) {
	p.addReview(r, decodeReviewRecord(r))
}

// addReview keeps rr, the data of r, a review.started or review.finished
// record of the proposal p decided, as addReviewRecord does.
func (p *recordedPolicy) addReview(r *replayEvent, rr reviewRecord) {
	if rr.err != nil {
		p.reviewErr = fmt.Sprintf("seq %d: %v", r.Seq, rr.err)
		return
	}
	switch {
	case rr.started != nil:
		p.reviews = append(p.reviews, &recordedReview{Seq: r.Seq, PolicyRevision: r.Event.PolicyRevision, Started: *rr.started})
	case rr.finished != nil:
		f := rr.finished
		for _, rv := range slices.Backward(p.reviews) {
			if rv.Started.ReviewID == f.ReviewID {
				rv.Finished = f
				return
			}
		}
		p.reviewErr = fmt.Sprintf("seq %d: review.finished of review %s, which the range never started", r.Seq, f.ReviewID)
	}
}

// candidateReviewers is the reviewer set-up a replay compares the recorded
// reviews with: the candidate personas, and the plugins serve would load
// with the same flags and configuration. The plugins are launched only
// when a replay first needs them: to learn their versions, or to review.
type candidateReviewers struct {
	personas engine.Personas
	catalog  *policies.Catalog
	nc       *nats.Conn
	// setup is what serve would be given to find the plugins.
	setup serveOptions
	// specErr, when set, is returned instead of launching anything.
	specErr       error
	defaultPlugin string

	once     sync.Once
	host     *plugins.Host
	versions map[string]string
	startErr error
}

// newCandidateReviewers prepares the candidate set-up; nothing is read or
// launched until a recorded review needs checking or --rereview runs.
func newCandidateReviewers(o *policyReplayOptions, reg engine.Personas, ev *policies.Evaluator, nc *nats.Conn) *candidateReviewers {
	return &candidateReviewers{personas: reg, catalog: ev.Catalog(), nc: nc, defaultPlugin: o.rereview.defaultPlugin,
		setup: serveOptions{
			personasDir: o.personasDir, pluginsDir: o.rereview.pluginsDir,
			defaultPlugin: o.rereview.defaultPlugin, llmMaxConc: o.rereview.concurrency,
		}}
}

// start finds the plugins as serve would and launches them, once. A
// plugin set-up that cannot be read (a lock file that does not verify) or
// started is the reason every recorded review is stale, and refuses
// --rereview.
func (c *candidateReviewers) start(ctx context.Context) error {
	c.once.Do(func() {
		if c.specErr != nil {
			c.startErr = c.specErr
			return
		}
		specs, defaultPlugin, err := pluginSpecs(ctx, c.setup)
		if err != nil {
			c.startErr = err
			return
		}
		c.defaultPlugin = defaultPlugin
		host, err := plugins.NewHost(zap.NewNop(), defaultPlugin, specs...)
		if err != nil {
			c.startErr = fmt.Errorf("configuring the candidate's plugins: %w", err)
			return
		}
		host.SetTools(c.toolConfig())
		if err := host.Start(ctx); err != nil {
			host.Close()
			c.startErr = fmt.Errorf("starting the candidate's plugins: %w", err)
			return
		}
		c.host, c.versions = host, map[string]string{}
		for _, p := range host.Plugins() {
			c.versions[p.Name] = p.Version
		}
	})
	return c.startErr
}

// toolConfig answers the tool calls of re-run reviews from the candidate
// policy's catalog, and forwards the rest on the replayed deployment's
// connection, as serve does.
func (c *candidateReviewers) toolConfig() plugins.ToolConfig {
	cfg := plugins.ToolConfig{
		SOP: c.catalog.SOP,
		Describe: func(name string) (string, string, bool) {
			t, ok := c.catalog.Tool(name)
			return t.Description, string(t.InputSchema), ok
		},
	}
	if c.nc != nil {
		cfg.Forward = toolConfig(c.nc, nil, plugins.DefaultToolCallTimeout).Forward
	}
	return cfg
}

// close stops the plugins, if they were launched.
func (c *candidateReviewers) close() {
	if c.host != nil {
		c.host.Close()
	}
}

// pluginOf names the plugin that reviews for persona p.
func (c *candidateReviewers) pluginOf(p *engine.Persona) string {
	if p.Plugin != "" {
		return p.Plugin
	}
	return c.defaultPlugin
}

// staleness says why the recorded reviews of a proposal would not be
// given again by the candidate set-up, or "" when the candidate routes
// the review to a persona that reviewed it, with the same quorum, and
// every recorded reviewer is unchanged: the same persona revision, model
// and plugin version.
func (c *candidateReviewers) staleness(ctx context.Context, p *recordedPolicy, routedTo string, quorum int) string {
	switch {
	case p.reviewErr != "":
		return p.reviewErr
	case len(p.reviews) == 0:
		return "no review record of the proposal in the range (recorded by an older gated, or the range starts after the review)"
	case max(quorum, 1) != max(p.Review.Quorum, 1):
		return fmt.Sprintf("the candidate asks a quorum of %d, the recorded decision %d", max(quorum, 1), max(p.Review.Quorum, 1))
	}
	if !slices.ContainsFunc(p.reviews, func(rv *recordedReview) bool { return rv.Started.Persona == routedTo }) {
		names := make([]string, 0, len(p.reviews))
		for _, rv := range p.reviews {
			names = append(names, rv.Started.Persona)
		}
		return fmt.Sprintf("the candidate routes the review to persona %s; the recorded review is by %s", routedTo, strings.Join(slices.Compact(names), ", "))
	}
	for _, rv := range p.reviews {
		s := rv.Started
		if rv.Finished == nil {
			return fmt.Sprintf("review %s by persona %s has no review.finished record in the range", s.ReviewID, s.Persona)
		}
		cand, ok := c.personas.Persona(s.Persona)
		switch {
		case !ok:
			return fmt.Sprintf("persona %s is not in the candidate set", s.Persona)
		case s.PersonaRevision == "":
			return fmt.Sprintf("the review by persona %s was recorded without the persona's revision (an older gated)", s.Persona)
		case s.PersonaRevision != cand.Revision:
			return fmt.Sprintf("persona %s changed: revision %s recorded, %s in the candidate set", s.Persona, s.PersonaRevision, cand.Revision)
		case s.Model != cand.Model:
			return fmt.Sprintf("persona %s's model changed: %q recorded, %q in the candidate set", s.Persona, s.Model, cand.Model)
		}
		if err := c.start(ctx); err != nil {
			return err.Error()
		}
		name := c.pluginOf(cand)
		version, ok := c.versions[name]
		switch {
		case !ok:
			return fmt.Sprintf("persona %s's plugin %s is not configured in the candidate set-up", s.Persona, name)
		case version != rv.Finished.PluginVersion:
			return fmt.Sprintf("plugin %s changed: version %q recorded, %q in the candidate set-up", name, rv.Finished.PluginVersion, version)
		}
	}
	return ""
}

// keepReview counts a proposal that both policies send to review: its
// recorded review result is reused when every reviewer is unchanged, and
// counted stale, with the reason, when one changed.
func (rep *replayReport) keepReview(ctx context.Context, r *replayEvent, p *recordedPolicy, routedTo string, quorum int, reviewers *candidateReviewers) {
	why := "the candidate's reviewers are unknown"
	if reviewers != nil {
		why = reviewers.staleness(ctx, p, routedTo, quorum)
	}
	if why == "" {
		rep.ReviewReused++
		return
	}
	rep.ReviewStale++
	if len(rep.ReviewStaleNamed) < maxNamed {
		rep.ReviewStaleNamed = append(rep.ReviewStaleNamed, replayMissing{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Seq: r.Seq, Why: why})
	}
}

// rereviewReport is what --rereview found: how the candidate reviewer's
// answers to the recorded review requests agree with the recorded ones.
type rereviewReport struct {
	Persona         string `json:"persona"`
	PersonaRevision string `json:"persona_revision"`
	Plugin          string `json:"plugin"`
	PluginVersion   string `json:"plugin_version"`
	Model           string `json:"model,omitempty"`
	// Reviewed is how many recorded reviews were run again.
	Reviewed  int `json:"reviewed"`
	Agreed    int `json:"agreed"`
	Disagreed int `json:"disagreed"`
	// FlipRate is Disagreed / Reviewed.
	FlipRate float64 `json:"flip_rate"`
	// Kappa is Cohen's kappa over the categories, null when it is
	// undefined (KappaUndefined says why); KappaExact is it as a fraction.
	Kappa          *float64 `json:"kappa"`
	KappaExact     string   `json:"kappa_exact,omitempty"`
	KappaUndefined string   `json:"kappa_undefined,omitempty"`
	// Table counts "recorded -> candidate" categories.
	Table map[string]int `json:"table"`
	// Candidate counts the candidate's categories; error and timeout are
	// categories of their own, never an approval.
	Candidate map[string]int `json:"candidate"`
	// Unrebuildable counts recorded reviews of the persona whose request
	// could not be rebuilt; the first maxNamed are named.
	Unrebuildable      int                    `json:"unrebuildable"`
	UnrebuildableNamed []replayMissing        `json:"unrebuildable_named"`
	Disagreements      []rereviewDisagreement `json:"disagreements"`
	Seconds            float64                `json:"seconds"`
	Rate               float64                `json:"reviews_per_second"`

	// show is how many disagreements the text report lists.
	show int
}

// rereviewDisagreement is a review the candidate decided otherwise.
type rereviewDisagreement struct {
	Tenant       string `json:"tenant"`
	ID           string `json:"id"`
	Action       string `json:"action"`
	Seq          uint64 `json:"seq"`
	Recorded     string `json:"recorded"`
	RecordedWhy  string `json:"recorded_why"`
	Candidate    string `json:"candidate"`
	CandidateWhy string `json:"candidate_why"`
}

// rereviewJob is one recorded review request to run again.
type rereviewJob struct {
	seq      uint64
	recorded *reviewFinishedRecord
	req      engine.ReviewRequest
}

// rereviewer runs one candidate persona's reviewer on recorded review
// requests, at most concurrency at a time, and tallies its agreement.
type rereviewer struct {
	persona   *engine.Persona
	reviewers *candidateReviewers
	timeout   time.Duration
	jobs      chan rereviewJob
	workers   sync.WaitGroup
	closeJobs sync.Once
	started   time.Time

	mu    sync.Mutex
	table agreement.Table
	rep   rereviewReport
}

// newRereviewer launches the candidate's plugins and starts the workers.
// The persona must be in the candidate set.
func newRereviewer(ctx context.Context, name string, o *rereviewOptions, show int, reviewers *candidateReviewers) (*rereviewer, error) {
	persona, ok := reviewers.personas.Persona(name)
	if !ok {
		return nil, usageError("--rereview %q: no such persona in the candidate set (built-in personas and --personas)", name)
	}
	if err := reviewers.start(ctx); err != nil {
		return nil, err
	}
	timeout := o.timeout
	if timeout == 0 {
		timeout = persona.Timeout
	}
	if timeout == 0 {
		timeout = engine.DefaultReviewTimeout
	}
	plugin := reviewers.pluginOf(persona)
	rr := &rereviewer{
		persona: persona, reviewers: reviewers, timeout: timeout,
		jobs: make(chan rereviewJob, o.concurrency), started: time.Now(),
		rep: rereviewReport{
			Persona: persona.Name, PersonaRevision: persona.Revision, Plugin: plugin,
			PluginVersion: reviewers.versions[plugin], Model: persona.Model,
			Table: map[string]int{}, Candidate: map[string]int{},
			UnrebuildableNamed: []replayMissing{}, Disagreements: []rereviewDisagreement{}, show: show,
		},
	}
	for range o.concurrency {
		rr.workers.Go(func() {
			for job := range rr.jobs {
				rr.run(ctx, job)
			}
		})
	}
	return rr, nil
}

// unrebuildable counts a recorded review whose request cannot be rebuilt.
func (rr *rereviewer) unrebuildable(r *replayEvent, why string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.rep.Unrebuildable++
	if len(rr.rep.UnrebuildableNamed) < maxNamed {
		rr.rep.UnrebuildableNamed = append(rr.rep.UnrebuildableNamed, replayMissing{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Seq: r.Seq, Why: why})
	}
}

// submit queues the persona's last finished review of the proposal whose
// verdict record is r, with the request rebuilt from the recorded
// proposal, tool bag, SOP, history and routing. It waits for a free
// worker, so a replay never holds more than the workers' share.
func (rr *rereviewer) submit(ctx context.Context, r *replayEvent, p *recordedPolicy) error {
	if p == nil {
		return nil
	}
	var rv *recordedReview
	for _, c := range slices.Backward(p.reviews) {
		if c.Started.Persona == rr.persona.Name && c.Finished != nil {
			rv = c
			break
		}
	}
	if rv == nil {
		return nil
	}
	if p.Input == nil {
		rr.unrebuildable(r, "the policy.decided record keeps no input (recorded by an older gated)")
		return nil
	}
	prop, err := engine.DecodeProposal(p.Input.Proposal, r.Event.Tenant, p.Action, engine.Limits{})
	if err != nil {
		rr.unrebuildable(r, "the recorded proposal does not decode: "+err.Error())
		return nil
	}
	if prop.Kind == engine.KindRun {
		rr.unrebuildable(r, "a run review's context (criteria, earlier rounds) is not recorded with the review")
		return nil
	}
	req := engine.ReviewRequest{
		Proposal: prop, ProposalJSON: p.Input.Proposal, Persona: rr.persona,
		Tools: candidateTools(rv.Started.Tools, rr.persona), DeniedTools: p.DeniedTools, History: p.Input.History,
		PolicyRevision: rv.PolicyRevision, Why: p.Review.Why,
	}
	if p.SOP != "" {
		if s, ok := rr.reviewers.catalog.SOP(p.SOP); ok {
			req.SOP = s
		}
	}
	select {
	case rr.jobs <- rereviewJob{seq: r.Seq, recorded: rv.Finished, req: req}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// candidateTools is the recorded tool bag narrowed to the tools the
// candidate persona lists: the policy only ever removes tools from a
// persona's list, so a re-run review never gets a tool its persona does
// not name.
func candidateTools(recorded []string, persona *engine.Persona) []string {
	out := make([]string, 0, len(recorded))
	for _, t := range recorded {
		if slices.Contains(persona.Tools, t) {
			out = append(out, t)
		}
	}
	return out
}

// run reviews one recorded request again and tallies the answer.
func (rr *rereviewer) run(ctx context.Context, job rereviewJob) {
	req := job.req
	req.ReviewID = newRereviewID(job.seq)
	cat, why := rr.review(ctx, &req)
	old := job.recorded.category()
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.table.Add(old, cat)
	rr.rep.Table[old+" -> "+cat]++
	rr.rep.Candidate[cat]++
	if old != cat {
		rr.rep.Disagreements = append(rr.rep.Disagreements, rereviewDisagreement{
			Tenant: req.Proposal.Tenant, ID: req.Proposal.ID, Action: req.Proposal.Action, Seq: job.seq,
			Recorded: old, RecordedWhy: job.recorded.why(), Candidate: cat, CandidateWhy: why,
		})
	}
}

// review runs the candidate reviewer on req and reads its answer with the
// host's authority, as serve does: an error, a timeout or a reviewer that
// cannot be routed is its own category, never an approval.
func (rr *rereviewer) review(ctx context.Context, req *engine.ReviewRequest) (category, why string) {
	rctx, cancel := context.WithTimeout(ctx, rr.timeout)
	defer cancel()
	req.Deadline, _ = rctx.Deadline()
	rev, err := rr.reviewers.host.Route(rr.persona)
	if err != nil {
		return string(engine.OutcomeBlocked), err.Error()
	}
	res, err := rev.Review(rctx, *req)
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(rctx.Err(), context.DeadlineExceeded):
		return string(engine.OutcomeTimeout), fmt.Sprintf("passed its %s deadline", rr.timeout)
	case errors.Is(err, engine.ErrNoReviewer):
		return string(engine.OutcomeBlocked), err.Error()
	default:
		return string(engine.OutcomeError), err.Error()
	}
	judged, _, why := engine.Judge(res, rr.persona)
	return string(judged.Decision), why
}

// finish waits for the reviews in flight and returns the report. It may
// be called more than once.
func (rr *rereviewer) finish() *rereviewReport {
	rr.closeJobs.Do(func() { close(rr.jobs) })
	rr.workers.Wait()
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rep := rr.rep
	rep.Reviewed, rep.Agreed = rr.table.N(), rr.table.Agreed()
	rep.Disagreed = rep.Reviewed - rep.Agreed
	rep.FlipRate, _ = rr.table.FlipRate().Float64()
	if k, err := rr.table.Kappa(); err != nil {
		rep.KappaUndefined = err.Error()
	} else {
		f, _ := k.Float64()
		rep.Kappa, rep.KappaExact = &f, k.RatString()
	}
	slices.SortFunc(rep.Disagreements, func(a, b rereviewDisagreement) int { return compareSeq(a.Seq, b.Seq) })
	rep.Seconds = time.Since(rr.started).Seconds()
	if rep.Seconds > 0 {
		rep.Rate = float64(rep.Reviewed) / rep.Seconds
	}
	return &rep
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// newRereviewID names a review run again: the recorded verdict's sequence
// keeps it apart from every other review in flight.
func newRereviewID(seq uint64) string { return fmt.Sprintf("rr_%d", seq) }

// writeRereviewText prints the --rereview section of a replay report,
// with the first --show disagreements.
func writeRereviewText(b *strings.Builder, rr *rereviewReport) {
	fmt.Fprintf(b, "rereview of persona %s (revision %s) on plugin %s %s", rr.Persona, rr.PersonaRevision, rr.Plugin, rr.PluginVersion)
	if rr.Model != "" {
		fmt.Fprintf(b, ", model %s", rr.Model)
	}
	fmt.Fprintf(b, ":\n  reviewed again: %d, agreed: %d, disagreed: %d, flip rate %.4f\n", rr.Reviewed, rr.Agreed, rr.Disagreed, rr.FlipRate)
	if rr.Kappa != nil {
		fmt.Fprintf(b, "  Cohen's kappa: %.4f (%s)\n", *rr.Kappa, rr.KappaExact)
	} else {
		fmt.Fprintf(b, "  Cohen's kappa: undefined: %s\n", rr.KappaUndefined)
	}
	if rr.Unrebuildable > 0 {
		fmt.Fprintf(b, "  review requests not rebuildable: %d\n", rr.Unrebuildable)
		for _, m := range rr.UnrebuildableNamed {
			fmt.Fprintf(b, "    %s.%s (seq %d): %s\n", m.Tenant, m.ID, m.Seq, m.Why)
		}
	}
	writeCounts(b, "rereview (recorded -> candidate)", rr.Table)
	n := min(rr.show, len(rr.Disagreements))
	if n > 0 {
		fmt.Fprintf(b, "first %d disagreement(s):\n", n)
		for _, d := range rr.Disagreements[:n] {
			fmt.Fprintf(b, "  %s.%s (%s, seq %d)\n    recorded: %s: %s\n    candidate: %s: %s\n", d.Tenant, d.ID, d.Action, d.Seq,
				d.Recorded, d.RecordedWhy, d.Candidate, d.CandidateWhy)
		}
	}
	fmt.Fprintf(b, "  reviewed in %.2fs (%.1f/s)\n", rr.Seconds, rr.Rate)
}
