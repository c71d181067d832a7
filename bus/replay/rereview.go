package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/replay/internal/agreement"
	"github.com/gated/gated/engine"
)

// RereviewConfig says which candidate reviewer a re-review runs again,
// and how.
type RereviewConfig struct {
	// Persona names the candidate persona whose reviewer runs again on
	// the persona's recorded review requests. Required.
	Persona string
	// Concurrency is how many reviews run at once; 1 when 0 or less.
	Concurrency int
	// Timeout is the time limit of one review: the persona's timeout when
	// 0, and engine.DefaultReviewTimeout when the persona has none.
	Timeout time.Duration
	// Show is how many disagreements the text report lists.
	Show int
}

// RereviewReport is what a re-review found: how the candidate reviewer's
// answers to the recorded review requests agree with the recorded ones.
type RereviewReport struct {
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
	// could not be rebuilt; the first 100 are named.
	Unrebuildable      int            `json:"unrebuildable"`
	UnrebuildableNamed []Missing      `json:"unrebuildable_named"`
	Disagreements      []Disagreement `json:"disagreements"`
	Seconds            float64        `json:"seconds"`
	Rate               float64        `json:"reviews_per_second"`

	// show is how many disagreements the text report lists.
	show int
}

// Disagreement is a review the candidate decided otherwise.
type Disagreement struct {
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
	recorded *gated.ReviewFinishedData
	req      engine.ReviewRequest
}

// Rereviewer runs one candidate persona's reviewer on recorded review
// requests, at most concurrency at a time, and tallies its agreement.
type Rereviewer struct {
	persona   *engine.Persona
	reviewers *Reviewers
	timeout   time.Duration
	jobs      chan rereviewJob
	workers   sync.WaitGroup
	closeJobs sync.Once
	started   time.Time

	mu    sync.Mutex
	table agreement.Table
	rep   RereviewReport
}

// NewRereviewer launches the candidate's plugins and starts the workers,
// which review on ctx; Config.Rereview hands it to Run, and Close stops it
// when Run does not. The persona must be in the candidate set: an unknown
// one is an error that wraps ErrUnknownPersona. A plugin set-up that
// cannot be read or started is returned as Reviewers' Plugins returned it,
// or wrapped.
func NewRereviewer(ctx context.Context, reviewers *Reviewers, cfg RereviewConfig) (*Rereviewer, error) {
	persona, ok := reviewers.personas.Persona(cfg.Persona)
	if !ok {
		return nil, fmt.Errorf("persona %q: %w", cfg.Persona, ErrUnknownPersona)
	}
	if err := reviewers.start(ctx); err != nil {
		return nil, err
	}
	concurrency := max(cfg.Concurrency, 1)
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = persona.Timeout
	}
	if timeout == 0 {
		timeout = engine.DefaultReviewTimeout
	}
	plugin := reviewers.pluginOf(persona)
	rr := &Rereviewer{
		persona: persona, reviewers: reviewers, timeout: timeout,
		jobs: make(chan rereviewJob, concurrency), started: time.Now(),
		rep: RereviewReport{
			Persona: persona.Name, PersonaRevision: persona.Revision, Plugin: plugin,
			PluginVersion: reviewers.versions[plugin], Model: persona.Model,
			Table: map[string]int{}, Candidate: map[string]int{},
			UnrebuildableNamed: []Missing{}, Disagreements: []Disagreement{}, show: cfg.Show,
		},
	}
	for range concurrency {
		rr.workers.Go(func() {
			for job := range rr.jobs {
				rr.run(ctx, job)
			}
		})
	}
	return rr, nil
}

// unrebuildable counts a recorded review whose request cannot be rebuilt.
func (rr *Rereviewer) unrebuildable(r *replayEvent, why string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.rep.Unrebuildable++
	if len(rr.rep.UnrebuildableNamed) < maxNamed {
		rr.rep.UnrebuildableNamed = append(rr.rep.UnrebuildableNamed, Missing{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Seq: r.Seq, Why: why})
	}
}

// submit queues the persona's last finished review of the proposal whose
// verdict record is r, with the request rebuilt from the recorded
// proposal, tool bag, SOP, history and routing. It waits for a free
// worker, so a replay never holds more than the workers' share.
func (rr *Rereviewer) submit(ctx context.Context, r *replayEvent, p *recordedPolicy) error {
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
	prop, err := gated.DecodeProposal(p.Input.Proposal, r.Event.Tenant, p.Action, gated.Limits{})
	if err != nil {
		rr.unrebuildable(r, "the recorded proposal does not decode: "+err.Error())
		return nil
	}
	if prop.Kind == gated.KindRun {
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
func (rr *Rereviewer) run(ctx context.Context, job rereviewJob) {
	req := job.req
	req.ReviewID = newRereviewID(job.seq)
	cat, why := rr.review(ctx, &req)
	old := reviewCategory(job.recorded)
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.table.Add(old, cat)
	rr.rep.Table[old+" -> "+cat]++
	rr.rep.Candidate[cat]++
	if old != cat {
		rr.rep.Disagreements = append(rr.rep.Disagreements, Disagreement{
			Tenant: req.Proposal.Tenant, ID: req.Proposal.ID, Action: req.Proposal.Action, Seq: job.seq,
			Recorded: old, RecordedWhy: reviewWhy(job.recorded), Candidate: cat, CandidateWhy: why,
		})
	}
}

// review runs the candidate reviewer on req and reads its answer with the
// host's authority, as serve does: an error, a timeout or a reviewer that
// cannot be routed is its own category, never an approval.
func (rr *Rereviewer) review(ctx context.Context, req *engine.ReviewRequest) (category, why string) {
	rctx, cancel := context.WithTimeout(ctx, rr.timeout)
	defer cancel()
	req.Deadline, _ = rctx.Deadline()
	rev, err := rr.reviewers.host.Route(rr.persona)
	if err != nil {
		return string(gated.OutcomeBlocked), err.Error()
	}
	res, err := rev.Review(rctx, *req)
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(rctx.Err(), context.DeadlineExceeded):
		return string(gated.OutcomeTimeout), fmt.Sprintf("passed its %s deadline", rr.timeout)
	case errors.Is(err, engine.ErrNoReviewer):
		return string(gated.OutcomeBlocked), err.Error()
	default:
		return string(gated.OutcomeError), err.Error()
	}
	judged, _, why := engine.Judge(res, rr.persona)
	return string(judged.Decision), why
}

// Close waits for the reviews in flight and stops the workers. It may be
// called more than once, and after Run.
func (rr *Rereviewer) Close() { rr.finish() }

// finish waits for the reviews in flight and returns the report. It may
// be called more than once.
func (rr *Rereviewer) finish() *RereviewReport {
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
	slices.SortFunc(rep.Disagreements, func(a, b Disagreement) int { return compareSeq(a.Seq, b.Seq) })
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
