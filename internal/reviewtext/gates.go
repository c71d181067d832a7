package reviewtext

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// GatePasses is gated.GatePasses: it reports whether value, the part of
// a gate line after the gate's name and colon, is an exact pass, and
// returns the detail after it.
func GatePasses(value string) (string, bool) {
	v := strings.Trim(value, " \t")
	for _, w := range []string{"**", "__", "*", "_", "`", ""} {
		rest, ok := strings.CutPrefix(v, w)
		if !ok {
			continue
		}
		for _, tok := range []string{"passed", "pass"} {
			if len(rest) < len(tok) || !equalFoldASCII(rest[:len(tok)], tok) {
				continue
			}
			after, ok := strings.CutPrefix(rest[len(tok):], w)
			if !ok {
				continue
			}
			if detail, ok := afterPass(after); ok {
				return detail, true
			}
		}
	}
	return "", false
}

// afterPass reads what follows a pass token: nothing, or a clear
// separator and the detail.
func afterPass(s string) (string, bool) {
	t := strings.TrimLeft(s, " \t")
	if t == "" {
		return "", true
	}
	blank := len(t) < len(s)
	for _, sep := range []string{":", "—", "–"} {
		if d, ok := strings.CutPrefix(t, sep); ok {
			return strings.Trim(d, " \t"), true
		}
	}
	if !blank {
		return "", false
	}
	if d, ok := strings.CutPrefix(t, "-"); ok {
		return strings.Trim(d, " \t"), true
	}
	if d, ok := strings.CutPrefix(t, "("); ok {
		d = strings.Trim(d, " \t")
		return strings.TrimSpace(strings.TrimSuffix(d, ")")), true
	}
	return "", false
}

// Gate is a structured gate as a reviewer reported it.
type Gate struct {
	Name   string
	Passed bool
}

// CheckGateLines is gated.CheckGateLines: an error when what the gate
// lines of a reviewer's text say disagrees with the structured gates.
func CheckGateLines(text string, gates []Gate) error {
	reported := make(map[string]bool, len(gates))
	names := make(map[string]string, len(gates))
	for _, g := range gates {
		key := foldName(g.Name)
		if key == "" {
			continue
		}
		prev, seen := reported[key]
		reported[key] = g.Passed && (!seen || prev)
		if !seen {
			names[key] = g.Name
		}
	}
	if len(text) > MaxTextBytes {
		return fmt.Errorf("reviewer text is %d bytes, over the %d byte limit", len(text), MaxTextBytes)
	}
	if len(reported) == 0 {
		return nil
	}
	type reading struct {
		passed bool
		line   int
		text   string // the first line that made the reading what it is
	}
	read := map[string]*reading{}
	var order []string
	note := func(key string, pass bool, i int, line string) {
		r := read[key]
		switch {
		case r == nil:
			read[key] = &reading{passed: pass, line: i + 1, text: strings.Trim(line, " \t")}
			order = append(order, key)
		case r.passed && !pass:
			*r = reading{passed: false, line: i + 1, text: strings.Trim(line, " \t")}
		}
	}
	for i, line := range splitLines(text) {
		if name, value, ok := gateLine(line); ok {
			if key := foldName(name); hasKey(reported, key) {
				_, pass := GatePasses(value)
				note(key, pass, i, line)
				continue
			}
		}
		// Any other line that names a gate and says it failed ("sop_covers
		// = fail", "Gate sop_covers: fail", "sop_covers did not pass")
		// reads as a failed gate; one that says gates failed, naming none,
		// as every gate failed.
		for _, key := range failedGates(line, gates) {
			note(key, false, i, line)
		}
	}
	for _, key := range order {
		r := read[key]
		if r.passed == reported[key] {
			continue
		}
		if r.passed {
			return fmt.Errorf("line %d %q reports gate %q as passed, but the structured gates do not", r.line, clip(r.text), names[key])
		}
		return fmt.Errorf("line %d %q does not report gate %q as an exact pass, but the structured gates report it passed", r.line, clip(r.text), names[key])
	}
	return nil
}

func hasKey(m map[string]bool, key string) bool {
	_, ok := m[key]
	return ok
}

// failures are the phrases that say a gate failed, in the form of
// retractions.
var failures = [][]string{
	{"fail"}, {"failed"}, {"fails"}, {"failing"}, {"failure"}, {"unmet"}, {"not", "met"},
	{"not", "pass*"}, {"did", "not", "pass*"}, {"didn", "t", "pass*"}, {"didnt", "pass*"},
}

// failedGates returns the keys (foldName) of the gates that line, not a
// gate line of theirs, says failed: the gates it names, when the words
// around their names say failed, or every gate, when it names none but
// says gates failed.
func failedGates(line string, gates []Gate) []string {
	words := fieldWords(foldText(line))
	if len(words) == 0 {
		return nil
	}
	rest := slices.Clone(words) // the words that are not a gate's name
	var named []string
	for _, g := range gates {
		key := foldName(g.Name)
		if key == "" || slices.Contains(named, key) {
			continue
		}
		name := strings.Split(key, "_")
		for i := 0; i+len(name) <= len(words); i++ {
			if slices.Equal(words[i:i+len(name)], name) {
				named = append(named, key)
				for j := i; j < i+len(name); j++ {
					rest[j] = ""
				}
			}
		}
	}
	if findPhrase(rest, failures) == "" {
		return nil
	}
	if len(named) > 0 {
		return named
	}
	if !slices.Contains(words, "gate") && !slices.Contains(words, "gates") {
		return nil
	}
	var all []string
	for _, g := range gates {
		if key := foldName(g.Name); key != "" && !slices.Contains(all, key) {
			all = append(all, key)
		}
	}
	return all
}

// gateLine splits a line that may report a gate into the gate's name and
// the value after it.
func gateLine(line string) (name, value string, ok bool) {
	s := strings.TrimLeft(line, " \t")
	table := false
	for {
		switch {
		case strings.HasPrefix(s, ">"):
			s = s[1:]
		case strings.HasPrefix(s, "|"):
			s, table = s[1:], true
		default:
			if rest, ok := cutBullet(s); ok {
				s = rest
				break
			}
			goto marked
		}
		s = strings.TrimLeft(s, " \t")
	}
marked:
	i := strings.IndexFunc(s, func(r rune) bool {
		return r == '|' || r == '\u2014' || r == '\u2013' || colon(lookalike(r))
	})
	if i < 0 {
		return "", "", false
	}
	_, size := utf8.DecodeRuneInString(s[i:])
	name, value = s[:i], strings.Trim(s[i+size:], " \t")
	if table {
		value = strings.Trim(strings.TrimSuffix(value, "|"), " \t")
	}
	return name, value, true
}

// cutBullet removes a list bullet ("- ", "* ", "+ ", "• ", "1. ", "2) ")
// from the start of s.
func cutBullet(s string) (string, bool) {
	for _, b := range []string{"-", "*", "+", "•", "–", "—"} {
		if rest, ok := strings.CutPrefix(s, b); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			return rest, true
		}
	}
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n > 0 && n+1 < len(s) && (s[n] == '.' || s[n] == ')') && (s[n+1] == ' ' || s[n+1] == '\t') {
		return s[n+1:], true
	}
	return "", false
}

// foldName is a gate name as CheckGateLines compares it: foldText, with
// every run of other characters one "_", trimmed of "_".
func foldName(name string) string {
	words := strings.FieldsFunc(foldText(name), func(r rune) bool { return r == ' ' || r == ':' })
	return strings.Join(words, "_")
}
