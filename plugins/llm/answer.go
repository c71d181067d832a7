package llm

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/strictjson"
	"github.com/gated/gated/plugins/sdk"
)

// answer is a model's final text read in the decision format.
type answer struct {
	decision gated.ReviewDecision
	gates    []gated.GateResult
	notes    string
	// run is the ```json block of an answer to a run review; nil for an
	// action review.
	run *runAnswer
}

// parseAnswer reads a model's final text in the decision format:
//
//	Decision: approve | reject
//	Gates:
//	- name: pass | fail — evidence
//	Notes: free text
//
// It fails when the first non-blank line is not a plain decision line or
// the text is over gated.MaxDecisionTextBytes: such an answer gets one
// repair turn, and so does an approving first line that a later line
// overrules. The decision is the host's own reading (gated.ParseDecision),
// so the plugin can never claim more than the host will grant. Gate lines
// are read between the decision line and Notes; a gate passes only on an
// exact pass token, and a line whose verdict is not an exact pass is a
// gate not passed.
func parseAnswer(text string) (answer, error) {
	a, lines, err := readDecision(text)
	if err != nil {
		return answer{}, err
	}
	a.gates, a.notes = readGatesAndNotes(lines)
	return a, nil
}

// readDecision reads the decision line of text and returns the answer
// with its decision, and the lines after the decision line.
func readDecision(text string) (answer, []string, error) {
	if len(text) > gated.MaxDecisionTextBytes {
		return answer{}, nil, fmt.Errorf("the answer is %d bytes, over the %d byte limit", len(text), gated.MaxDecisionTextBytes)
	}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	first := 0
	for first < len(lines) && strings.TrimSpace(lines[first]) == "" {
		first++
	}
	if first == len(lines) {
		return answer{}, nil, fmt.Errorf("the answer is empty")
	}
	a := answer{}
	// Well formed means the host reads an approval, or the line plainly
	// rejects; a line the host would not read as it looks gets a repair,
	// and so does an approving line that a later line overrules.
	var why string
	a.decision, why = gated.ParseDecision(text)
	if a.decision != gated.DecisionApprove && decisionWord(lines[first]) != "reject" {
		if d, _ := gated.ParseDecision(lines[first]); d == gated.DecisionApprove {
			return answer{}, nil, fmt.Errorf("gated reads the answer as a rejection: %s", why)
		}
		return answer{}, nil, fmt.Errorf("the first line %q is not \"Decision: approve\" or \"Decision: reject\"", clip(strings.TrimSpace(lines[first]), 120))
	}
	return a, lines[first+1:], nil
}

