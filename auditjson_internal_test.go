package gated

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// policyDecidedCases are policy.decided data of every shape: members
// left out and present, nil and empty lists, strings encoding/json
// escapes, proposals compact and not.
func policyDecidedCases() []PolicyDecidedData {
	now := time.Date(2026, 11, 1, 9, 0, 0, 123456789, time.UTC)
	line := 3
	return []PolicyDecidedData{
		{},
		{DeniedTools: []string{}, Denies: []Deny{}, ReviewerTools: []string{}, Input: &ReplayInput{}},
		{
			DeniedTools: []string{"run_shell", "a<b>&c", "tab\there", "é", "\u2028"},
			Denies:      []Deny{{Rule: "change_freeze", Message: `frozen "now"`}, {Rule: "r2", Message: "\x01\x7f"}},
			EvalUS:      41,
			Holds:       []Hold{{Rule: "hold_tenant_wide", Why: "a person decides", Deadline: time.Minute}},
			Review: Route{Required: true, Persona: "dba", Quorum: 2, Why: "write actions need review", Rule: "route_class",
				Personas: []string{"a", "b"}, Also: []string{"c"}, Blocked: "only its worker"},
			ReviewerTools:  []string{"get_sop_text"},
			Run:            &RunPolicy{Reviewed: true, Why: "always", ReviewPolicy: "always"},
			ShadowRevision: "sha256:ab",
			SOP:            "SOP-7",
			Input: &ReplayInput{
				Proposal: json.RawMessage(`{"v":1,"id":"p1","tenant":"acme","target":{"tags":["a\"b","x\\y"]},"n":-1.5e3}`),
				Persona:  "reviewer",
				Now:      now,
				History:  []Verdict{{ProposalID: "p0", Outcome: OutcomeApproved, DecidedAt: now}},
				RunRecord: &RunRecord{Tenant: "acme", RunID: "r1", Rounds: []RunRound{{Round: 1, ProposalID: "p0",
					Findings: []Finding{{ID: "f1", Body: "b", Line: &line}}}}},
				Budget: &BudgetState{Tenant: BudgetCounters{Proposals: 3}, Agent: BudgetCounters{Refusals: 1}},
			},
		},
		{Input: &ReplayInput{Proposal: json.RawMessage("{ \"v\": 1,\n\t\"id\": \"p1\" }"), Budget: &BudgetState{}}},
		{Input: &ReplayInput{Proposal: json.RawMessage(`{"reason":"<script>&amp;","x":"\u2028 é"}`)}},
		{Input: &ReplayInput{Proposal: json.RawMessage(`{"reason":"a\\"}`)}},
		{Input: &ReplayInput{Proposal: json.RawMessage(`{"reason":"<b>"}`)}},
		{Input: &ReplayInput{Proposal: json.RawMessage(`{"reason":"&"}`)}},
		{Review: Route{Personas: []string{}, Also: []string{}}, Input: &ReplayInput{Proposal: json.RawMessage(`[]`), Now: now.In(time.FixedZone("x", 3600))}},
	}
}

// TestPolicyDecidedJSON: the data writes itself byte for byte as
// encoding/json writes it.
func TestPolicyDecidedJSON(t *testing.T) {
	for i, d := range policyDecidedCases() {
		checkPolicyDecidedJSON(t, i, d)
		for _, changed := range [][]string{nil, {}, {"a larger quorum", "<tools>"}} {
			checkPolicyDecidedJSON(t, i, PolicyRecheckedData{PolicyDecidedData: d, Changed: changed})
		}
	}
}

func checkPolicyDecidedJSON(t *testing.T, i int, d jsonAppender) {
	t.Helper()
	want, err := json.Marshal(d)
	if err != nil {
		if _, ok := d.appendJSON(nil); ok {
			t.Fatalf("case %d: written although encoding/json refuses it (%v)", i, err)
		}
		return
	}
	got, ok := d.appendJSON(nil)
	if !ok {
		t.Fatalf("case %d: not written; encoding/json writes %s", i, want)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
	}
	if m := MarshalAuditData(d); !bytes.Equal(m, want) {
		t.Fatalf("case %d: MarshalAuditData gives %s\nwant %s", i, m, want)
	}
}

// FuzzPolicyDecidedJSON holds the data's own writing to encoding/json's
// on any strings and any proposal.
func FuzzPolicyDecidedJSON(f *testing.F) {
	f.Add("change_freeze", `frozen "now"`, "reviewer", "write actions need review", []byte(`{"v":1,"id":"p1"}`), 1, int64(41), int64(1790000000), true)
	f.Add("a<b", "\u2028\x00", "é", "", []byte("{ \"a\" : [ 1 , \"<\" ] }"), -1, int64(-7), int64(-62135596800), false)
	f.Add("", "", "", "", []byte(`"\ud800"`), 0, int64(0), int64(253402300800), false)
	f.Add("r", "m", "p", "w", []byte(`{"a":"<>&"}`), 2, int64(1), int64(0), true)
	f.Fuzz(func(t *testing.T, rule, message, persona, why string, proposal []byte, quorum int, evalUS, now int64, required bool) {
		d := PolicyDecidedData{
			DeniedTools: []string{rule, message}, Denies: []Deny{{Rule: rule, Message: message}}, EvalUS: evalUS,
			Review:        Route{Required: required, Persona: persona, Quorum: quorum, Why: why, Personas: []string{why}},
			ReviewerTools: []string{persona}, SOP: message, ShadowRevision: rule,
			Input: &ReplayInput{Proposal: proposal, Persona: persona, Now: time.Unix(now, evalUS).UTC()},
		}
		if !json.Valid(proposal) {
			d.Input.Proposal = nil // the engine records only proposals that decoded
		}
		checkPolicyDecidedJSON(t, 0, d)
	})
}
