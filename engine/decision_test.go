package engine_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// decisionCases are the texts the host's reading is tested on; they also
// seed FuzzParseDecision.
var decisionCases = []struct {
	note string
	text string
	want gated.ReviewDecision
	why  string // part of the explanation of a rejection; "" to skip
}{
	{note: "plain approve", text: "Decision: approve", want: gated.DecisionApprove},
	{note: "capitals", text: "DECISION: Approve", want: gated.DecisionApprove},
	{note: "whole line in bold", text: "**Decision: approve**", want: gated.DecisionApprove},
	{note: "whole line in italics", text: "*Decision: approve*", want: gated.DecisionApprove},
	{note: "whole line in underscores", text: "_Decision: approve_", want: gated.DecisionApprove},
	{note: "whole line in double underscores", text: "__Decision: approve__", want: gated.DecisionApprove},
	{note: "upper case after leading blank lines", text: "\n\n   \n\t\ndecision: APPROVE", want: gated.DecisionApprove},
	{note: "extra spaces and tabs", text: "  Decision:\t  approve  ", want: gated.DecisionApprove},
	{note: "CRLF line endings", text: "Decision: approve\r\nGates:\r\n- sop_covers: pass\r\n", want: gated.DecisionApprove},
	{note: "approve followed by details", text: "Decision: approve\nGates:\n- sop_covers: pass\nNotes: the SOP is current", want: gated.DecisionApprove},
	{note: "the same decision line again", text: "Decision: approve\nGates:\n- sop_covers: pass\nDecision: approve", want: gated.DecisionApprove},
	{note: "the same decision line in a code fence", text: "Decision: approve\nNotes: the answer format is\n```\nDecision: approve\n```", want: gated.DecisionApprove},
	{note: "a sentence about the decision", text: "Decision: approve\nNotes: the decision rests on SOP-001.", want: gated.DecisionApprove},
	{note: "names and titles with words that say no", text: "Decision: approve\nGates:\n- sop_covers: pass — SOP-009 (Revoke a leaked token; reject the old one) covers revoke_api_token\nNotes: SOP-009 covers revoke_api_token and deny_old_sessions on this target.", want: gated.DecisionApprove},
	{note: "text exactly at the limit", text: "Decision: approve\n" + strings.Repeat("x", gated.MaxDecisionTextBytes-len("Decision: approve\n")), want: gated.DecisionApprove},

	{note: "approve with caveats", text: "Decision: approve with caveats", want: gated.DecisionReject},
	{note: "approve with a full stop", text: "Decision: approve.", want: gated.DecisionReject},
	{note: "approve without the decision label", text: "I approve", want: gated.DecisionReject},
	{note: "bare approve", text: "approve", want: gated.DecisionReject},
	{note: "empty", text: "", want: gated.DecisionReject, why: "no text"},
	{note: "white space only", text: " \n\t\r\n   \n", want: gated.DecisionReject},
	{note: "explicit reject", text: "Decision: reject", want: gated.DecisionReject},
	{note: "no value", text: "Decision:", want: gated.DecisionReject},
	{note: "maybe", text: "Decision: maybe", want: gated.DecisionReject},
	{note: "approve and reject", text: "Decision: approve reject", want: gated.DecisionReject},
	{note: "not approve", text: "Decision: not approve", want: gated.DecisionReject},
	{note: "text over the limit", text: "Decision: approve\n" + strings.Repeat("x", gated.MaxDecisionTextBytes), want: gated.DecisionReject, why: "byte limit"},
	{note: "approve only on the second non-blank line", text: "Looks safe to me.\n\nDecision: approve", want: gated.DecisionReject},
	{note: "reject then approve", text: "Decision: reject\nDecision: approve", want: gated.DecisionReject},
	{note: "label inside a sentence", text: "My Decision: approve", want: gated.DecisionReject},

	// A later line that changes or takes back the decision.
	{note: "approve then reject", text: "Decision: approve\nGates:\n- sop_covers: pass\nDecision: reject", want: gated.DecisionReject, why: `line 4 "Decision: reject"`},
	{note: "approve then approve with caveats", text: "Decision: approve\nDecision: approve with caveats", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then approve with a full stop", text: "Decision: approve\nDecision: approve.", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then a bold label", text: "Decision: approve\n**Decision:** reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then a quoted reject", text: "Decision: approve\n> Decision: reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then a final decision", text: "Decision: approve\nNotes: fine.\n- Final decision: reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then reject in a code fence", text: "Decision: approve\n```\nDecision: reject\n```", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then reject with a zero-width space in the label", text: "Decision: approve\nDeci\u200bsion: reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then reject with a Cyrillic e in the label", text: "Decision: approve\nD\u0435cision: reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then reject after a full-width colon", text: "Decision: approve\nDecision\uff1a reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then reject after a line separator", text: "Decision: approve\u2028Decision: reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then a retraction", text: "Decision: approve\nNotes: I retract this approval; the SOP is stale.", want: gated.DecisionReject, why: "retract"},
	{note: "approve then withdrawn", text: "Decision: approve\nGates:\n- sop_covers: pass\nNotes: Withdrawn.", want: gated.DecisionReject, why: "withdrawn"},
	{note: "approve then scratch that", text: "Decision: approve\nScratch that: do not restart it.", want: gated.DecisionReject, why: "scratch that"},
	{note: "approve then not yet", text: "Decision: approve\nNotes: not yet, wait for the backup.", want: gated.DecisionReject, why: "not yet"},
	{note: "approve then on second thought", text: "Decision: approve\nOn second thought, no.", want: gated.DecisionReject, why: "on second thought"},
	{note: "approve then a retraction with a zero-width joiner", text: "Decision: approve\nNotes: retr\u200dacted.", want: gated.DecisionReject, why: "retract"},
	{note: "approve then a numbered decision", text: "Decision: approve\nDecision 2: reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then a decision with a parenthesis", text: "Decision: approve\nDecision (final): reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then a revised decision", text: "Decision: approve\nDecision, revised: reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then an accented label", text: "Decision: approve\nDecisi\u00f3n: reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then a decision without a colon", text: "Decision: approve\nDecision reject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then a decision heading", text: "Decision: approve\n# Decision\nreject", want: gated.DecisionReject, why: "disagrees"},
	{note: "approve then a verdict line", text: "Decision: approve\nVerdict: reject", want: gated.DecisionReject, why: "says no"},
	{note: "approve then a final answer", text: "Decision: approve\nFinal answer: REJECTED", want: gated.DecisionReject, why: "says no"},
	{note: "approve then an update", text: "Decision: approve\nUpdate: declined after the backup check.", want: gated.DecisionReject, why: "says no"},
	{note: "approve then not approved", text: "Decision: approve\nNOT APPROVED", want: gated.DecisionReject, why: "says no"},
	{note: "approve then do not approve", text: "Decision: approve\nNotes: do not approve this until the DBA signs.", want: gated.DecisionReject, why: "says no"},
	{note: "approve then can't approve", text: "Decision: approve\nNotes: I can\u2019t approve a change with no rollback.", want: gated.DecisionReject, why: "says no"},
	{note: "approve then a sentence that rejects", text: "Decision: approve\nActually, I reject this change.", want: gated.DecisionReject, why: "says no"},
	{note: "approve then my decision is to reject", text: "Decision: approve\nMy decision is to reject this.", want: gated.DecisionReject, why: "says no"},
	{note: "approve then a revoked approval", text: "Decision: approve\nI revoke this approval.", want: gated.DecisionReject, why: "says no"},
	{note: "approve then unsure", text: "Decision: approve\nNotes: unsure.", want: gated.DecisionReject, why: "says no"},
	{note: "approve then not sure", text: "Decision: approve\nNotes: I am not sure this is safe.", want: gated.DecisionReject, why: "says no"},
	{note: "approve then reject if unsure", text: "Decision: approve\nGates:\n- sop_covers: pass\nNotes: reject if unsure", want: gated.DecisionReject, why: "says no"},

	// Marks inside the decision line.
	{note: "approve with a footnote mark", text: "Decision: approve*\n\n* not yet: the DBA has not signed.", want: gated.DecisionReject},
	{note: "approve with a footnote reference", text: "Decision: approve[^1]\n\n[^1]: pending.", want: gated.DecisionReject},
	{note: "backtick inside the word", text: "Decision: app`rove`", want: gated.DecisionReject},
	{note: "emphasis inside the word", text: "Decision: app**rove**", want: gated.DecisionReject},
	{note: "underscore inside the word", text: "Decision: app_rove", want: gated.DecisionReject},
	{note: "bold label only", text: "**Decision:** approve", want: gated.DecisionReject},
	{note: "code span around the line", text: "`Decision: approve`", want: gated.DecisionReject},
	{note: "code span and underscores", text: "`Decision: _approve_`", want: gated.DecisionReject},
	{note: "unmatched emphasis", text: "**Decision: approve*", want: gated.DecisionReject},
	{note: "triple emphasis", text: "***Decision: approve***", want: gated.DecisionReject},
	{note: "heading", text: "# Decision: approve", want: gated.DecisionReject},

	// Lookalikes of the line.
	{note: "Cyrillic a in approve", text: "Decision: \u0430pprove", want: gated.DecisionReject},
	{note: "Turkish dotted capital I in the label", text: "DEC\u0130SION: APPROVE", want: gated.DecisionReject},
	{note: "long s in the label", text: "Deci\u017fion: approve", want: gated.DecisionReject},
	{note: "zero-width joiner inside approve", text: "Decision: app\u200drove", want: gated.DecisionReject},
	{note: "zero-width space before the line", text: "\u200bDecision: approve", want: gated.DecisionReject},
	{note: "full-width colon", text: "Decision\uff1a approve", want: gated.DecisionReject},
	{note: "no-break space after the colon", text: "Decision:\u00a0approve", want: gated.DecisionReject},
	{note: "full-width letters", text: "\uff24ecision: approve", want: gated.DecisionReject},
}

func TestParseDecision(t *testing.T) {
	for _, tc := range decisionCases {
		t.Run(tc.note, func(t *testing.T) {
			got, why := gated.ParseDecision(tc.text)
			if got != tc.want {
				t.Errorf("ParseDecision(%.80q) = %q (%s), want %q", tc.text, got, why, tc.want)
			}
			if why == "" {
				t.Error("ParseDecision gave no explanation")
			}
			if tc.why != "" && !strings.Contains(why, tc.why) {
				t.Errorf("explanation %q does not say %q", why, tc.why)
			}
		})
	}
}

// FuzzParseDecision checks the host's reading against refApproves, a
// separate and simpler reading of the contract: ParseDecision may reject
// more than the reference, never approve more.
func FuzzParseDecision(f *testing.F) {
	for _, tc := range decisionCases {
		// The texts at and over the size limit stay in TestParseDecision:
		// as seeds they make the fuzzer spend its time minimising 64 KiB.
		if len(tc.text) <= 4<<10 {
			f.Add(tc.text)
		}
	}
	for _, s := range []string{
		"\n\ndecision: APPROVE\n", "`Decision`: _approve_", "Decision: approve\r\nGates:", "Decision: approve\rDecision: reject",
		"Decision: approve\n1. My final decision = reject", "Decision: approve\nNotes: not\u00a0yet", "Decision: approve\n\u0130 retract",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, why := gated.ParseDecision(text)
		if got != gated.DecisionApprove && got != gated.DecisionReject {
			t.Fatalf("ParseDecision returned %q", got)
		}
		if why == "" {
			t.Fatal("ParseDecision gave no explanation")
		}
		if got == gated.DecisionApprove {
			if bad := refApproves(text); bad != "" {
				t.Fatalf("approved %q, which the reference rejects: %s", text, bad)
			}
		}
	})
}

