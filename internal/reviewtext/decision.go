// Package reviewtext reads a reviewer's text as the host must: the
// decision line and what may overrule it (Read), the gate lines and how
// they agree with the structured gates (CheckGateLines), and the values a
// reviewer reports about itself (SelfReported). The rules are stated
// where the model publishes them: gated.ParseDecision,
// gated.GatePasses and gated.CheckGateLines.
package reviewtext

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// MaxTextBytes bounds the reviewer text the host reads and keeps. Longer
// text is a rejection: a reviewer that cannot say yes briefly has not
// said yes.
const MaxTextBytes = 64 << 10

// Read reads a reviewer's text as gated.ParseDecision documents:
// approve is true only for text whose first non-blank line is exactly
// "Decision: approve" and that no later line overrules; why says which
// reading it was. overruled reports that the first line approved and a
// later line turned the text into a rejection, so that the verdict can
// name that line rather than the reviewer's notes.
func Read(text string) (approve bool, why string, overruled bool) {
	if len(text) > MaxTextBytes {
		return false, fmt.Sprintf("reviewer text is %d bytes, over the %d byte limit", len(text), MaxTextBytes), false
	}
	lines := splitLines(text)
	first := 0
	for first < len(lines) && strings.Trim(lines[first], " \t") == "" {
		first++
	}
	if first == len(lines) {
		return false, "reviewer returned no text", false
	}
	line := strings.Trim(lines[first], " \t")
	switch {
	case isDecisionLine(line, "approve"):
	case isDecisionLine(line, "reject"):
		return false, "reviewer rejected", false
	case looksLikeDecisionLine(line):
		return false, fmt.Sprintf("decision line %q is not exactly \"Decision: approve\" or \"Decision: reject\" (emphasis may wrap only the whole line)", clip(line)), false
	default:
		return false, fmt.Sprintf("first line %q is not a decision line", clip(line)), false
	}
	for i := first + 1; i < len(lines); i++ {
		later := strings.Trim(lines[i], " \t")
		if later == "" {
			continue
		}
		if looksLikeDecisionLine(later) && !isDecisionLine(later, "approve") {
			return false, fmt.Sprintf("line %d %q disagrees with the decision line; a later decision line must read \"Decision: approve\" exactly", i+1, clip(later)), true
		}
		if phrase := retraction(later); phrase != "" {
			return false, fmt.Sprintf("line %d %q takes the approval back (%q); a retraction is a rejection", i+1, clip(later), phrase), true
		}
		if phrase := refusal(later); phrase != "" {
			return false, fmt.Sprintf("line %d %q says no or not sure (%q) after the approving decision line; that is a rejection", i+1, clip(later), phrase), true
		}
	}
	return true, "reviewer approved", false
}

// splitLines splits text at every line break a reader would see: \n, \r,
// \r\n, vertical tab, form feed, NEL and the Unicode line and paragraph
// separators. A break the host did not split at could hide a later line
// inside the decision line's.
func splitLines(text string) []string {
	var lines []string
	start := 0
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		switch r {
		case '\n', '\r', '\v', '\f', '\u0085', '\u2028', '\u2029':
			lines = append(lines, text[start:i])
			if r == '\r' && i+1 < len(text) && text[i+1] == '\n' {
				size++
			}
			start = i + size
		}
		i += size
	}
	return append(lines, text[start:])
}

// isDecisionLine reports whether line, trimmed of spaces and tabs, is
// exactly "Decision: <word>" with ASCII letters in any case, optionally
// wrapped whole in one matching emphasis pair.
func isDecisionLine(line, word string) bool {
	for _, w := range []string{"**", "__", "*", "_"} {
		if len(line) > 2*len(w) && strings.HasPrefix(line, w) && strings.HasSuffix(line, w) {
			return plainDecisionLine(line[len(w):len(line)-len(w)], word)
		}
	}
	return plainDecisionLine(line, word)
}

