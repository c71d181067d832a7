package policies

// The run of `gated policy eval`: one proposal through the policy and the
// personas, and its text and JSON reports.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// EvalRun is one `policy eval`: its input and what the policy said.
type EvalRun struct {
	personaName string
	persona     *engine.Persona
	routedFrom  string // the persona first evaluated, when the policy routed away from it
	// addedFrom is the routed persona when the decision shown is that of
	// a reviewer the proposal added (review.also), which the policy
	// refuses; missing are added reviewers that are not loaded.
	addedFrom string
	missing   []string
	decision  engine.PolicyDecision
	fired     []Fired
	// explained is the full explanation of the decision shown, with
	// --explain.
	explained *Explanation
	revision  string
	// settled is what the gate decides before any review, as the engine
	// decides it; done is false when the proposal goes on to review.
	settled gated.Settled
	done    bool
}

// outcome is what the gate decides before any review, for the JSON
// document: rejected, approved, blocked or error, or review when a
// reviewer decides.
func (r *EvalRun) outcome() string {
	if r.done {
		return string(r.settled.Outcome)
	}
	return "review"
}

// reviewer is the persona that would review.
func (r *EvalRun) reviewer() string {
	if r.decision.Review.Persona != "" {
		return r.decision.Review.Persona
	}
	return r.personaName
}

// outcomeText is the outcome in words.
func (r *EvalRun) outcomeText() string {
	switch {
	case !r.done:
	case r.settled.Outcome == gated.OutcomeRejected || r.settled.Outcome == gated.OutcomeApproved:
		return fmt.Sprintf("%s at %s", r.settled.Outcome, r.settled.Stage)
	default:
		return fmt.Sprintf("%s at %s: %s", r.settled.Outcome, r.settled.Stage, r.settled.Reason)
	}
	return fmt.Sprintf("needs review by %s (quorum %d)", r.reviewer(), r.decision.Review.Quorum)
}

// notes are what the gate would do beyond the policy's decision: block a
// review no loaded persona or no single reviewer can take.
func (r *EvalRun) notes() []string {
	var notes []string
	if r.routedFrom != "" && r.addedFrom == "" {
		notes = append(notes, fmt.Sprintf("the policy routed the review from persona %s to %s; shown is the second evaluation", r.routedFrom, r.personaName))
	}
	if r.addedFrom != "" {
		notes = append(notes, fmt.Sprintf("the proposal asks persona %s to review beside %s, and the policy refuses it; shown is the evaluation in its name", r.personaName, r.addedFrom))
	}
	for _, name := range r.missing {
		notes = append(notes, fmt.Sprintf("the proposal asks persona %s to review as well, and no persona named %q is loaded (--personas DIR?): the gate would block this proposal", name, name))
	}
	if r.persona == nil && r.addedFrom == "" && r.outcome() == string(gated.OutcomeBlocked) {
		notes = append(notes, fmt.Sprintf("no persona named %q is loaded (--personas DIR?): the gate would block this proposal", r.personaName))
	}
	if r.outcome() != "review" {
		return notes
	}
	if r.reviewer() != r.personaName {
		notes = append(notes, fmt.Sprintf("the policy routes the review to %s but saw persona %s, given by --persona", r.reviewer(), r.personaName))
	}
	if q := r.decision.Review.Quorum; q > 1 {
		notes = append(notes, fmt.Sprintf("a quorum of %d: %d distinct personas must approve (this one, then those in review.also, then those in review.personas, then the other loaded personas by name); fewer eligible ones block the proposal", q, q))
	}
	return notes
}

