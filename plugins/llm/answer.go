package llm

import (
	"fmt"
	"strings"

	"github.com/gated/gated/engine"
)

// answer is a model's final text read in the decision format.
type answer struct {
	decision engine.Decision
	gates    []engine.Gate
	notes    string
}

// parseAnswer reads a model's final text in the decision format:
//
//	Decision: approve | reject
//	Gates:
//	- name: pass | fail — evidence
//	Notes: free text
//
// It fails when the first non-blank line is not a plain decision line or
// the text is over engine.MaxDecisionTextBytes: such an answer gets one
// repair turn. The decision is the host's own reading (engine.ParseDecision),
// so the plugin can never claim more than the host will grant. Gate lines
// are read between the decision line and Notes; a line whose verdict is
// neither pass nor fail is not a gate report, so a required gate reported
// that way stays missing.
func parseAnswer(text string) (answer, error) {
	if len(text) > engine.MaxDecisionTextBytes {
		return answer{}, fmt.Errorf("the answer is %d bytes, over the %d byte limit", len(text), engine.MaxDecisionTextBytes)
	}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	first := 0
	for first < len(lines) && strings.TrimSpace(lines[first]) == "" {
		first++
	}
	if first == len(lines) {
		return answer{}, fmt.Errorf("the answer is empty")
	}
	a := answer{}
	// Well formed means the host reads an approval, or the line plainly
	// rejects; a line the host would not read as it looks gets a repair.
	a.decision, _ = engine.ParseDecision(text)
	if a.decision != engine.DecisionApprove && decisionWord(lines[first]) != "reject" {
		return answer{}, fmt.Errorf("the first line %q is not \"Decision: approve\" or \"Decision: reject\"", clip(strings.TrimSpace(lines[first]), 120))
	}
	for i := first + 1; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if rest, ok := cutLabel(line, "notes"); ok {
			notes := append([]string{rest}, lines[i+1:]...)
			a.notes = strings.TrimSpace(strings.Join(notes, "\n"))
			break
		}
		if g, ok := parseGateLine(line); ok {
			a.gates = append(a.gates, g)
		}
	}
	return a, nil
}

// decisionWord returns what a decision line decides, lower case, or "" if
// the line is not of the form "Decision: <word>". Markdown emphasis and
// extra blanks are ignored, as the host ignores them.
func decisionWord(line string) string {
	norm := strings.Join(strings.Fields(strings.NewReplacer("*", "", "_", "", "`", "").Replace(strings.ToLower(line))), " ")
	word, ok := strings.CutPrefix(norm, "decision: ")
	if !ok {
		return ""
	}
	return word
}

// cutLabel reports whether line starts with label and a colon ("Notes:",
// "**Notes:**"), and returns the rest of the line.
func cutLabel(line, label string) (string, bool) {
	plain := strings.TrimLeft(line, "*_# ")
	if len(plain) < len(label)+1 || !strings.EqualFold(plain[:len(label)], label) {
		return "", false
	}
	rest := strings.TrimLeft(plain[len(label):], "*_ ")
	if !strings.HasPrefix(rest, ":") {
		return "", false
	}
	return strings.TrimSpace(strings.TrimLeft(rest[1:], "*_ ")), true
}

// parseGateLine reads "- name: pass — evidence" (also with *, or "passed",
// "failed", bold or code markup, and -, – or : before the evidence).
func parseGateLine(line string) (engine.Gate, bool) {
	var ok bool
	for _, bullet := range []string{"- ", "* ", "• "} {
		var rest string
		if rest, ok = strings.CutPrefix(line, bullet); ok {
			line = rest
			break
		}
	}
	if !ok {
		return engine.Gate{}, false
	}
	name, rest, ok := strings.Cut(line, ":")
	if !ok {
		return engine.Gate{}, false
	}
	name = strings.Trim(strings.TrimSpace(name), "*` ")
	if name == "" || strings.ContainsAny(name, " \t") {
		return engine.Gate{}, false
	}
	rest = strings.TrimLeft(rest, " *`_")
	end := strings.IndexFunc(rest, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
	if end < 0 {
		end = len(rest)
	}
	g := engine.Gate{Name: name}
	switch strings.ToLower(rest[:end]) {
	case "pass", "passed":
		g.Passed = true
	case "fail", "failed":
	default:
		return engine.Gate{}, false
	}
	g.Detail = strings.TrimSpace(strings.TrimLeft(rest[end:], " *`_—–-:,.;()"))
	return g, true
}

// clip shortens s to at most n bytes of valid UTF-8, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
