package llm

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

func TestParseAnswer(t *testing.T) {
	tests := []struct {
		note     string
		text     string
		decision gated.ReviewDecision
		gates    []gated.GateResult
		notes    string
		bad      string // part of the error; "" means it parses
	}{
		{
			note:     "the documented format",
			text:     "Decision: approve\nGates:\n- sop_covers: pass — SOP-001 covers it\n- rollback_known: fail — none written\nNotes: Check it.\nSecond line.",
			decision: gated.DecisionApprove,
			gates:    []gated.GateResult{{Name: "sop_covers", Passed: true, Detail: "SOP-001 covers it"}, {Name: "rollback_known", Detail: "none written"}},
			notes:    "Check it.\nSecond line.",
		},
		{
			note:     "markdown, passed/failed, other dashes, CRLF",
			text:     "\r\n**Decision:** Reject\r\n**Gates:**\r\n* **sop_covers**: **passed** - SOP-2\r\n- `rollback_known`: FAILED – no rollback\r\n**Notes:** no",
			decision: gated.DecisionReject,
			gates:    []gated.GateResult{{Name: "sop_covers", Passed: true, Detail: "SOP-2"}, {Name: "rollback_known", Detail: "no rollback"}},
			notes:    "no",
		},
		{
			note:     "a verdict that is neither pass nor fail is a gate not passed",
			text:     "Decision: approve\n- sop_covers: probably — it looks covered\n- no_parallel_operation: pass\n- a bullet of prose: pass the salt",
			decision: gated.DecisionApprove,
			gates:    []gated.GateResult{{Name: "sop_covers", Detail: "probably — it looks covered"}, {Name: "no_parallel_operation", Passed: true}},
		},
		{
			note:     "only an exact pass token passes",
			text:     "Decision: approve\n- a: pass-ish\n- b: passed?\n- c: pass/fail unknown\n- d: pass_unverified\n- e: pass if nothing else runs\n- f: pass.\n- g: **pass** (SOP-1)\n- h: Passed: yes",
			decision: gated.DecisionApprove,
			gates: []gated.GateResult{
				{Name: "a", Detail: "pass-ish"}, {Name: "b", Detail: "passed?"}, {Name: "c", Detail: "pass/fail unknown"},
				{Name: "d", Detail: "pass_unverified"}, {Name: "e", Detail: "pass if nothing else runs"}, {Name: "f", Detail: "pass."},
				{Name: "g", Passed: true, Detail: "SOP-1"}, {Name: "h", Passed: true, Detail: "yes"},
			},
		},
		{
			note:     "gate lines after Notes are notes",
			text:     "Decision: approve\nNotes: fine\n- sop_covers: pass",
			decision: gated.DecisionApprove,
			notes:    "fine\n- sop_covers: pass",
		},
		{note: "empty", text: " \n\t", bad: "empty"},
		{note: "prose first", text: "I approve.\nDecision: approve", bad: `"I approve."`},
		{note: "approve with caveats", text: "Decision: approve with caveats", bad: "is not"},
		{note: "bold label only", text: "**Decision:** approve\n- g: pass", bad: "is not"},
		{note: "a later line changes the decision", text: "Decision: approve\n- g: pass\nDecision: reject", bad: "disagrees"},
		{note: "a later line takes the approval back", text: "Decision: approve\n- g: pass\nNotes: scratch that.", bad: "scratch that"},
		{note: "over the limit", text: "Decision: approve\n" + strings.Repeat("x", gated.MaxDecisionTextBytes), bad: "byte limit"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			a, err := parseAnswer(tc.text)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("err = %v, want one saying %q", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.decision != tc.decision || !slices.Equal(a.gates, tc.gates) || a.notes != tc.notes {
				t.Errorf("got %q %+v %q\nwant %q %+v %q", a.decision, a.gates, a.notes, tc.decision, tc.gates, tc.notes)
			}
		})
	}
}

