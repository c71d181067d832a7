package reviewtext

import (
	"strings"
	"unicode"
)

// MaxSelfReportedBytes bounds what a verdict, the grant it carries and the
// review's audit record keep of a value a reviewer reports about itself:
// its version and its model. A version or a model id fits with room to
// spare; a grant naming a quorum of reviewers stays well under what an
// executor verifies (grant.MaxTokenLen).
const MaxSelfReportedBytes = 128

// SelfReported is s, a value a reviewer reports about itself, as gated
// keeps it: the first line of s (up to a CR, LF, VT, FF, NEL, or a Unicode
// line or paragraph separator), without white space at either end, every
// character other than printable ASCII replaced by '?', and, when longer
// than MaxSelfReportedBytes, cut to that with "..." at the end. A
// reviewer's name, version and model are never more than one short line
// in anything a tenant reads: not a second line that reads as a decision,
// not a terminal's escape sequence, not kilobytes.
func SelfReported(s string) string {
	if i := strings.IndexFunc(s, lineBreak); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimFunc(s, unicode.IsSpace)
	var b strings.Builder
	for _, c := range s {
		if b.Len() > MaxSelfReportedBytes {
			break
		}
		if c < ' ' || c > '~' {
			c = '?'
		}
		b.WriteByte(byte(c))
	}
	out := b.String()
	if len(out) > MaxSelfReportedBytes {
		const mark = "..."
		out = out[:MaxSelfReportedBytes-len(mark)] + mark
	}
	return out
}

// lineBreak tells whether c ends a line for some reader of a verdict.
func lineBreak(c rune) bool {
	switch c {
	case '\n', '\r', '\v', '\f', '\u0085', '\u2028', '\u2029':
		return true
	}
	return false
}
