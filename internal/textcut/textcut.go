// Package textcut cuts text to a number of bytes without splitting a
// character, for the bounds gated keeps on what it records and answers.
package textcut

import "unicode/utf8"

// Clip cuts s to at most n bytes on a rune boundary, marking the cut
// with an ellipsis.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	if n <= len(mark) {
		return ""
	}
	s = s[:n-len(mark)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + mark
}

// Cut cuts s to at most n bytes without splitting a character, and
// marks nothing.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