// FuzzParseAnswer checks that the reviewer never reads an answer more
// favourably than the host does, as an action review or as a run review,
// and that what a run review reads from the ```json block keeps the
// promises parseRunAnswer makes.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		"Decision: approve\nGates:\n- sop_covers: pass — x\nNotes: y",
		"**Decision:** reject\n* `g`: failed – z",
		"Decision: approve with caveats",
		"decision:\u00a0APPROVE",
		"",
		"Decision: approve\n- g: pass\nNotes: ok\n```json\n{\"criteria\":[{\"id\":\"design\",\"pass\":true,\"confidence\":0.5,\"refs\":[\"a.go:1\"]}],\"warnings\":[\"w\"]}\n```",
		"Decision: approve\n- g: fail\n```json\n{\"criteria\":[{\"id\":\"design\",\"pass\":true}]}\n```",
		"Decision: reject\n```json\n{\"criteria\":[{\"id\":\"design\",\"pass\":false}],\"comments\":[{\"path\":\"a.go\",\"line\":7,\"body\":\"b\"},{\"path\":\"b\",\"line\":null,\"body\":\"c\"}],\"missing_work\":[\"m\"],\"next_round_guidance\":\"g\"}\n```\nNotes: n",
		"Decision: reject\n``` JSON\r\n{\"criteria\":[{\"id\":\"design\",\"pass\":false,\"confidence\":1e-3}],\"next_round_guidance\":\"g\"}\r\n```",
		"```json\n{\"criteria\":[]}\n```\nDecision: approve",
		"Decision: approve\n```json\n{\"criteria\":[{\"id\":\"design\",\"pass\":true}]}\n```\n```json\n{}\n```",
		"Decision: approve\n- g: pass-ish\n- h: passed?\n- i: pass/fail unknown\n- j: pass_unverified\n- k: **PASSED** (x)",
		"Decision: approve\n- g: pass\nNotes: ok\n- g: fail\n```json\n{\"criteria\":[{\"id\":\"design\",\"pass\":true}]}\n```",
		"Decision: approve\n- g: pass\nDecision: reject\n```json\n{\"criteria\":[{\"id\":\"design\",\"pass\":true}]}\n```",
		"**Decision:** approve\n- g: pass",
	} {
		f.Add(s)
	}
	rules := runRules{judge: []string{"design"}, gates: []string{"g"}}
	f.Fuzz(func(t *testing.T, text string) {
		host, _ := gated.ParseDecision(text)
		if a, err := parseAnswer(text); err == nil {
			if a.decision != host {
				t.Fatalf("reviewer reads %q, host reads %q", a.decision, host)
			}
			for _, g := range a.gates {
				if g.Name == "" || !strings.Contains(text, g.Name) {
					t.Fatalf("gate %+v is not in the text", g)
				}
				if g.Passed && !refPassLine(text, g.Name) {
					t.Fatalf("gate %q read as passed, but no line of %q reports it as an exact pass", g.Name, text)
				}
			}
		}

		a, err := parseRunAnswer(text, rules)
		if err != nil {
			return
		}
		if a.decision != host {
			t.Fatalf("run review: reviewer reads %q, host reads %q", a.decision, host)
		}
		r := a.run
		if r == nil {
			t.Fatal("a run answer without its block was read")
		}
		if len(r.criteria) != 1 || r.criteria[0].ID != "design" {
			t.Fatalf("criteria %+v do not name exactly the criterion to judge", r.criteria)
		}
		if c := r.criteria[0].Confidence; math.IsNaN(c) || c < 0 || c > 1 {
			t.Fatalf("confidence %v is outside [0, 1]", c)
		}
		for _, c := range r.comments {
			if c.Path == "" || c.Body == "" || (c.Line != nil && *c.Line < 1) {
				t.Fatalf("comment %+v is not well formed", c)
			}
		}
		for _, s := range append(slices.Clone(r.missingWork), r.warnings...) {
			if strings.TrimSpace(s) == "" {
				t.Fatalf("blank item in %q / %q", r.missingWork, r.warnings)
			}
		}
		if len(r.missingWork) == 0 && r.guidance == "" {
			if a.decision != gated.DecisionApprove {
				t.Fatal("a rejection with neither missing work nor guidance was read")
			}
			res := engine.ReviewResult{Text: text, Decision: a.decision, Gates: a.gates}
			if _, approved, why := engine.Judge(res, &engine.Persona{RequiredGates: rules.gates}); !approved {
				t.Fatalf("an approval the host rejects (%s) came with neither missing work nor guidance", why)
			}
		}
		for _, line := range strings.Split(a.notes, "\n") {
			if isJSONFence(line) {
				t.Fatalf("the block is in the notes: %q", a.notes)
			}
		}
	})
}

// refPassValue is an exact pass token and what may follow it, written
// apart from gated.GatePasses; ASCII letters only, as (?i) would also
// take "ſ" for "s".
var refPassValue = func() string {
	const p = "[pP][aA][sS][sS](?:[eE][dD])?"
	return `(?:` + p + `|\*` + p + `\*|\*\*` + p + `\*\*|_` + p + `_|__` + p + "__|`" + p + "`" + `)(?:[ \t]*$|[ \t]*[:—–]|[ \t]+[-(])`
}()

// refPassLine reports whether a line of text is a bulleted gate line that
// reports gate name as an exact pass.
func refPassLine(text, name string) bool {
	for _, l := range strings.Split(text, "\n") {
		m := refGateLine.FindStringSubmatch(strings.TrimSpace(l))
		if m != nil && strings.Trim(strings.TrimSpace(m[1]), "*` ") == name {
			return true
		}
	}
	return false
}