// The reference reading of a reviewer's text, written apart from the
// parser, with regular expressions: looser than the parser where that is
// simpler (it finds fewer later decision lines and retractions), never
// looser than the contract.
var (
	refBreak = regexp.MustCompile(`\r\n|[\n\r\v\f\x{85}\x{2028}\x{2029}]`)
	// refApproveLine is exactly "Decision: approve", ASCII letters in any
	// case, optionally wrapped whole in one emphasis pair.
	refApproveLine = func() *regexp.Regexp {
		x := anyCase("decision") + ":[ \t]+" + anyCase("approve")
		return regexp.MustCompile(`^[ \t]*(?:` + x + `|\*` + x + `\*|\*\*` + x + `\*\*|_` + x + `_|__` + x + `__)[ \t]*$`)
	}()
	// refLabel is a line that starts, after markup, with up to three
	// ASCII words and "decision" and a colon.
	refLabel = regexp.MustCompile("^[ \t*_`#>|+-]*(?:[a-z0-9]+[ \t*_`#>]+){0,3}decision[ \t*_`#>]*:")
	// refRetraction is a retraction phrase between word boundaries, where
	// letters, digits, marks and format characters all count as word.
	refRetraction = regexp.MustCompile(`(?:^|[^\pL\pN\pM\p{Cf}])(?:retract|rescind|withdrawn(?:$|[^\pL\pN\pM\p{Cf}])|withdrew(?:$|[^\pL\pN\pM\p{Cf}])|(?:scratch|strike)[ \t]+that(?:$|[^\pL\pN\pM\p{Cf}])|not[ \t]+yet(?:$|[^\pL\pN\pM\p{Cf}]))`)
)

