package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/bench"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// policiesDir holds the default bundle's files, which test/opa-bench.sh
// hands to OPA.
const policiesDir = "../../policies"

// stockFiles are the files the script serves with OPA: every module but
// the tests, and data.json.
func stockFiles(t *testing.T) (modules map[string]string, data []byte) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(policiesDir, "*.rego"))
	if err != nil {
		t.Fatal(err)
	}
	modules = map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.rego") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		modules[filepath.Base(name)] = string(src)
	}
	if data, err = os.ReadFile(filepath.Join(policiesDir, "data.json")); err != nil {
		t.Fatal(err)
	}
	return modules, data
}

// stockOPA evaluates data.gated.decision as `opa run --server` does on the
// script's files: modules and data as stock OPA loads them, and the input
// decoded from the request's JSON.
type stockOPA struct{ pq rego.PreparedEvalQuery }

func newStockOPA(t *testing.T) *stockOPA {
	t.Helper()
	modules, data := stockFiles(t)
	opts := []func(*rego.Rego){rego.Query("data.gated.decision"), rego.Store(inmem.NewFromReader(bytes.NewReader(data)))}
	for _, name := range slices.Sorted(maps.Keys(modules)) {
		opts = append(opts, rego.Module(name, modules[name]))
	}
	pq, err := rego.New(opts...).PrepareForEval(t.Context())
	if err != nil {
		t.Fatalf("preparing the stock evaluation: %v", err)
	}
	return &stockOPA{pq: pq}
}

