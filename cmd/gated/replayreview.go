package main

import (
	"fmt"
	"strings"

	"github.com/gated/gated/engine"
)

// replayReviewChange is a proposal both policies send to review, but not
// to the same reviewers.
type replayReviewChange struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Action string `json:"action"`
	Seq    uint64 `json:"seq"`
	// Old is the recorded routing, New the candidate's.
	Old   *engine.Route `json:"old_review"`
	New   *engine.Route `json:"new_review"`
	Kinds []string      `json:"kinds"`
}

// compareRecorded compares the recorded policy decision p with the
// candidate's (pd, routed, err) as the gate compares the live policy with
// a shadow, so that replay and shadow mode judge a difference alike.
func compareRecorded(prop *engine.Proposal, reg engine.Personas, p *recordedPolicy, pd engine.PolicyDecision,
	routed engine.Routed, err error) engine.ShadowComparison {
	rec := engine.Routed{Name: p.Input.Persona}
	rec.Persona, _ = reg.Persona(rec.Name)
	recorded := engine.PolicySide(prop, reg, rec, engine.PolicyDecision{Denies: p.Denies, Review: p.Review, Run: p.Run}, nil)
	return engine.CompareShadow(recorded, engine.PolicySide(prop, reg, routed, pd, err))
}

// reviewChanged counts, and names while fewer than show are, a proposal
// whose reviewers the candidate changes.
func (rep *replayReport) reviewChanged(r *replayEvent, action string, c engine.ShadowComparison, show int) {
	rep.ReviewChanged++
	if listed(len(rep.ReviewChanges), show) {
		rep.ReviewChanges = append(rep.ReviewChanges, replayReviewChange{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Action: action,
			Seq: r.Seq, Old: c.Live.Route, New: c.Shadow.Route, Kinds: c.Kinds})
	}
}

// listed says whether a list of n items takes one more under --show: a
// negative show lists all.
func listed(n, show int) bool { return show < 0 || n < show }

// writeReviewChangesText prints the proposals whose reviewers change.
func writeReviewChangesText(b *strings.Builder, rep *replayReport) {
	fmt.Fprintf(b, "review changed: %d proposal(s) both policies send to review, to other reviewers (persona, quorum or also): not a flip, but their recorded review does not stand for the candidate\n", rep.ReviewChanged)
	for _, c := range rep.ReviewChanges {
		fmt.Fprintf(b, "  %s.%s (%s, seq %d): %s -> %s\n", c.Tenant, c.ID, c.Action, c.Seq, routeText(c.Old), routeText(c.New))
	}
}

// routeText names a routing's reviewers.
func routeText(r *engine.Route) string {
	if r == nil {
		return "-"
	}
	s := fmt.Sprintf("%s quorum %d", r.Persona, r.Quorum)
	if len(r.Also) > 0 {
		s += " also " + strings.Join(r.Also, ",")
	}
	return s
}
