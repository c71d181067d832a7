package gated

import "github.com/gated/gated/internal/reviewtext"

// MaxDecisionTextBytes (64 KiB) bounds the reviewer text the host reads
// and keeps. Longer text is a rejection: a reviewer that cannot say yes
// briefly has not said yes.
const MaxDecisionTextBytes = reviewtext.MaxTextBytes

// ParseDecision reads a reviewer's text the way the host must. It is
// strict both ways:
//
//   - The first non-blank line decides, and only a line that is exactly
//     "Decision: approve" approves: ASCII letters in any case, spaces or
//     tabs between the colon and the word and around the line, and at most
//     one matching emphasis pair (*, **, _ or __) wrapping the whole line.
//     Any other mark on the line ("**Decision:** approve", a backtick or a
//     footnote mark, a look-alike letter, a full stop) is a rejection.
//   - After an approving first line, every line that looks like a decision
//     line — read leniently: any case, markup, accents, zero-width
//     characters and common look-alike letters ignored; up to four words
//     before a colon, a dash or an equals sign, one of them "decision"
//     ("Decision 2: reject", "Decision (final): reject"); or a line whose
//     first word is "decision" ("Decision reject", a "# Decision" heading)
//     — must itself be exactly "Decision: approve". Code fences do not hide
//     such a line.
//   - After an approving first line, a line that takes the approval back
//     ("retract", "rescind", "withdrawn", "scratch that", "not yet", "on
//     second thought", ...) makes it a rejection.
//   - After an approving first line, a line that says no or not sure
//     ("Verdict: reject", "NOT APPROVED", "I can't approve this", "unsure",
//     ...) makes it a rejection. Names joined by "_" (actions,
//     gates, tools such as revoke_api_token) are not words here, and a gate
//     line that reports an exact pass (GatePasses) is evidence, not a
//     refusal: its detail may quote an SOP's title.
//
// Everything else — "Decision: reject", "approve with caveats", an empty
// text, garbage — is a rejection, and the returned explanation says which.
// What the text's gate lines say is checked against the structured gates
// by CheckGateLines.
func ParseDecision(text string) (ReviewDecision, string) {
	approve, why, _ := reviewtext.Read(text)
	if approve {
		return DecisionApprove, why
	}
	return DecisionReject, why
}

// GatePasses reports whether value, the part of a gate line after the
// gate's name and colon, is an exact pass, and returns the detail after
// it. An exact pass is the token "pass" or "passed" (ASCII, any case),
// optionally wrapped in one matching pair of *, **, _, __ or `, followed
// by nothing, by a colon, em dash or en dash, or by blanks and then a
// hyphen or an opening parenthesis. "pass-ish", "passed?",
// "pass/fail unknown", "pass_unverified", "pass." and "pass if ..." are
// not passes.
func GatePasses(value string) (string, bool) { return reviewtext.GatePasses(value) }

// CheckGateLines compares what the gate lines of a reviewer's text say
// with the structured gates. A gate line is any line that, after an
// optional blockquote mark, bullet or number, names a structured gate and
// then a colon, an em dash or an en dash ("- sop_covers: fail — none"),
// or a table row whose first cell names one ("| sop_covers | fail |").
// Any other line that names a gate and says it failed, however it is
// written ("sop_covers = fail", "Gate sop_covers: fail", "sop_covers did
// not pass"), reads as that gate failed, and one that says gates failed
// without naming one ("all three gates failed") as every gate failed.
// Text over MaxDecisionTextBytes is an error. Names are compared leniently
// (case, markup, zero-width characters, look-alike letters, and "-", "_"
// or blanks between words ignored). The text passes a gate only if every
// line about it is an exact pass (GatePasses); the structured report
// passes it only if every report of it passed. A gate on which the two
// disagree, either way, is an error naming the gate and the line. Gates
// the text does not mention are left to the structured report.
func CheckGateLines(text string, gates []GateResult) error {
	gs := make([]reviewtext.Gate, len(gates))
	for i, g := range gates {
		gs[i] = reviewtext.Gate{Name: g.Name, Passed: g.Passed}
	}
	return reviewtext.CheckGateLines(text, gs)
}