// decide answers a data API request body with the response body OPA
// would send: {"result": ...}, or {} when the decision is undefined.
func (s *stockOPA) decide(ctx context.Context, body []byte) ([]byte, error) {
	var req struct {
		Input any `json:"input"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		return nil, err
	}
	rs, err := s.pq.Eval(ctx, rego.EvalInput(req.Input))
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return []byte("{}"), nil
	}
	return json.Marshal(map[string]any{"result": rs[0].Expressions[0].Value})
}

func newPolicy(t *testing.T) (engine.Policy, engine.Personas) {
	t.Helper()
	reg, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policies.NewLive(t.Context(), policies.Sources{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pol, reg
}

// TestScriptFilesAreTheEmbeddedBundle guards the script: the files it
// gives OPA must be the bundle gated embeds, or the two sides decide on
// different policies.
func TestScriptFilesAreTheEmbeddedBundle(t *testing.T) {
	modules, data := stockFiles(t)
	def, err := policies.Default()
	if err != nil {
		t.Fatal(err)
	}
	embedded := map[string]string{}
	for name, src := range def.Modules {
		if !strings.HasSuffix(name, "_test.rego") {
			embedded[name] = src
		}
	}
	if !reflect.DeepEqual(slices.Sorted(maps.Keys(modules)), slices.Sorted(maps.Keys(embedded))) {
		t.Fatalf("script serves modules %v, gated embeds %v", slices.Sorted(maps.Keys(modules)), slices.Sorted(maps.Keys(embedded)))
	}
	for name, src := range modules {
		if src != embedded[name] {
			t.Errorf("%s differs from the embedded module", name)
		}
	}
	var disk map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&disk); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(disk, def.Data) {
		t.Error("policies/data.json differs from the embedded data")
	}
}

// TestJSONInputDecidesAlike checks the driver's premise: a bench proposal
// sent as JSON and decided by stock OPA gets gated's in-process decision,
// and the decision is the one its path expects.
func TestJSONInputDecidesAlike(t *testing.T) {
	pol, reg := newPolicy(t)
	opa := newStockOPA(t)
	w, err := newWorkload(6, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.inputs {
		want, err := w.decideInProcess(t.Context(), pol, reg, i)
		if err != nil {
			t.Fatalf("input %d in process: %v", i, err)
		}
		raw, err := opa.decide(t.Context(), w.bodies[i])
		if err != nil {
			t.Fatalf("input %d on stock OPA: %v", i, err)
		}
		var resp struct{ Result *opaDecision }
		if err := json.Unmarshal(raw, &resp); err != nil || resp.Result == nil {
			t.Fatalf("input %d: OPA's answer %s: %v", i, raw, err)
		}
		got, err := resp.Result.policyDecision()
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		if d := diffDecisions(want, got); d != "" {
			t.Errorf("input %d (%s) decides differently:\n  %s", i, w.paths[i], d)
		}
		if err := expect(w.paths[i], outcome{denied: len(got.Denies) > 0, reviewed: got.Review.Required}); err != nil {
			t.Errorf("input %d: %v", i, err)
		}
	}
	if w.paths[0] != bench.PathDenied || w.paths[1] != bench.PathRead {
		t.Errorf("paths %v, want denied and read alternating", w.paths[:2])
	}
}

func TestDiffDecisions(t *testing.T) {
	base := engine.PolicyDecision{
		Denies:        []gated.Deny{{Rule: "a", Message: "x"}, {Rule: "b", Message: "y"}},
		Review:        gated.Route{Required: true, Persona: "reviewer", Quorum: 1, Why: "a write"},
		ReviewerTools: []string{"get_sop_text"},
		SOP:           &gated.SOP{ID: "SOP-001", Actions: []string{"host_restart_service"}},
		Revision:      "sha256:1", Eval: time.Millisecond,
	}
	for _, tc := range []struct {
		note   string
		change func(*engine.PolicyDecision)
		same   bool
	}{
		{note: "identical", change: func(*engine.PolicyDecision) {}, same: true},
		{note: "denies in another order", same: true, change: func(d *engine.PolicyDecision) {
			d.Denies = []gated.Deny{d.Denies[1], d.Denies[0]}
		}},
		{note: "empty list for a missing one", same: true, change: func(d *engine.PolicyDecision) { d.DeniedTools = []string{} }},
		{note: "revision and timing only gated reports", same: true, change: func(d *engine.PolicyDecision) { d.Revision, d.Eval = "", 0 }},
		{note: "a deny missing", change: func(d *engine.PolicyDecision) { d.Denies = d.Denies[:1] }},
		{note: "a deny message", change: func(d *engine.PolicyDecision) {
			d.Denies = []gated.Deny{{Rule: "a", Message: "z"}, {Rule: "b", Message: "y"}}
		}},
		{note: "review not required", change: func(d *engine.PolicyDecision) { d.Review.Required = false }},
		{note: "another persona", change: func(d *engine.PolicyDecision) { d.Review.Persona = "dba" }},
		{note: "another quorum", change: func(d *engine.PolicyDecision) { d.Review.Quorum = 2 }},
		{note: "reviewer tools", change: func(d *engine.PolicyDecision) { d.ReviewerTools = nil }},
		{note: "no SOP", change: func(d *engine.PolicyDecision) { d.SOP = nil }},
		{note: "skipped", change: func(d *engine.PolicyDecision) { d.Skipped = true }},
	} {
		t.Run(tc.note, func(t *testing.T) {
			other := base
			other.Denies = slices.Clone(base.Denies)
			sop := *base.SOP
			other.SOP = &sop
			tc.change(&other)
			if d := diffDecisions(base, other); (d == "") != tc.same {
				t.Errorf("same = %v, want %v (diff %q)", d == "", tc.same, d)
			}
		})
	}
}

// TestOPAQuorumReadAsGated checks that OPA's raw decision is read the way
// gated reads its own: a required review with no quorum has a quorum of
// one, and an action's decision must not carry a run section.
func TestOPAQuorumReadAsGated(t *testing.T) {
	o := opaDecision{Review: gated.Route{Required: true}, Run: json.RawMessage("null")}
	d, err := o.policyDecision()
	if err != nil || d.Review.Quorum != 1 {
		t.Errorf("quorum %d, err %v; want 1, nil", d.Review.Quorum, err)
	}
	o.Run = json.RawMessage(`{"reviewed": true}`)
	if _, err := o.policyDecision(); err == nil {
		t.Error("a run section on an action was accepted")
	}
}
