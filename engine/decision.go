package engine

import (
	"fmt"
	"strings"
)

// MaxDecisionTextBytes bounds the reviewer text the host reads and keeps.
// Longer text is a rejection: a reviewer that cannot say yes briefly has
// not said yes.
const MaxDecisionTextBytes = 64 << 10

// ParseDecision reads a reviewer's text the way the host must: the first
// non-blank line decides. Only a line that reads "Decision: approve"
// (case-insensitive, markdown emphasis allowed, nothing else on the line)
// is an approval. Everything else — "Decision: reject", "approve with
// caveats", an empty text, garbage — is a rejection, and the returned
// explanation says which.
func ParseDecision(text string) (Decision, string) {
	if len(text) > MaxDecisionTextBytes {
		return DecisionReject, fmt.Sprintf("reviewer text is %d bytes, over the %d byte limit", len(text), MaxDecisionTextBytes)
	}
	line := firstNonBlankLine(text)
	if line == "" {
		return DecisionReject, "reviewer returned no text"
	}
	norm := normaliseDecisionLine(line)
	value, ok := strings.CutPrefix(norm, "decision: ")
	if !ok {
		return DecisionReject, fmt.Sprintf("first line %q is not a decision line", clip(line))
	}
	switch value {
	case "approve":
		return DecisionApprove, "reviewer approved"
	case "reject":
		return DecisionReject, "reviewer rejected"
	}
	return DecisionReject, fmt.Sprintf("decision line %q is neither a plain approve nor reject", clip(line))
}

func firstNonBlankLine(text string) string {
	for text != "" {
		var line string
		line, text, _ = strings.Cut(text, "\n")
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// normaliseDecisionLine lower-cases the line, drops markdown emphasis
// markers (*, _ and `) and collapses runs of white space, so that
// "**Decision:** Approve" and "decision: approve" read the same.
func normaliseDecisionLine(line string) string {
	var b strings.Builder
	b.Grow(len(line))
	space := false
	for _, r := range strings.ToLower(line) {
		switch {
		case r == '*' || r == '_' || r == '`':
			continue
		case r == ' ' || r == '\t' || r == '\u00a0':
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}