// refGateLine is a bulleted line whose value is an exact pass; the name
// is everything up to the first colon.
var refGateLine = regexp.MustCompile("^(?:- |\\* |• )([^:]*):[ \\t]*" + refPassValue)

// testRules are the rules of the parser's tests: two criteria to judge
// and one required gate.
var testRules = runRules{judge: []string{"design", "docs"}, gates: []string{"criteria_met"}}

func TestParseRunAnswer(t *testing.T) {
	const gates = "Decision: %s\nGates:\n- criteria_met: pass — ok\nNotes: %s\n"
	block := func(body string) string { return "```json\n" + body + "\n```" }
	const both = `"criteria":[{"id":"design","pass":true,"confidence":1},{"id":"docs","pass":false,"confidence":0}]`
	line := func(n int) *int { return &n }
	tests := []struct {
		note     string
		text     string
		rules    *runRules
		decision gated.ReviewDecision
		notes    string
		want     runAnswer
		bad      string // part of the error; "" means it parses
	}{
		{
			note:     "approval; the block is left out of the notes",
			text:     fmt.Sprintf(gates, "approve", "fine\nreally") + "\n" + block("{"+both+`,"warnings":["  w  "]}`) + "\n\nSigned.",
			decision: gated.DecisionApprove,
			notes:    "fine\nreally\n\n\nSigned.",
			want: runAnswer{
				criteria: []gated.CriterionEval{{ID: "design", Pass: true, Confidence: 1}, {ID: "docs"}},
				warnings: []string{"w"},
			},
		},
		{
			note:     "rejection with comments on a line and on a file, CRLF, ```JSON",
			text:     strings.ReplaceAll(fmt.Sprintf(gates, "reject", "no")+"``` JSON\n{"+both+`,"comments":[{"path":"a.go","line":3,"body":"b"},{"path":"b.go","line":null,"body":"c"},{"path":"c.go","body":"d"}],"missing_work":["x"],"next_round_guidance":" g "}`+"\n```", "\n", "\r\n"),
			decision: gated.DecisionReject,
			notes:    "no",
			want: runAnswer{
				criteria:    []gated.CriterionEval{{ID: "design", Pass: true, Confidence: 1}, {ID: "docs"}},
				comments:    []gated.Comment{{Path: "a.go", Line: line(3), Body: "b"}, {Path: "b.go", Body: "c"}, {Path: "c.go", Body: "d"}},
				missingWork: []string{"x"},
				guidance:    "g",
			},
		},
		{
			note:     "rejection with guidance only",
			text:     fmt.Sprintf(gates, "reject", "no") + block("{"+both+`,"next_round_guidance":"start over"}`),
			decision: gated.DecisionReject, notes: "no",
			want: runAnswer{criteria: []gated.CriterionEval{{ID: "design", Pass: true, Confidence: 1}, {ID: "docs"}}, guidance: "start over"},
		},
		{
			note:     "approval with missing work is read as written",
			text:     fmt.Sprintf(gates, "approve", "ok") + block("{"+both+`,"missing_work":["y"]}`),
			decision: gated.DecisionApprove, notes: "ok",
			want: runAnswer{criteria: []gated.CriterionEval{{ID: "design", Pass: true, Confidence: 1}, {ID: "docs"}}, missingWork: []string{"y"}},
		},
		{
			note:     "no criteria to judge",
			text:     fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[]}`),
			rules:    &runRules{gates: []string{"criteria_met"}},
			decision: gated.DecisionApprove, notes: "ok",
		},
		{
			note:     "approval with a failed criterion is read as written: the host rejects it",
			text:     fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[{"id":"design","pass":false,"reason":"no"},{"id":"docs","pass":true}]}`),
			decision: gated.DecisionApprove, notes: "ok",
			want: runAnswer{criteria: []gated.CriterionEval{{ID: "design", Reason: "no"}, {ID: "docs", Pass: true}}},
		},
		{note: "bad decision line first", text: "Looks good\n" + block("{"+both+"}"), bad: "is not"},
		{note: "no block", text: fmt.Sprintf(gates, "approve", "ok"), bad: "no ```json block"},
		{note: "plain fence is not the block", text: fmt.Sprintf(gates, "approve", "ok") + "```\n{" + both + "}\n```", bad: "no ```json block"},
		{note: "two blocks", text: fmt.Sprintf(gates, "approve", "ok") + block("{"+both+"}") + "\n" + block("{}"), bad: "more than one"},
		{note: "unclosed", text: fmt.Sprintf(gates, "approve", "ok") + "```json\n{" + both + "}", bad: "not closed"},
		{note: "not an object", text: fmt.Sprintf(gates, "approve", "ok") + block("null"), bad: "does not hold a JSON object"},
		{note: "trailing comma", text: fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[],}`), bad: "invalid character '}'"},
		{note: "unknown key", text: fmt.Sprintf(gates, "approve", "ok") + block("{"+both+`,"missingWork":["x"]}`), bad: `unknown field "missingWork"`},
		{note: "two values", text: fmt.Sprintf(gates, "approve", "ok") + block("{"+both+"} {}"), bad: "more than one JSON value"},
		{note: "criterion without id", text: fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[{"pass":true}]}`), bad: "criteria[0] has no id"},
		{note: "criterion not asked for", text: fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[{"id":"tests","pass":true}]}`), bad: `"tests" is not a criterion you were asked to judge ("design", "docs")`},
		{note: "criterion twice", text: fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[{"id":"design","pass":true},{"id":"design","pass":true}]}`), bad: "reported twice"},
		{note: "criterion missing", text: fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[{"id":"design","pass":true}]}`), bad: `no entry for "docs"`},
		{note: "pass missing", text: fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[{"id":"design"},{"id":"docs","pass":true}]}`), bad: `has no "pass"`},
		{note: "pass as a string", text: fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[{"id":"design","pass":"yes"},{"id":"docs","pass":true}]}`), bad: "cannot unmarshal string"},
		{note: "confidence as a percentage", text: fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[{"id":"design","pass":true,"confidence":85},{"id":"docs","pass":true}]}`), bad: "confidence 85"},
		{note: "negative confidence", text: fmt.Sprintf(gates, "approve", "ok") + block(`{"criteria":[{"id":"design","pass":true,"confidence":-0.1},{"id":"docs","pass":true}]}`), bad: "from 0 to 1"},
		{note: "line 0", text: fmt.Sprintf(gates, "reject", "no") + block("{"+both+`,"comments":[{"path":"a","line":0,"body":"b"}],"missing_work":["x"]}`), bad: "line 0"},
		{note: "fractional line", text: fmt.Sprintf(gates, "reject", "no") + block("{"+both+`,"comments":[{"path":"a","line":1.5,"body":"b"}],"missing_work":["x"]}`), bad: "cannot unmarshal number 1.5"},
		{note: "comment without path", text: fmt.Sprintf(gates, "reject", "no") + block("{"+both+`,"comments":[{"line":1,"body":"b"}],"missing_work":["x"]}`), bad: "comments[0] has no path"},
		{note: "comment without body", text: fmt.Sprintf(gates, "reject", "no") + block("{"+both+`,"comments":[{"path":"a"}],"missing_work":["x"]}`), bad: "comments[0] has no body"},
		{note: "blank missing work", text: fmt.Sprintf(gates, "reject", "no") + block("{"+both+`,"missing_work":["x"," "]}`), bad: "missing_work[1] is blank"},
		{note: "rejection with nothing to do", text: fmt.Sprintf(gates, "reject", "no") + block("{"+both+`,"missing_work":[],"next_round_guidance":"  "}`), bad: "neither missing_work nor next_round_guidance"},
		{note: "approval with a failed gate and nothing to do", text: "Decision: approve\n- criteria_met: fail — no\n" + block("{"+both+"}"), bad: `does not report the gate "criteria_met" as passed`},
		{note: "approval whose notes fail a gate", text: "Decision: approve\n- criteria_met: pass\nNotes: ok\n- criteria_met: fail\n" + block("{"+both+"}"), bad: `"criteria_met"`},
		{note: "approval with a gate both passed and failed", text: "Decision: approve\n- criteria_met: pass\n- criteria_met: fail\n" + block("{"+both+"}"), bad: `"criteria_met"`},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			rules := testRules
			if tc.rules != nil {
				rules = *tc.rules
			}
			a, err := parseRunAnswer(tc.text, rules)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("err = %v, want one saying %q", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.decision != tc.decision || a.notes != tc.notes {
				t.Errorf("decision %q, notes %q; want %q, %q", a.decision, a.notes, tc.decision, tc.notes)
			}
			got := *a.run
			if !slices.EqualFunc(got.criteria, tc.want.criteria, func(x, y gated.CriterionEval) bool {
				return x.ID == y.ID && x.Pass == y.Pass && x.Confidence == y.Confidence && x.Reason == y.Reason
			}) || !slices.EqualFunc(got.comments, tc.want.comments, func(x, y gated.Comment) bool {
				return x.Path == y.Path && x.Body == y.Body && (x.Line == nil) == (y.Line == nil) && (x.Line == nil || *x.Line == *y.Line)
			}) || !slices.Equal(got.missingWork, tc.want.missingWork) || got.guidance != tc.want.guidance || !slices.Equal(got.warnings, tc.want.warnings) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