// EvalProposal runs the policy as the engine's judge does: with the persona
// asked for, else the default persona, and once more with the persona the
// policy routes the review to, unless the persona was given explicitly.
// Each reviewer the policy adds (review.also, the proposal's reviewer) is
// evaluated in its own name too, as the gate does before any review. What
// the gate then decides comes from the engine's own functions
// (engine.PolicyOutcome, engine.AddedOutcome), so the dry run cannot
// disagree with the gate.
func EvalProposal(ctx context.Context, ev *Evaluator, reg engine.Personas, in engine.PolicyInput, explicit string, full bool) (*EvalRun, error) {
	name := explicit
	if name == "" {
		name = engine.DefaultPersona
	}
	var fired []Fired
	var explained *Explanation
	explain := func(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
		if !full {
			d, f, err := ev.Explain(ctx, in)
			fired = f
			return d, err
		}
		x, err := ev.ExplainFull(ctx, in)
		fired, explained = x.Fired, x
		return x.Decision, err
	}
	d, routed, err := engine.EvaluateRouted(ctx, explain, reg, in, name, explicit == "")
	if err != nil {
		if routed.From != "" {
			return nil, fmt.Errorf("evaluating the policy with persona %q (routed from %q): %w", routed.Name, routed.From, err)
		}
		return nil, fmt.Errorf("evaluating the policy with persona %q: %w", routed.Name, err)
	}
	run := &EvalRun{
		personaName: routed.Name, persona: routed.Persona, routedFrom: routed.From,
		decision: d, fired: fired, explained: explained, revision: ev.Revision(),
	}
	run.settled, run.done = engine.PolicyOutcome(in.Proposal, d, routed)
	if run.done || explicit != "" {
		return run, nil
	}
	// The gate checks the added reviewers in order and stops at the first
	// that cannot review.
	seen := map[string]bool{routed.Name: true}
	for _, also := range d.Review.Also {
		if also == "" || seen[also] {
			continue
		}
		seen[also] = true
		var (
			ad      engine.PolicyDecision
			aRouted = engine.Routed{Name: also}
			aErr    error
			loaded  bool
			settled gated.Settled
			decided bool
		)
		if _, loaded = reg.Persona(also); loaded {
			ad, aRouted, aErr = engine.EvaluateRouted(ctx, explain, reg, in, also, false)
			loaded = aRouted.Persona != nil
		}
		if settled, decided = engine.AddedOutcome(also, loaded, d, ad, aErr); !decided {
			continue
		}
		run.settled, run.done = settled, true
		switch {
		case !loaded:
			run.missing = append(run.missing, also)
		case len(ad.Denies) > 0:
			run.addedFrom = routed.Name
			run.personaName, run.persona, run.decision, run.fired, run.explained = also, aRouted.Persona, ad, fired, explained
		}
		return run, nil
	}
	return run, nil
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ", ")
}