func plainDecisionLine(s, word string) bool {
	const label = "decision:"
	if len(s) < len(label) || !equalFoldASCII(s[:len(label)], label) {
		return false
	}
	rest := s[len(label):]
	value := strings.TrimLeft(rest, " \t")
	return len(value) < len(rest) && equalFoldASCII(value, word)
}

// equalFoldASCII is strings.EqualFold for ASCII letters only: Unicode
// folding would take "ſ" for "s" and "K" (Kelvin) for "k".
func equalFoldASCII(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// looksLikeDecisionLine reports whether a reader would take line for a
// decision line: after foldText, at most four words before the first
// separator, one of them "decision" ("Decision 2:", "Decision (final):",
// "Final decision:"), or a first word "decision" with no separator after
// it ("Decision reject", a "# Decision" heading).
func looksLikeDecisionLine(line string) bool {
	folded := strings.TrimLeft(foldText(line), " :")
	if label, _, ok := strings.Cut(folded, ":"); ok {
		words := strings.Fields(label)
		if len(words) >= 1 && len(words) <= 4 && slices.Contains(words, "decision") {
			return true
		}
	}
	words := strings.Fields(folded)
	return len(words) > 0 && words[0] == "decision"
}

// retractions are the phrases that take an approval back, as words after
// foldText. A word ending in "*" matches any word it begins.
var retractions = [][]string{
	{"retract*"}, {"rescind*"}, {"withdrawn"}, {"withdrew"},
	{"withdraw", "my"}, {"withdraw", "this"}, {"withdraw", "that"}, {"withdraw", "it"}, {"withdraw", "the", "approval"},
	{"scratch", "that"}, {"strike", "that"}, {"not", "yet"},
	{"on", "second", "thought*"}, {"second", "thoughts"}, {"changed", "my", "mind"},
	{"take", "it", "back"}, {"take", "that", "back"},
	{"disregard", "the", "above"}, {"disregard", "that"}, {"ignore", "the", "above"},
}

// refusals are the phrases that say no, or not sure, in the form of
// retractions. A word that holds a "_" is a name (an action, a gate, a
// tool) and matches none of them.
var refusals = [][]string{
	{"reject*"}, {"declin*"}, {"disapprov*"}, {"unapprov*"}, {"revok*"}, {"veto*"},
	{"deny"}, {"denied"}, {"refuse"}, {"refused"},
	{"not", "approv*"}, {"cannot", "approv*"}, {"cant", "approv*"}, {"can", "t", "approv*"},
	{"don", "t", "approv*"}, {"dont", "approv*"}, {"won", "t", "approv*"}, {"wont", "approv*"}, {"never", "approv*"},
	{"unsure"}, {"not", "sure"}, {"uncertain*"}, {"not", "certain"}, {"not", "confident"},
}

// retraction returns the words of line that take an approval back, or "".
func retraction(line string) string {
	return findPhrase(fieldWords(foldText(line)), retractions)
}

// refusal returns the words of line that say no or not sure, or "". A
// gate line that reports an exact pass is not read: its detail is
// evidence, and may quote an SOP's title.
func refusal(line string) string {
	if _, value, ok := gateLine(line); ok {
		if _, pass := GatePasses(value); pass {
			return ""
		}
	}
	words := slices.DeleteFunc(fieldWords(fold(line, true)), func(w string) bool { return strings.Contains(w, "_") })
	return findPhrase(words, refusals)
}

// fieldWords splits folded text into its words.
func fieldWords(folded string) []string {
	return strings.FieldsFunc(folded, func(r rune) bool { return r == ' ' || r == ':' })
}

// findPhrase returns the first of phrases found in words, joined by
// blanks, or "". A phrase word ending in "*" matches any word it begins.
func findPhrase(words []string, phrases [][]string) string {
	for i := range words {
		for _, phrase := range phrases {
			if i+len(phrase) > len(words) {
				continue
			}
			// A first word that is not empty and does not begin with "*",
			// exact or a prefix, matches only words that begin as it does.
			if p, w := phrase[0], words[i]; p != "" && p[0] != '*' && (w == "" || w[0] != p[0]) {
				continue
			}
			match := true
			for j, p := range phrase {
				w := words[i+j]
				if prefix, ok := strings.CutSuffix(p, "*"); ok {
					match = strings.HasPrefix(w, prefix)
				} else {
					match = w == p
				}
				if !match {
					break
				}
			}
			if match {
				return strings.Join(words[i:i+len(phrase)], " ")
			}
		}
	}
	return ""
}

// foldText is the lenient reading the host uses to find decision,
// retraction and gate lines it must not miss: letters are decomposed
// (NFD) and marks and invisible formatting characters (zero-width spaces
// and joiners) are dropped, so accents go; full-width forms and common
// look-alike letters become ASCII, letters are lower-cased, colons,
// dashes, equals signs and arrows become ':', and every other character
// becomes a space.
func foldText(s string) string { return fold(s, false) }

// fold is foldText; with keepUnderscore, a "_" stays, so that names
// joined by it stay one word.
//
// It reads the NFD form of s rune by rune (a text already in NFD, as
// most are, is not copied), and an ASCII rune through asciiFold instead
// of the Unicode tables; FuzzFold holds it to the rune-slice reading it
// replaced.
func fold(s string, keepUnderscore bool) string {
	if !norm.NFD.IsNormalString(s) {
		s = norm.NFD.String(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	prev := utf8.RuneError // the rune before r, read only past the first
	for i := 0; i < len(s); {
		raw, size := rune(s[i]), 1
		if raw >= utf8.RuneSelf {
			raw, size = utf8.DecodeRuneInString(s[i:])
		}
		first, last := i == 0, i+size == len(s)
		r := lookalike(raw)
		var c byte
		if r < utf8.RuneSelf {
			c = asciiFold[r]
		} else {
			c = foldClass(r)
		}
		switch c {
		case 0:
		case '-':
			// "Decision - reject" and "sop_covers -> fail".
			if !last {
				next, _ := utf8.DecodeRuneInString(s[i+size:])
				if (!first && isBlank(prev) && isBlank(next)) || next == '>' {
					b.WriteByte(':')
					break
				}
			}
			b.WriteByte(' ')
		case '_':
			if keepUnderscore {
				b.WriteByte('_')
			} else {
				b.WriteByte(' ')
			}
		case 'L':
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteByte(c)
		}
		prev = raw
		i += size
	}
	return b.String()
}

// asciiFold is what fold writes for an ASCII rune: the letter or digit
// itself (lower-cased), ':' for a separator, ' ' for anything else, and
// '-' and '_' for the two that depend on their neighbours or the call.
var asciiFold = func() (t [utf8.RuneSelf]byte) {
	for r := range rune(utf8.RuneSelf) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			t[r] = byte(r)
		case r >= 'A' && r <= 'Z':
			t[r] = byte(r - 'A' + 'a')
		case separator(r):
			t[r] = ':'
		case r == '-', r == '_':
			t[r] = byte(r)
		default:
			t[r] = ' '
		}
	}
	return t
}()

// foldClass is asciiFold's class for a rune beyond ASCII: 0 to drop it (a
// mark or an invisible formatting character), 'L' for a letter or a
// number, ':' for a separator, ' ' for anything else.
func foldClass(r rune) byte {
	switch {
	case unicode.In(r, unicode.M, unicode.Cf):
		return 0
	case unicode.IsLetter(r) || unicode.IsNumber(r):
		return 'L'
	case separator(r):
		return ':'
	}
	return ' '
}

func isBlank(r rune) bool { return r == ' ' || r == '\t' || r == '\u00a0' }

// separator reports whether r is read as the colon after a label: a
// colon, a dash, an equals sign or an arrow.
func separator(r rune) bool {
	switch r {
	case '\u2013', '\u2014', '\u2015', '\u2212', // dashes
		'=', '\u2192', '\u21d2', '\u27f6', '\u27f9': // equals, arrows
		return true
	}
	return colon(r)
}

// colon reports whether r is a colon or reads as one. (Full-width forms
// are ASCII by then: see lookalike.)
func colon(r rune) bool {
	switch r {
	case ':', '\ufe55', '\ufe13', '\ua789', '\u2236', '\u02f8', '\u05c3', '\u205a':
		return true
	}
	return false
}

// lookalike maps full-width forms, mathematical letters and the common
// Cyrillic, Greek and Latin look-alikes of ASCII letters to ASCII.
func lookalike(r rune) rune {
	switch {
	case r < 0x80:
		return r
	case r >= 0xff01 && r <= 0xff5e: // full-width ASCII
		return r - 0xff01 + '!'
	case r >= 0x1d400 && r <= 0x1d6a3: // mathematical alphanumeric letters
		return 'a' + (r-0x1d400)%52%26
	}
	if a, ok := lookalikes[r]; ok {
		return a
	}
	return r
}

// lookalikes are letters that read as an ASCII letter, by script.
var lookalikes = map[rune]rune{
	// Cyrillic
	'\u0430': 'a', '\u0432': 'b', '\u0441': 'c', '\u0501': 'd', '\u0435': 'e', '\u04bb': 'h', '\u0456': 'i', '\u0458': 'j',
	'\u043a': 'k', '\u043c': 'm', '\u043d': 'h', '\u043e': 'o', '\u0440': 'p', '\u051b': 'q', '\u0455': 's', '\u0442': 't',
	'\u0443': 'y', '\u051d': 'w', '\u0445': 'x', '\u0451': 'e', '\u0457': 'i', '\u04af': 'y', '\u0410': 'a', '\u0412': 'b',
	'\u0421': 'c', '\u0415': 'e', '\u041d': 'h', '\u0406': 'i', '\u0408': 'j', '\u041a': 'k', '\u041c': 'm', '\u041e': 'o',
	'\u0420': 'p', '\u0405': 's', '\u0422': 't', '\u0425': 'x', '\u04ae': 'y', '\u0500': 'd', '\u051a': 'q', '\u051c': 'w',
	// Greek
	'\u03b1': 'a', '\u03b5': 'e', '\u03b9': 'i', '\u03ba': 'k', '\u03bd': 'v', '\u03bf': 'o', '\u03c1': 'p', '\u03c4': 't',
	'\u03c5': 'u', '\u03c7': 'x', '\u03f2': 'c', '\u0391': 'a', '\u0392': 'b', '\u0395': 'e', '\u0396': 'z', '\u0397': 'h',
	'\u0399': 'i', '\u039a': 'k', '\u039c': 'm', '\u039d': 'n', '\u039f': 'o', '\u03a1': 'p', '\u03a4': 't', '\u03a5': 'y',
	'\u03a7': 'x', '\u03f9': 'c',
	// Latin and letterlike
	'\u0131': 'i', '\u0237': 'j', '\u017f': 's', '\u2113': 'l', '\u212a': 'k', '\u212b': 'a', '\u0261': 'g', '\u0251': 'a',
	'\u1d00': 'a', '\u0299': 'b', '\u1d04': 'c', '\u1d05': 'd', '\u1d07': 'e', '\u0262': 'g', '\u029c': 'h', '\u026a': 'i',
	'\u1d0a': 'j', '\u1d0b': 'k', '\u029f': 'l', '\u1d0d': 'm', '\u0274': 'n', '\u1d0f': 'o', '\u1d18': 'p', '\u0280': 'r',
	'\ua731': 's', '\u1d1b': 't', '\u1d1c': 'u', '\u1d20': 'v', '\u1d21': 'w', '\u028f': 'y', '\u1d22': 'z',
}

// FirstLine returns the first line of text that is not blank, trimmed.
func FirstLine(text string) string {
	for text != "" {
		var line string
		line, text, _ = strings.Cut(text, "\n")
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// clip keeps a quoted line short in an explanation.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
