package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gated/gated"
)

// candidate is a persona chosen to review, with the reviewer that serves
// it and the policy decision made in its name, which holds its tool bag.
type candidate struct {
	persona  *Persona
	reviewer Reviewer
	pd       PolicyDecision
	// timeout is how long the persona's review may take: its own timeout,
	// or the engine's default. The review's deadline and the claim that
	// covers it are both read from it.
	timeout time.Duration
}

// newCandidate is the candidate persona p, reviewed by reviewer under the
// policy decision pd.
func (e *Engine) newCandidate(p *Persona, reviewer Reviewer, pd PolicyDecision) candidate {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = e.cfg.ReviewTimeout
	}
	return candidate{persona: p, reviewer: reviewer, pd: pd, timeout: timeout}
}

// reviewResult is one reviewer's part of a verdict.
type reviewResult struct {
	name string
	// outcome is approved or rejected for a review that answered, and
	// timeout, error or blocked for one that did not.
	outcome gated.Outcome
	// review is the host's reading of the answer or, for a review that did
	// not answer, a rejection whose notes say what went wrong.
	review gated.Review
	// judged is true when the reviewer answered.
	judged bool
	// why is one sentence on this review: the verdict's reason when it is
	// the only one.
	why string
	// failure says how a review that did not answer failed, in gated's
	// words (failureSentence), never the reviewer's.
	failure string
}

// review has the proposal reviewed by as many distinct personas as the
// policy's quorum asks for, runs their reviews concurrently, and combines
// the answers. A quorum of one is the same path with one reviewer. Before
// the reviewers run it takes the proposal's review claim (reviewClaim):
// awaited says that v is the verdict another message's review stored,
// which this delivery hands over instead of reviewing.
func (r *pass) review(ctx context.Context, pd PolicyDecision, routed Routed, in PolicyInput) (v *gated.Verdict, awaited bool, err error) {
	chosen, blocked := r.pickReviewers(ctx, pd, routed, in)
	if blocked != nil {
		return blocked, false, nil
	}
	r.reviewers = chosen
	longest := time.Duration(0)
	for _, c := range chosen {
		longest = max(longest, c.timeout)
	}
	r.claim = r.newClaim()
	if v, err := r.claim.take(ctx, longest, r.d.Attempt, &r.log); v != nil || err != nil {
		return v, v != nil, err
	}
	// Admitted by its budgets only now, by the one delivery that reviews:
	// a copy that awaits the verdict costs nothing. The lease outlives the
	// longest review by the claim's grace, so that a crash cannot keep it.
	refused, err := r.admit(ctx, BudgetReview, r.start.Add(longest+claimGrace))
	if err != nil || refused != nil {
		return refused, false, err
	}
	defer func() { r.endReview(ctx, v) }()
	results := make([]reviewResult, len(chosen))
	// The reviews wait on reviewers, not on this process: the delivery's
	// turn goes to its tenant's next proposal meanwhile. What bounds the
	// tenant's reviews is the lease admitted above, held until the turn
	// is back.
	if r.d.Turn != nil {
		r.d.Turn.Release()
	}
	if len(chosen) == 1 {
		// One reviewer needs no goroutine of its own: the delivery's is
		// waiting anyway, and thousands of reviews in flight each hold one.
		results[0] = r.reviewOne(ctx, &chosen[0], 1, in.History)
	} else {
		var wg sync.WaitGroup
		for i := range chosen {
			wg.Go(func() { results[i] = r.reviewOne(ctx, &chosen[i], len(chosen), in.History) })
		}
		wg.Wait()
	}
	if r.d.Turn != nil {
		if err := r.d.Turn.Retake(ctx); err != nil {
			return nil, false, fmt.Errorf("taking a turn back after the review of %s.%s: %w", r.tenant, r.id, err)
		}
	}
	return r.combine(results), false, nil
}

// pickReviewers chooses the reviewers. The routed persona comes first and
// is never replaced: the policy chose it, so when it cannot review the
// proposal is blocked whatever the quorum. The reviewers of Route.Also
// come next, and are never replaced either. The others come from
// Route.Personas in order, then from the other loaded personas by name,
// until the quorum is filled. Each of those must pass the policy
// in its own name (no denies, review still required, the same policy
// revision) and have a reviewer; the reasons the others were passed over
// go into the blocked verdict when the quorum cannot be filled.
func (r *pass) pickReviewers(ctx context.Context, pd PolicyDecision, routed Routed, in PolicyInput) ([]candidate, *gated.Verdict) {
	if routed.Persona == nil {
		return nil, r.verdict(gated.OutcomeBlocked, gated.StageReview, fmt.Sprintf("no persona named %q is loaded", routed.Name))
	}
	// The reviewers the policy adds (a persona the proposal named) review
	// whatever the quorum: none of them is passed over for another. They
	// are checked first, so that a proposal the policy refuses for one of
	// them is routed to no reviewer at all.
	seen := map[string]bool{routed.Name: true}
	var added []candidate
	for _, name := range pd.Review.Also {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		c, denies, why := r.candidate(ctx, name, pd, in)
		switch {
		case len(denies) > 0:
			s := addedRefused(name, denies)
			v := r.verdict(s.Outcome, s.Stage, s.Reason)
			v.Policy = newPolicyRef(denies, pd)
			return nil, v
		case why != "":
			s := addedCannot(name, why)
			return nil, r.verdict(s.Outcome, s.Stage, s.Reason)
		}
		added = append(added, c)
	}
	first, err := r.e.cfg.Router.Route(routed.Persona)
	if err != nil {
		return nil, r.verdict(gated.OutcomeBlocked, gated.StageReview, fmt.Sprintf("no reviewer for persona %q: %s", routed.Persona.Name, r.unrouted(ctx, routed.Persona, err)))
	}
	chosen := append([]candidate{r.e.newCandidate(routed.Persona, first, pd)}, added...)
	quorum := max(pd.Review.Quorum, len(chosen))
	if quorum == len(chosen) {
		return chosen, nil
	}
	var skipped []string
	for _, name := range r.candidateNames(pd.Review.Personas) {
		if len(chosen) == quorum {
			break
		}
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		c, _, why := r.candidate(ctx, name, pd, in)
		if why != "" {
			skipped = append(skipped, fmt.Sprintf("%s (%s)", name, why))
			continue
		}
		chosen = append(chosen, c)
	}
	if len(chosen) < quorum {
		return nil, r.verdict(gated.OutcomeBlocked, gated.StageReview, quorumShortReason(quorum, chosen, skipped))
	}
	return chosen, nil
}

