package main

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

func TestPlanIsDealtBySeed(t *testing.T) {
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	if total != 100 {
		t.Fatalf("mix weights add up to %d, want 100", total)
	}
	o := options{agents: 3, calls: 50, seed: 7}
	a, b := makePlan(o), makePlan(o)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed dealt different plans")
	}
	o.seed = 8
	if reflect.DeepEqual(a, makePlan(o)) {
		t.Fatal("another seed dealt the same plan")
	}
	n := 0
	for agent, calls := range a {
		for _, c := range calls {
			if c.n%3 != agent {
				t.Fatalf("call %d went to agent %d", c.n, agent)
			}
			n++
		}
	}
	if n != 50 {
		t.Fatalf("%d calls planned, want 50", n)
	}
}

// approver approves every proposal and keeps a copy of each.
type approver struct {
	mu   sync.Mutex
	sent []*gated.Proposal
}

func (a *approver) Propose(_ context.Context, p *gated.Proposal) (*gated.Verdict, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent = append(a.sent, p)
	return &gated.Verdict{V: 1, ProposalID: p.ID, Tenant: p.Tenant, Action: p.Action, Outcome: gated.OutcomeApproved, Approved: true}, nil
}

// TestEveryScenarioIsWhatGatedDecodes runs each scenario against a
// Proposer that approves everything: reads run without a proposal, every
// other call sends one proposal that gated's strict decoder accepts, and
// each tool runs once.
func TestEveryScenarioIsWhatGatedDecodes(t *testing.T) {
	prop := &approver{}
	// The approver is not gated and signs no grant: this test checks the
	// proposals, not the grants (bus/fleet's tests do).
	f := &simulation{client: prop, opts: options{tenants: []string{"acme"}, wait: time.Second}, runID: "beef", printer: newPrinter(&bytes.Buffer{}, false),
		gateOpts: []fleet.ToolGateOption{fleet.WithoutGrantCheck()}}
	a, err := f.newAgent(0)
	if err != nil {
		t.Fatal(err)
	}
	for s := listServices; s <= restartEverywhere; s++ {
		before, sent := a.runs, len(prop.sent)
		action, class, ran, err := a.do(t.Context(), call{n: int(s), s: s})
		if err != nil || ran == "" || a.runs != before+1 {
			t.Fatalf("scenario %d (%s): ran %q, %d runs, err %v", s, action, ran, a.runs-before, err)
		}
		if class == gated.ClassRead {
			if len(prop.sent) != sent {
				t.Fatalf("read %s sent a proposal", action)
			}
			continue
		}
		if len(prop.sent) != sent+1 {
			t.Fatalf("scenario %d (%s) sent %d proposals, want 1", s, action, len(prop.sent)-sent)
		}
		p := prop.sent[len(prop.sent)-1]
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gated.DecodeProposal(data, "acme", action, gated.Limits{}); err != nil {
			t.Fatalf("scenario %d (%s): gated would refuse the proposal: %v\n%s", s, action, err, data)
		}
		if p.Class != class || p.RequestedBy == nil || p.RequestedBy.Agent != "agent-01" {
			t.Fatalf("scenario %d: proposal %+v", s, p)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--agents", "0"},
		{"--proposals", "-1"},
		{"--tenants", "ACME"},
		{"--tenants", ","},
		{"--wait", "0s"},
		{"extra"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
	o, err := parseFlags([]string{"--agents", "2", "--tenants", "acme, initech"}, &bytes.Buffer{})
	if err != nil || o.agents != 2 || !reflect.DeepEqual(o.tenants, []string{"acme", "initech"}) {
		t.Fatalf("parseFlags: %+v, %v", o, err)
	}
}

var _ fleet.Proposer = (*approver)(nil)
