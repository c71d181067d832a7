// Package jsonw writes pieces of JSON exactly as encoding/json writes
// them, for encoders that build a document by hand and must give the
// same bytes (records whose hash or rebuild depends on them), and splices
// a number into a document encoding/json wrote (SetTopLevelUint).
package jsonw

import "encoding/json"

// AppendString appends s as a JSON string. Strings of printable ASCII
// that need no escape, such as tokens and ids, are copied; any other goes
// through encoding/json, so that escapes stay exactly its own (the HTML
// characters and U+2028 and U+2029 included).
func AppendString(dst []byte, s string) []byte {
	if !Plain(s) {
		b, _ := json.Marshal(s) // a string always encodes
		return append(dst, b...)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// Plain reports whether s is printable ASCII that needs no escape: a
// JSON string of s is s between quotes.
func Plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
