package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/gated/gated"
)

// TestProposalsAreWhatGatedDecodes: every round's proposal passes gated's
// strict decoder as the client encodes it.
func TestProposalsAreWhatGatedDecodes(t *testing.T) {
	o, err := parseFlags([]string{"--run-id", "demo-1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, w := newRepo(), &worker{name: o.worker, fixes: 1}
	w.work(r, nil)
	cont := &gated.Continuation{Round: 2, Review: gated.ReviewLink{ProposalID: "demo-1-r1", Round: 1},
		Findings: []gated.Finding{{ID: "r1-f1", Body: "criterion tests failed", Criterion: "tests"}}}
	for round, c := range []*gated.Continuation{nil, cont} {
		if c != nil {
			w.work(r, c)
		}
		p := proposal(o, round+1, r, w, c)
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := gated.DecodeProposal(data, o.tenant, "code_change", gated.Limits{})
		if err != nil {
			t.Fatalf("round %d: %v\n%s", round+1, err, data)
		}
		if got.Run.Round != round+1 || got.Run.Worker != "coder-1" || len(got.Criteria) != 3 {
			t.Errorf("round %d decoded as %+v", round+1, got.Run)
		}
	}
}

// TestWorkerFixesWhatItIsSent: the worker resolves the findings it can,
// at most --fixes-per-round of them, and reports every one it was sent.
func TestWorkerFixesWhatItIsSent(t *testing.T) {
	r, w := newRepo(), &worker{name: "coder-1", fixes: 1}
	w.work(r, nil)
	if r.exitCode() != 1 || strings.Contains(r.files["CHANGELOG.md"], "TestDrain") {
		t.Fatal("the first attempt should leave the test flaky and the changelog alone")
	}
	cont := &gated.Continuation{Round: 2, Findings: []gated.Finding{
		{ID: "r1-f1", Body: "criterion tests (command_result) failed", Criterion: "tests"},
		{ID: "r1-f2", Body: "criterion changelog (file_contains) failed", Criterion: "changelog"},
	}}
	w.work(r, cont)
	if r.exitCode() != 0 || strings.Contains(r.files["CHANGELOG.md"], "TestDrain") {
		t.Fatalf("after one fix: exit %d, changelog %q", r.exitCode(), r.files["CHANGELOG.md"])
	}
	rep := w.report(cont.Findings)
	if rep[0].Open() || !rep[1].Open() || rep[0].Resolution == "" {
		t.Errorf("report %+v", rep)
	}
	w.work(r, &gated.Continuation{Round: 3, Findings: []gated.Finding{{ID: "r2-f1", Body: "criterion changelog failed", Criterion: "changelog"}}})
	if !strings.Contains(r.files["CHANGELOG.md"], "TestDrain") {
		t.Error("the changelog finding was not fixed")
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--tenant", "Acme"}, {"--run-id", "a.b"}, {"--fixes-per-round", "0"}, {"--max-loops", "0"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	o, err := parseFlags(nil, io.Discard)
	if err != nil || !strings.HasPrefix(o.runID, "fix-flaky-") {
		t.Errorf("default run id %q (%v)", o.runID, err)
	}
}