// anyCase is a pattern for word in any ASCII case: "[dD][eE]...".
func anyCase(word string) string {
	var b strings.Builder
	for _, c := range word {
		fmt.Fprintf(&b, "[%c%c]", c, c-'a'+'A')
	}
	return b.String()
}

// lowerASCII lower-cases ASCII letters only.
func lowerASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// refApproves returns "" if the reference reading approves text, or why
// it does not.
func refApproves(text string) string {
	if len(text) > gated.MaxDecisionTextBytes {
		return "over the limit"
	}
	lines := refBreak.Split(text, -1)
	first := slices.IndexFunc(lines, func(l string) bool { return strings.Trim(l, " \t") != "" })
	if first < 0 {
		return "no text"
	}
	if !refApproveLine.MatchString(lines[first]) {
		return fmt.Sprintf("first line %q is not exactly the approve line", lines[first])
	}
	for _, l := range lines[first+1:] {
		low := lowerASCII(l)
		if refLabel.MatchString(low) && !refApproveLine.MatchString(l) {
			return fmt.Sprintf("later decision line %q", l)
		}
		if refRetraction.MatchString(low) {
			return fmt.Sprintf("retraction in %q", l)
		}
	}
	return ""
}

// refPass is an exact pass token and what may follow it.
var refPass = func() *regexp.Regexp {
	p := anyCase("pass") + "(?:" + anyCase("ed") + ")?"
	return regexp.MustCompile(`^[ \t]*(?:` + p + `|\*` + p + `\*|\*\*` + p + `\*\*|_` + p + `_|__` + p + "__|`" + p + "`" + `)(?:[ \t]*$|[ \t]*[:—–]|[ \t]+[-(])`)
}()

