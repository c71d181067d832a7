// Package bench is the load generator behind gated-bench: the proposal
// mix, the fleet that publishes it and waits for verdicts, the bare
// JetStream floor measured in the same run, and the figures it reports.
package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gated/gated"
)

// Path is the way a proposal takes through gated, and so what it measures.
type Path string

const (
	// PathDenied asks to skip review: the policy rejects it.
	PathDenied Path = "denied"
	// PathRead is a read: the policy approves it without review.
	PathRead Path = "read"
	// PathPlugin is a restart the SOP catalog covers: the default
	// reviewer plugin (sop, which answers at once) approves it.
	PathPlugin Path = "plugin"
	// PathLLM is a restart routed to the LLM persona: the llm reviewer
	// plugin asks a scripted model that answers after a set latency.
	PathLLM Path = "llm"
)

// Paths lists every path in report order.
var Paths = []Path{PathDenied, PathRead, PathPlugin, PathLLM}

// PolicyOnly says whether gated decides the path at stage policy.
func (p Path) PolicyOnly() bool { return p == PathDenied || p == PathRead }

// Expect is the outcome and stage a path's proposals must get; anything
// else is counted as unexpected.
func (p Path) Expect() (gated.Outcome, gated.Stage) {
	switch p {
	case PathDenied:
		return gated.OutcomeRejected, gated.StagePolicy
	case PathRead:
		return gated.OutcomeApproved, gated.StagePolicy
	default:
		return gated.OutcomeApproved, gated.StageReview
	}
}

// Reviewers are the reviewer plugins a path's verdict must name, in
// order: none for the paths the policy decides, one for the others, so
// that a path measures the reviews it says it does.
func (p Path) Reviewers() []string {
	switch p {
	case PathPlugin:
		return []string{"sop"}
	case PathLLM:
		return []string{"llm"}
	default:
		return []string{}
	}
}

func parsePath(s string) (Path, error) {
	p := Path(strings.TrimSpace(s))
	if slices.Contains(Paths, p) {
		return p, nil
	}
	return "", fmt.Errorf("unknown path %q; want one of denied, read, plugin, llm", s)
}

// LLMPersona is the persona the llm path routes to. An embedded run writes
// it; a deployment under test must have it (plugin: llm) to use the path.
const LLMPersona = "bench-llm"

// Proposals builds the proposals of one bench run. Every id and every
// target is new (the run's nonce is in both), so no proposal replays an
// earlier verdict, meets a cooldown or joins a dedupe entry, whatever ran
// against the deployment before.
type Proposals struct {
	// Tenant is the tenant every proposal is sent as.
	Tenant string
	// Nonce tells this run's proposals from every other run's.
	Nonce string
	// Pad is added to the reason of every proposal, for larger messages.
	Pad int
}

// New returns proposal i of path p.
func (g Proposals) New(p Path, i int) *gated.Proposal {
	id := g.Nonce + "-" + string(p) + "-" + strconv.Itoa(i)
	pr := &gated.Proposal{
		V:           gated.SchemaVersion,
		ID:          id,
		Tenant:      g.Tenant,
		Kind:        gated.KindAction,
		Action:      "host_restart_service",
		Class:       gated.ClassWrite,
		Target:      map[string]any{"device_id": i, "service": "nginx", "bench": g.Nonce + "-" + string(p)},
		Reason:      "nginx stopped answering health checks after a config reload" + strings.Repeat(".", max(g.Pad, 0)),
		BlastRadius: gated.BlastSingleDevice,
		Operator:    &gated.Principal{ID: "bench", Roles: []string{"sre"}},
		RequestedBy: &gated.RequestedBy{Agent: "bench-agent", Session: g.Nonce},
		IncidentID:  "INC-BENCH",
	}
	switch p {
	case PathDenied:
		pr.Flags.SkipReview = true
	case PathRead:
		pr.Action, pr.Class, pr.BlastRadius = "host_list_services", gated.ClassRead, ""
	case PathLLM:
		pr.Reviewer = LLMPersona
	}
	return pr
}