// readGatesAndNotes reads the gate lines up to Notes, and the notes.
func readGatesAndNotes(lines []string) ([]gated.GateResult, string) {
	var gates []gated.GateResult
	for i := range lines {
		line := strings.TrimSpace(lines[i])
		if rest, ok := cutLabel(line, "notes"); ok {
			notes := append([]string{rest}, lines[i+1:]...)
			return gates, strings.TrimSpace(strings.Join(notes, "\n"))
		}
		if g, ok := parseGateLine(line); ok {
			gates = append(gates, g)
		}
	}
	return gates, ""
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

// parseGateLine reads "- name: pass — evidence" (also with *, or
// "passed", "failed", bold or code markup, and -, – or : before the
// evidence). A gate passes only on an exact pass token, by the host's rule
// (gated.GatePasses): "pass-ish", "passed?" or "pass/fail unknown" are
// not passes. A value that is neither an exact pass nor a fail is read as
// a gate not passed, with the value as its detail.
func parseGateLine(line string) (gated.GateResult, bool) {
	var ok bool
	for _, bullet := range []string{"- ", "* ", "• "} {
		var rest string
		if rest, ok = strings.CutPrefix(line, bullet); ok {
			line = rest
			break
		}
	}
	if !ok {
		return gated.GateResult{}, false
	}
	name, rest, ok := strings.Cut(line, ":")
	if !ok {
		return gated.GateResult{}, false
	}
	name = strings.Trim(strings.TrimSpace(name), "*` ")
	if name == "" || strings.ContainsAny(name, " \t") {
		return gated.GateResult{}, false
	}
	g := gated.GateResult{Name: name}
	if detail, ok := gated.GatePasses(rest); ok {
		g.Passed, g.Detail = true, detail
		return g, true
	}
	word := strings.TrimLeft(rest, " *`_")
	end := strings.IndexFunc(word, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
	if end < 0 {
		end = len(word)
	}
	switch strings.ToLower(word[:end]) {
	case "fail", "failed":
		g.Detail = strings.TrimSpace(strings.TrimLeft(word[end:], " *`_—–-:,.;()"))
	default:
		g.Detail = strings.TrimSpace(rest)
	}
	return g, true
}

// clip shortens s to at most n bytes of valid UTF-8, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// runAnswer is the structured part of an answer to a run review.
type runAnswer struct {
	criteria    []gated.CriterionEval
	comments    []gated.Comment
	missingWork []string
	guidance    string
	warnings    []string
}

// runAnswerJSON is the ```json block of an answer to a run review, as the
// model writes it. Pointers tell a missing key from a zero value.
type runAnswerJSON struct {
	Criteria []struct {
		ID         string   `json:"id"`
		Pass       *bool    `json:"pass"`
		Confidence *float64 `json:"confidence"`
		Reason     string   `json:"reason"`
		Refs       []string `json:"refs"`
	} `json:"criteria"`
	Comments []struct {
		Path string `json:"path"`
		Line *int   `json:"line"`
		Body string `json:"body"`
	} `json:"comments"`
	MissingWork       []string `json:"missing_work"`
	NextRoundGuidance string   `json:"next_round_guidance"`
	Warnings          []string `json:"warnings"`
}

// maxCommentLine is the largest line a comment may name: the wire carries
// lines as uint32, and no diff is that long.
const maxCommentLine = math.MaxInt32

// runRules are what an answer to a run review is checked against.
type runRules struct {
	// judge names the criteria the reviewer must report: RunContext.AIReview.
	judge []string
	// gates are the persona's required gates.
	gates []string
}

// rulesFor returns the rules of req's run review.
func rulesFor(req *sdk.Request) runRules {
	r := runRules{gates: req.Persona.RequiredGates}
	if req.Run != nil {
		r.judge = req.Run.AIReview
	}
	return r
}

// parseRunAnswer reads a model's answer to a run review: the decision
// format of parseAnswer followed by exactly one fenced ```json block
//
//	{"criteria": [{"id", "pass", "confidence", "reason", "refs"}],
//	 "comments": [{"path", "line", "body"}],
//	 "missing_work": [...], "next_round_guidance": "...", "warnings": [...]}
//
// The block is left out of the gates and the notes. It fails, and the
// answer gets the repair turn, when the block is missing, repeated,
// unclosed or not that object (unknown keys included), when criteria do
// not name each of rules.judge exactly once with pass set and confidence
// within [0, 1], when a comment has no path or body or a line below 1,
// or when a list item is blank.
//
// It also fails when the answer is a rejection as the host reads it (a
// rejecting decision line, or an approval with a required gate not
// passed) and gives neither missing work nor guidance: such a rejection
// cannot be sent back to the worker, and the host would fail the review.
// An approval that lists missing work or fails a required criterion is
// read as written: the host turns it into a rejection that keeps the
// missing work or names the criterion.
func parseRunAnswer(text string, rules runRules) (answer, error) {
	a, lines, err := readDecision(text)
	if err != nil {
		return answer{}, err
	}
	open, end, err := findJSONBlock(lines)
	if err != nil {
		return answer{}, err
	}
	rest := append(slices.Clip(lines[:open]), lines[end+1:]...)
	a.gates, a.notes = readGatesAndNotes(rest)
	if a.run, err = decodeRunAnswer(strings.Join(lines[open+1:end], "\n"), rules.judge); err != nil {
		return answer{}, err
	}
	if len(a.run.missingWork) > 0 || a.run.guidance != "" {
		return a, nil
	}
	if a.decision != gated.DecisionApprove {
		return answer{}, fmt.Errorf("the answer rejects the run but gives neither missing_work nor next_round_guidance; a rejection must say what the worker has to do")
	}
	if g := unpassedGate(a.gates, rules.gates); g != "" {
		return answer{}, fmt.Errorf("the answer approves the run but does not report the gate %q as passed, which makes it a rejection, and it gives neither missing_work nor next_round_guidance; approve only with every gate passed, or reject and say what the worker has to do", g)
	}
	if err := gated.CheckGateLines(text, a.gates); err != nil {
		return answer{}, fmt.Errorf("the answer approves the run, but %w, which makes it a rejection, and it gives neither missing_work nor next_round_guidance; report each gate once, as exactly pass or fail", err)
	}
	return a, nil
}

// unpassedGate returns the first required gate that gates do not report
// as passed, by the host's rule: a gate passes only if every report of it
// passed.
func unpassedGate(gates []gated.GateResult, required []string) string {
	passed := make(map[string]bool, len(gates))
	for _, g := range gates {
		prev, seen := passed[g.Name]
		passed[g.Name] = g.Passed && (!seen || prev)
	}
	for _, g := range required {
		if !passed[g] {
			return g
		}
	}
	return ""
}

// findJSONBlock returns the lines that open and close the one ```json
// block among lines.
func findJSONBlock(lines []string) (open, end int, err error) {
	open, end = -1, -1
	for i := 0; i < len(lines); i++ {
		if !isJSONFence(lines[i]) {
			continue
		}
		if open >= 0 {
			return 0, 0, fmt.Errorf("the answer has more than one ```json block; give exactly one")
		}
		open = i
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		if i == len(lines) {
			return 0, 0, fmt.Errorf("the ```json block is not closed with a line of ```")
		}
		end = i
	}
	if open < 0 {
		return 0, 0, fmt.Errorf("the answer has no ```json block after the notes")
	}
	return open, end, nil
}

// isJSONFence reports whether line opens a ```json block.
func isJSONFence(line string) bool {
	return strings.EqualFold(strings.ReplaceAll(strings.TrimSpace(line), " ", ""), "```json")
}

// decodeRunAnswer reads and checks the body of the ```json block. judge
// names the criteria it must report.
func decodeRunAnswer(body string, judge []string) (*runAnswer, error) {
	body = strings.TrimSpace(body)
	if !strings.HasPrefix(body, "{") {
		return nil, fmt.Errorf("the ```json block does not hold a JSON object")
	}
	var w runAnswerJSON
	if err := strictjson.Decode([]byte(body), &w); errors.Is(err, strictjson.ErrTrailingData) {
		return nil, fmt.Errorf("the ```json block holds more than one JSON value")
	} else if err != nil {
		return nil, fmt.Errorf("the ```json block is not the object asked for: %w", err)
	}

	ra := &runAnswer{guidance: strings.TrimSpace(w.NextRoundGuidance)}
	seen := make(map[string]bool, len(w.Criteria))
	for i, c := range w.Criteria {
		id := strings.TrimSpace(c.ID)
		switch {
		case id == "":
			return nil, fmt.Errorf("criteria[%d] has no id", i)
		case !slices.Contains(judge, id):
			return nil, fmt.Errorf("criteria[%d]: %q is not a criterion you were asked to judge (%s)", i, clip(id, 120), idList(judge))
		case seen[id]:
			return nil, fmt.Errorf("criteria[%d]: %q is reported twice", i, id)
		case c.Pass == nil:
			return nil, fmt.Errorf("criteria[%d] (%s) has no \"pass\": true or false", i, id)
		case c.Confidence != nil && !(*c.Confidence >= 0 && *c.Confidence <= 1):
			return nil, fmt.Errorf("criteria[%d] (%s) has confidence %v; give a number from 0 to 1", i, id, *c.Confidence)
		}
		seen[id] = true
		ev := gated.CriterionEval{ID: id, Pass: *c.Pass, Reason: strings.TrimSpace(c.Reason), Refs: c.Refs}
		if c.Confidence != nil {
			ev.Confidence = *c.Confidence
		}
		ra.criteria = append(ra.criteria, ev)
	}
	for _, id := range judge {
		if !seen[id] {
			return nil, fmt.Errorf("criteria has no entry for %q; report every criterion you were asked to judge (%s)", id, idList(judge))
		}
	}
	for i, c := range w.Comments {
		cm := gated.Comment{Path: strings.TrimSpace(c.Path), Line: c.Line, Body: strings.TrimSpace(c.Body)}
		switch {
		case cm.Path == "":
			return nil, fmt.Errorf("comments[%d] has no path", i)
		case cm.Body == "":
			return nil, fmt.Errorf("comments[%d] has no body", i)
		case cm.Line != nil && (*cm.Line < 1 || *cm.Line > maxCommentLine):
			return nil, fmt.Errorf("comments[%d] has line %d; give a line number from 1, or null for the whole file", i, *cm.Line)
		}
		ra.comments = append(ra.comments, cm)
	}
	var err error
	if ra.missingWork, err = items("missing_work", w.MissingWork); err != nil {
		return nil, err
	}
	if ra.warnings, err = items("warnings", w.Warnings); err != nil {
		return nil, err
	}
	return ra, nil
}

// items returns a list's items trimmed; a blank item is an error.
func items(name string, list []string) ([]string, error) {
	var out []string
	for i, s := range list {
		if s = strings.TrimSpace(s); s == "" {
			return nil, fmt.Errorf("%s[%d] is blank", name, i)
		}
		out = append(out, s)
	}
	return out, nil
}

// idList quotes ids for a message, or says there are none.
func idList(ids []string) string {
	if len(ids) == 0 {
		return "none: criteria must be []"
	}
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = jsonString(id)
	}
	return strings.Join(q, ", ")
}