// FuzzCheckGateLines checks Judge against a reference reading of one
// gate's lines: where a plain "- name: value" line does not read as an
// exact pass while the structured gate passed, or reads as one while it
// failed, Judge must not approve.
func FuzzCheckGateLines(f *testing.F) {
	f.Add("Decision: approve\n- sop_covers: pass — SOP-001", "sop_covers", true)
	f.Add("Decision: approve\n* **sop_covers**: **passed** (SOP-001)", "sop_covers", true)
	f.Add("Decision: approve\n| sop_covers | pass |", "sop_covers", true)
	f.Add("Decision: approve\n- sop_covers: pass\n- backup_verified: pass", "backup_verified", false)
	for _, v := range []string{"fail", "pass-ish", "passed?", "pass/fail unknown", "pass_unverified", "pass.", "PASS", "`pass`", "__Passed__: ok", "pass -", "pass(x)"} {
		f.Add("Decision: approve\nGates:\n- sop_covers: "+v+"\nNotes: ok", "sop_covers", true)
	}
	nameRE := regexp.MustCompile(`^[a-z][a-z0-9_]*[a-z0-9]$`)
	f.Fuzz(func(t *testing.T, text, name string, passed bool) {
		if !nameRE.MatchString(name) {
			return
		}
		res := engine.ReviewResult{Plugin: "p", Text: text, Decision: gated.DecisionApprove, Gates: []gated.GateResult{{Name: name, Passed: passed}}}
		_, approved, why := engine.Judge(res, &engine.Persona{Name: "r"})
		if !approved {
			return
		}
		if bad := refApproves(text); bad != "" {
			t.Fatalf("Judge approved (%s) a text the reference rejects: %s", why, bad)
		}
		line := regexp.MustCompile("^[ \t]*(?:[-*+][ \t]+)?[*`]*" + regexp.QuoteMeta(name) + "[*`]*[ \t]*:(.*)$")
		for _, l := range refBreak.Split(text, -1) {
			m := line.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			if pass := refPass.MatchString(m[1]); pass != passed {
				t.Fatalf("Judge approved (%s) with gate %s reported passed=%v, but line %q reads as pass=%v", why, name, passed, l, pass)
			}
		}
	})
}