// candidateNames lists the personas that may complete a quorum, in the
// order they are tried: the policy's preferences, then every loaded
// persona by name when the registry can list them. Names may repeat.
func (r *pass) candidateNames(preferred []string) []string {
	names := slices.Clone(preferred)
	if lister, ok := r.e.cfg.Personas.(PersonaLister); ok {
		loaded := slices.Clone(lister.Names())
		slices.Sort(loaded)
		names = append(names, loaded...)
	}
	return names
}

// candidate evaluates the policy in the name of persona name and routes
// it. A non-empty why says in a few words why it cannot review; denies
// are the policy's denies in its name, sorted by rule, when that is why.
func (r *pass) candidate(ctx context.Context, name string, pd PolicyDecision, in PolicyInput) (c candidate, denies []gated.Deny, why string) {
	if _, ok := r.e.cfg.Personas.Persona(name); !ok {
		return c, nil, "not loaded"
	}
	d, routed, err := EvaluateRouted(ctx, r.e.cfg.Policy.Evaluate, r.e.cfg.Personas, in, name, false)
	if denies, why = candidateRefusal(routed.Persona != nil, pd, d, err); why != "" {
		return c, denies, why
	}
	reviewer, err := r.e.cfg.Router.Route(routed.Persona)
	if err != nil {
		return c, nil, r.unrouted(ctx, routed.Persona, err)
	}
	return r.e.newCandidate(routed.Persona, reviewer, d), nil, ""
}

func quorumShortReason(quorum int, chosen []candidate, skipped []string) string {
	names := make([]string, len(chosen))
	for i, c := range chosen {
		names[i] = c.persona.Name
	}
	verb := "are"
	if len(chosen) == 1 {
		verb = "is"
	}
	others := "no other persona is a candidate"
	if len(skipped) > 0 {
		others = "skipped " + strings.Join(skipped, ", ")
	}
	return fmt.Sprintf("policy asks for a quorum of %d reviewers but only %d %s eligible (%s); %s; refusing rather than approving on fewer",
		quorum, len(chosen), verb, strings.Join(names, ", "), others)
}

// combine turns the reviews into a verdict. Any rejection rejects; else
// any timeout times out; else anything short of N approvals is an error.
// With more than one reviewer every review, failed ones included, is
// listed in candidate order. A lone review keeps the single-reviewer
// contract: its own sentence is the reason, a reviewer refusing work
// blocks, and only an answer is listed.
func (r *pass) combine(results []reviewResult) *gated.Verdict {
	if len(results) == 1 {
		res := results[0]
		v := r.verdict(res.outcome, gated.StageReview, res.why)
		if res.judged {
			v.Reviews = []gated.Review{res.review}
		}
		return v
	}
	n := len(results)
	reviews := make([]gated.Review, n)
	byOutcome := map[gated.Outcome][]reviewResult{}
	for i, res := range results {
		reviews[i] = res.review
		byOutcome[res.outcome] = append(byOutcome[res.outcome], res)
	}
	var v *gated.Verdict
	switch rejected, timedOut, approved := byOutcome[gated.OutcomeRejected], byOutcome[gated.OutcomeTimeout], byOutcome[gated.OutcomeApproved]; {
	case len(rejected) > 0:
		v = r.verdict(gated.OutcomeRejected, gated.StageReview, fmt.Sprintf("%d of %d reviewers rejected (%s); %s",
			len(rejected), n, reviewerNames(rejected), rejected[0].why))
	case len(timedOut) > 0:
		v = r.verdict(gated.OutcomeTimeout, gated.StageReview, fmt.Sprintf("%d of %d reviewers passed their deadline (%s)",
			len(timedOut), n, reviewerFailures(timedOut)))
	case len(approved) == n:
		v = r.verdict(gated.OutcomeApproved, gated.StageReview, fmt.Sprintf("%d of %d reviewers approved (%s)", n, n, reviewerNames(approved)))
	default:
		// A reviewer that refused work after it was chosen is a failed
		// review, not a missing one: the quorum was routed.
		var failed []reviewResult
		for _, res := range results {
			if res.outcome != gated.OutcomeApproved {
				failed = append(failed, res)
			}
		}
		v = r.verdict(gated.OutcomeError, gated.StageReview, fmt.Sprintf("%d of %d reviewers failed (%s)", len(failed), n, reviewerFailures(failed)))
	}
	v.Reviews = reviews
	return v
}

func reviewerNames(results []reviewResult) string {
	names := make([]string, len(results))
	for i, res := range results {
		names[i] = res.name
	}
	return strings.Join(names, ", ")
}

func reviewerFailures(results []reviewResult) string {
	parts := make([]string, len(results))
	for i, res := range results {
		parts[i] = res.name + ": " + res.failure
	}
	return strings.Join(parts, "; ")
}