// WriteEvalText prints the decision for people.
func WriteEvalText(w io.Writer, r *EvalRun) error {
	d := r.decision
	fmt.Fprintln(w, r.outcomeText())
	for _, deny := range d.Denies {
		fmt.Fprintf(w, "  deny %s: %s\n", deny.Rule, deny.Message)
	}
	for _, n := range r.notes() {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	persona := r.personaName
	if r.persona == nil {
		persona += " (not loaded: the policy saw null)"
	}
	fmt.Fprintf(tw, "persona:\t%s\n", persona)
	if len(d.Review.Also) > 0 {
		fmt.Fprintf(tw, "also reviewing:\t%s (added by the proposal)\n", strings.Join(d.Review.Also, ", "))
	}
	why := d.Review.Why
	if why == "" {
		why = "(no reason given)"
	}
	fmt.Fprintf(tw, "review:\t%s\n", why)
	if d.Review.Rule != "" {
		fmt.Fprintf(tw, "routing rule:\t%s\n", d.Review.Rule)
	}
	fmt.Fprintf(tw, "reviewer tools:\t%s\n", listOrNone(d.ReviewerTools))
	fmt.Fprintf(tw, "denied tools:\t%s\n", listOrNone(d.DeniedTools))
	sop := "none"
	if d.SOP != nil {
		sop = d.SOP.ID
		if d.SOP.Title != "" {
			sop += " (" + d.SOP.Title + ")"
		}
	}
	fmt.Fprintf(tw, "sop:\t%s\n", sop)
	if d.Skipped {
		fmt.Fprintf(tw, "skipped:\t%s\n", "review waived by configuration")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "rules that fired:")
	for _, f := range r.fired {
		mark := ""
		if f.Default {
			mark = "  (default)"
		}
		fmt.Fprintf(tw, "  %s\t%s%s\n", f.Location, f.Rule, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if x := r.explained; x != nil {
		if x.Evaluator == EvaluatorPlanned {
			fmt.Fprintf(w, "rules the planned evaluator evaluated (it decides this bundle), in order:\n  %s\n", listOrNone(x.Planned))
		} else {
			fmt.Fprintln(w, "planned evaluator: not used, topdown decides this bundle")
		}
		fmt.Fprintf(w, "topdown trace:\n%s", x.Trace)
	}
	_, err := fmt.Fprintf(w, "policy revision %s, evaluated in %d µs\n", r.revision, d.Eval.Microseconds())
	return err
}

// evalDecisionJSON is data.gated.decision as `policy eval --format json`
// prints it.
type evalDecisionJSON struct {
	Deny          []gated.Deny `json:"deny"`
	Review        gated.Route  `json:"review"`
	ReviewerTools []string     `json:"reviewer_tools"`
	DeniedTools   []string     `json:"denied_tools"`
	SOP           *gated.SOP   `json:"sop"`
	Skipped       bool         `json:"skipped"`
}

// evalDoc is the output of `policy eval --format json`.
type evalDoc struct {
	Outcome    string           `json:"outcome"`
	Stage      string           `json:"stage,omitempty"`
	Reason     string           `json:"reason,omitempty"`
	Persona    string           `json:"persona"`
	Loaded     bool             `json:"persona_loaded"`
	RoutedFrom string           `json:"routed_from,omitempty"`
	Decision   evalDecisionJSON `json:"decision"`
	Fired      []Fired          `json:"fired"`
	Explain    *evalExplainJSON `json:"explain,omitempty"`
	Notes      []string         `json:"notes,omitempty"`
	Revision   string           `json:"revision"`
	EvalUS     int64            `json:"eval_us"`
}

// evalExplainJSON is what --explain adds to `policy eval --format json`.
type evalExplainJSON struct {
	// Evaluator is the evaluator that decides the bundle.
	Evaluator string `json:"evaluator"`
	// Planned are the rules the planned evaluator evaluated, in order;
	// empty when topdown decides.
	Planned []string `json:"planned"`
	// Trace is topdown's full trace, one step a line.
	Trace []string `json:"trace"`
}

func EvalDocument(r *EvalRun) evalDoc {
	d := r.decision
	doc := evalDoc{
		Outcome: r.outcome(), Persona: r.personaName, Loaded: r.persona != nil, RoutedFrom: r.routedFrom,
		Decision: evalDecisionJSON{Deny: d.Denies, Review: d.Review, ReviewerTools: d.ReviewerTools,
			DeniedTools: d.DeniedTools, SOP: d.SOP, Skipped: d.Skipped},
		Fired: r.fired, Notes: r.notes(), Revision: r.revision, EvalUS: d.Eval.Microseconds(),
	}
	if r.done {
		doc.Stage, doc.Reason = string(r.settled.Stage), r.settled.Reason
	}
	if doc.Decision.Deny == nil {
		doc.Decision.Deny = []gated.Deny{}
	}
	if doc.Decision.ReviewerTools == nil {
		doc.Decision.ReviewerTools = []string{}
	}
	if doc.Decision.DeniedTools == nil {
		doc.Decision.DeniedTools = []string{}
	}
	if doc.Fired == nil {
		doc.Fired = []Fired{}
	}
	if x := r.explained; x != nil {
		doc.Explain = &evalExplainJSON{Evaluator: x.Evaluator, Planned: x.Planned,
			Trace: strings.Split(strings.TrimSuffix(x.Trace, "\n"), "\n")}
		if doc.Explain.Planned == nil {
			doc.Explain.Planned = []string{}
		}
	}
	return doc
}

// Settled is what the gate decides before any review; ok is false when
// the proposal goes on to review.
func (r *EvalRun) Settled() (settled gated.Settled, ok bool) { return r.settled, r.done }