// threeGates are the gates of the default reviewer persona.
var threeGates = []string{"sop_covers", "no_parallel_operation", "rollback_known"}

// passedGates reports every one of names as passed.
func passedGates(names ...string) []gated.GateResult {
	gates := make([]gated.GateResult, len(names))
	for i, n := range names {
		gates[i] = gated.GateResult{Name: n, Passed: true}
	}
	return gates
}

func TestJudgeReadsTheTextsGateLines(t *testing.T) {
	const head = "Decision: approve\nGates:\n"
	const passing = "- sop_covers: pass — SOP-001\n- no_parallel_operation: pass — none\n- rollback_known: pass — start the old unit\n"
	tests := []struct {
		note  string
		text  string
		gates []gated.GateResult // nil: the three gates, passed
		want  bool
		why   string // part of the reason of a rejection
	}{
		{note: "text and structured gates agree", text: head + passing + "Notes: fine.", want: true},
		{note: "no gate lines in the text", text: "Decision: approve\nNotes: fine.", want: true},
		{note: "bold names and values, other dashes", text: head + "* **sop_covers**: **PASSED** - SOP-001\n- `no_parallel_operation`: `pass` – none\n- __rollback_known__: Pass: known", want: true},
		{note: "pass in parentheses", text: head + "- sop_covers: pass (SOP-001)\n- no_parallel_operation: pass\n- rollback_known: passed", want: true},
		{note: "a failed gate the structured report also fails", text: head + passing + "- backup_verified: fail — none", gates: append(passedGates(threeGates...), gated.GateResult{Name: "backup_verified"}), want: true},
		{note: "a gate line the structured report does not name", text: head + passing + "- risk: low", want: true},
		{note: "the same gate passed twice", text: head + passing + "- sop_covers: pass — again", want: true},

		{note: "all three gates failed in the text", text: head + "- sop_covers: fail\n- no_parallel_operation: fail\n- rollback_known: fail", why: "sop_covers"},
		{note: "one gate failed in the text", text: head + "- sop_covers: pass\n- no_parallel_operation: pass\n- rollback_known: failed — none written", why: "rollback_known"},
		{note: "pass-ish", text: head + "- sop_covers: pass-ish\n- no_parallel_operation: pass\n- rollback_known: pass", why: "sop_covers"},
		{note: "passed with a question mark", text: head + "- sop_covers: passed?\n- no_parallel_operation: pass\n- rollback_known: pass", why: "sop_covers"},
		{note: "pass or fail unknown", text: head + "- sop_covers: pass/fail unknown\n- no_parallel_operation: pass\n- rollback_known: pass", why: "sop_covers"},
		{note: "pass unverified", text: head + "- sop_covers: pass_unverified\n- no_parallel_operation: pass\n- rollback_known: pass", why: "sop_covers"},
		{note: "pass with words after it", text: head + "- sop_covers: pass if the SOP is current\n- no_parallel_operation: pass\n- rollback_known: pass", why: "sop_covers"},
		{note: "pass with a full stop", text: head + "- sop_covers: pass.\n- no_parallel_operation: pass\n- rollback_known: pass", why: "sop_covers"},
		{note: "unknown", text: head + "- sop_covers: unknown\n- no_parallel_operation: pass\n- rollback_known: pass", why: "sop_covers"},
		{note: "a gate both passed and failed in the text", text: head + passing + "- rollback_known: fail — on reflection", why: "rollback_known"},
		{note: "a failed gate in the notes", text: head + passing + "Notes: fine.\n- no_parallel_operation: fail — web-7 restarted", why: "no_parallel_operation"},
		{note: "a failed gate without a bullet", text: head + passing + "no_parallel_operation: fail", why: "no_parallel_operation"},
		{note: "a failed gate after a dash", text: head + passing + "- rollback_known — fail", why: "rollback_known"},
		{note: "a failed gate after a hyphen", text: head + passing + "- rollback_known - fail", why: "rollback_known"},
		{note: "a failed gate after an equals sign", text: head + passing + "sop_covers = fail", why: "sop_covers"},
		{note: "a failed gate after an arrow", text: head + passing + "sop_covers \u2192 failed", why: "sop_covers"},
		{note: "a failed gate after an ASCII arrow", text: head + passing + "sop_covers -> fail", why: "sop_covers"},
		{note: "a failed gate with no separator", text: head + passing + "sop_covers fail", why: "sop_covers"},
		{note: "a failed gate with a word before its name", text: head + passing + "Gate sop_covers: fail", why: "sop_covers"},
		{note: "a failed gate with a note after its name", text: head + passing + "- sop_covers (gate 1): fail", why: "sop_covers"},
		{note: "a gate that did not pass in a sentence", text: head + passing + "Notes: no_parallel_operation did not pass, web-7 restarted.", why: "no_parallel_operation"},
		{note: "gates failed, named by none", text: head + passing + "Notes: all three gates failed.", why: "gates"},
		{note: "a passed gate in a sentence", text: head + passing + "Notes: sop_covers holds, SOP-001 is current.", want: true},
		{note: "text over the limit", text: head + passing + strings.Repeat("x", gated.MaxDecisionTextBytes), why: "byte limit"},
		{note: "a failed gate in a table", text: head + "| gate | result |\n|---|---|\n| sop_covers | fail |\n", why: "sop_covers"},
		{note: "a failed gate named with a lookalike letter", text: head + passing + "- \u0455op_covers: fail", why: "sop_covers"},
		{note: "a failed gate with a zero-width space in its name", text: head + passing + "- sop_\u200bcovers: fail", why: "sop_covers"},
		{note: "a failed gate named in capitals", text: head + passing + "- SOP_COVERS: fail", why: "sop_covers"},
		{note: "a passed text gate the structured report fails", text: head + passing + "- backup_verified: pass", gates: append(passedGates(threeGates...), gated.GateResult{Name: "backup_verified"}), why: "backup_verified"},
	}
	persona := &engine.Persona{Name: "reviewer", RequiredGates: threeGates}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			gates := tc.gates
			if gates == nil {
				gates = passedGates(threeGates...)
			}
			res := engine.ReviewResult{Plugin: "p", Text: tc.text, Decision: gated.DecisionApprove, Gates: gates}
			rev, approved, why := engine.Judge(res, persona)
			if approved != tc.want {
				t.Fatalf("Judge(%q) approved = %v (%s), want %v", tc.text, approved, why, tc.want)
			}
			if approved {
				return
			}
			if rev.Decision != gated.DecisionReject {
				t.Errorf("review decision %q on a rejection", rev.Decision)
			}
			if !strings.Contains(why, tc.why) {
				t.Errorf("reason %q does not name %q", why, tc.why)
			}
		})
	}
}
