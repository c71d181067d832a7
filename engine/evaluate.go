package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/gated/gated"
)

func denyReason(denies []gated.Deny) string {
	parts := make([]string, 0, len(denies))
	for _, d := range denies {
		parts = append(parts, d.Rule+": "+d.Message)
	}
	return "policy denied: " + strings.Join(parts, "; ")
}

func sopID(s *gated.SOP) string {
	if s == nil {
		return ""
	}
	return s.ID
}

// Routed says which persona a policy decision was made for.
type Routed struct {
	// Name and Persona are the persona of the last evaluation; Persona is
	// nil when no persona of that name is loaded.
	Name    string
	Persona *Persona
	// From is the persona evaluated first, when the policy routed the
	// review away from it.
	From string
}

// EvaluateRouted evaluates in with the persona called name. When the
// policy routes the review to another persona and reroute is true, it
// evaluates once more with that persona, so that the tool bag and the
// persona rules are those of the reviewer that runs; a policy that then
// routes elsewhere again is an error. The engine decides this way, and so
// does a dry run.
func EvaluateRouted(ctx context.Context, evaluate func(context.Context, PolicyInput) (PolicyDecision, error),
	personas Personas, in PolicyInput, name string, reroute bool) (PolicyDecision, Routed, error) {
	r := Routed{Name: name}
	r.Persona, _ = personas.Persona(name)
	in.Persona = r.Persona
	d, err := evaluate(ctx, in)
	if err != nil || !reroute || !d.Review.Required || d.Review.Persona == "" || d.Review.Persona == name {
		return d, r, err
	}
	r.From, r.Name = name, d.Review.Persona
	r.Persona, _ = personas.Persona(r.Name)
	in.Persona = r.Persona
	if d, err = evaluate(ctx, in); err != nil {
		return d, r, err
	}
	if d.Review.Persona != "" && d.Review.Persona != r.Name {
		return d, r, fmt.Errorf("policy routed to persona %q and then to %q; routing must settle on one persona", r.Name, d.Review.Persona)
	}
	return d, r, nil
}

// newPolicyRef is the policy section of a verdict that denies decided, or
// that the routing of d decided when there are none.
func newPolicyRef(denies []gated.Deny, d PolicyDecision) *gated.PolicyRef {
	return gated.NewPolicyRef(denies, d.Review.Rule, d.Revision, d.Eval.Microseconds())
}
