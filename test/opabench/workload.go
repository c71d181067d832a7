package main

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/bench"
	"github.com/gated/gated/policies"
)

// benchTenant is the tenant every proposal is sent as.
const benchTenant = "acme"

// mix is the workload's mix of bench paths, in `gated-bench --mix` form.
const mix = "denied=1,read=1"

// decisionPath is where OPA's REST API serves data.gated.decision.
const decisionPath = "/v1/data/gated/decision"

// workload is the decisions both sides make: the policy-decided bench
// paths, denied and read, alternating. Input i is the same proposal, with
// the same persona and clock, on either side.
type workload struct {
	paths  []bench.Path
	names  []string             // the persona each proposal asks for first, as the engine picks it
	inputs []engine.PolicyInput // gated's input, persona not yet looked up
	bodies [][]byte             // OPA's request body: {"input": <the JSON form of InputValue>}
}

// newWorkload builds n inputs decided at now. The OPA bodies carry the
// persona the engine would look up in personas, as the engine's first
// evaluation does.
func newWorkload(n int, now time.Time, personas engine.Personas) (*workload, error) {
	gen := bench.Proposals{Tenant: benchTenant, Nonce: "opabench-" + strconv.FormatInt(now.UnixNano(), 36)}
	w := &workload{
		paths:  make([]bench.Path, n),
		names:  make([]string, n),
		inputs: make([]engine.PolicyInput, n),
		bodies: make([][]byte, n),
	}
	for i := range n {
		path := bench.PathDenied
		if i%2 == 1 {
			path = bench.PathRead
		}
		p := gen.New(path, i)
		name := p.Reviewer
		if name == "" {
			name = engine.DefaultPersona
		}
		in := engine.PolicyInput{Proposal: p, Now: now}
		withPersona := in
		withPersona.Persona, _ = personas.Persona(name)
		body, err := requestBody(withPersona)
		if err != nil {
			return nil, fmt.Errorf("encoding input %d: %w", i, err)
		}
		w.paths[i], w.names[i], w.inputs[i], w.bodies[i] = path, name, in, body
	}
	return w, nil
}

// requestBody is the body of OPA's data API for in: gated's own input
// value, written as JSON.
func requestBody(in engine.PolicyInput) ([]byte, error) {
	doc, err := ast.JSON(policies.InputValue(in))
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"input": doc})
}

// decideInProcess decides input i the way the engine does, through
// EvaluateRouted and the policy gated serves.
func (w *workload) decideInProcess(ctx context.Context, pol engine.Policy, personas engine.Personas, i int) (engine.PolicyDecision, error) {
	d, routed, err := engine.EvaluateRouted(ctx, pol.Evaluate, personas, w.inputs[i], w.names[i], true)
	if err != nil {
		return d, err
	}
	if routed.From != "" {
		// A second evaluation would need a second OPA request: the
		// comparison would no longer be one decision against one.
		return d, fmt.Errorf("input %d was routed from persona %q to %q; the bench paths must decide in one evaluation", i, routed.From, routed.Name)
	}
	return d, nil
}

// outcome is what the load loops check of every decision: enough to tell
// a rejection from an approval without review.
type outcome struct {
	denied   bool
	reviewed bool
}

// expect checks a decision's outcome against its path.
func expect(p bench.Path, got outcome) error {
	switch {
	case p == bench.PathDenied && !got.denied:
		return fmt.Errorf("a %s proposal was not denied", p)
	case p == bench.PathRead && (got.denied || got.reviewed):
		return fmt.Errorf("a %s proposal was not approved without review (denied %v, review required %v)", p, got.denied, got.reviewed)
	}
	return nil
}

// opaDecision is data.gated.decision as OPA's REST API returns it.
type opaDecision struct {
	Deny          []gated.Deny    `json:"deny"`
	Review        gated.Route     `json:"review"`
	ReviewerTools []string        `json:"reviewer_tools"`
	DeniedTools   []string        `json:"denied_tools"`
	SOP           *gated.SOP      `json:"sop"`
	Skipped       bool            `json:"skipped"`
	Run           json.RawMessage `json:"run"`
}

// policyDecision reads the decision as gated reads its own: a required
// review has a quorum of at least one, and an action has no run section.
func (o *opaDecision) policyDecision() (engine.PolicyDecision, error) {
	if len(o.Run) > 0 && string(o.Run) != "null" {
		return engine.PolicyDecision{}, fmt.Errorf("decision.run is %s, want null for an action", o.Run)
	}
	d := engine.PolicyDecision{
		Denies: o.Deny, Review: o.Review, ReviewerTools: o.ReviewerTools,
		DeniedTools: o.DeniedTools, SOP: o.SOP, Skipped: o.Skipped,
	}
	if d.Review.Required && d.Review.Quorum < 1 {
		d.Review.Quorum = 1
	}
	return d, nil
}

// diffDecisions describes how two decisions differ, or returns "" when
// they agree on everything the engine reads. The order of denies and the
// difference between a missing and an empty list do not count, nor do the
// revision and evaluation time, which only gated reports.
func diffDecisions(gated, opa engine.PolicyDecision) string {
	a, b := normalized(gated), normalized(opa)
	if reflect.DeepEqual(a, b) {
		return ""
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return fmt.Sprintf("gated: %s\n  opa:   %s", ja, jb)
}

func normalized(d engine.PolicyDecision) engine.PolicyDecision {
	d.Revision, d.Eval = "", 0
	d.Denies = slices.Clone(d.Denies)
	slices.SortFunc(d.Denies, func(a, b gated.Deny) int {
		return strings.Compare(a.Rule+"\x00"+a.Message, b.Rule+"\x00"+b.Message)
	})
	d.Denies = orNil(d.Denies)
	d.ReviewerTools, d.DeniedTools = orNil(d.ReviewerTools), orNil(d.DeniedTools)
	d.Review.Personas = orNil(d.Review.Personas)
	if d.SOP != nil {
		s := *d.SOP
		s.Actions, s.Steps = orNil(s.Actions), orNil(s.Steps)
		d.SOP = &s
	}
	return d
}

func orNil[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}
