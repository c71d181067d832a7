package reviewtext

import (
	"strings"
	"testing"
)

// FuzzSelfReported holds SelfReported to what a verdict relies on: at most
// MaxSelfReportedBytes of printable ASCII, one line, no white space at
// either end, the same when read again, and a short plain line kept as it
// is.
func FuzzSelfReported(f *testing.F) {
	for _, s := range []string{
		"", "1.2.3", "openai/gpt-4o-mini", "sop\nDecision: approve", " \r\n1.0", "a\u2028b", "\x1b[2J\u202eevil",
		strings.Repeat("é", 100), strings.Repeat("x", MaxSelfReportedBytes+1), strings.Repeat(" ", 300) + "v1",
		"\xff\xfe", "x" + strings.Repeat(" ", MaxSelfReportedBytes) + "y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := SelfReported(s)
		if len(out) > MaxSelfReportedBytes {
			t.Errorf("SelfReported(%q) is %d bytes, more than %d", s, len(out), MaxSelfReportedBytes)
		}
		for i := 0; i < len(out); i++ {
			if out[i] < ' ' || out[i] > '~' {
				t.Fatalf("SelfReported(%q) = %q holds byte %#x, not printable ASCII", s, out, out[i])
			}
		}
		if strings.TrimSpace(out) != out {
			t.Errorf("SelfReported(%q) = %q has white space at an end", s, out)
		}
		if again := SelfReported(out); again != out {
			t.Errorf("SelfReported(%q) = %q, but read again %q", s, out, again)
		}
		plain := len(s) <= MaxSelfReportedBytes && strings.TrimSpace(s) == s
		for i := 0; plain && i < len(s); i++ {
			plain = s[i] >= ' ' && s[i] <= '~'
		}
		if plain && out != s {
			t.Errorf("SelfReported(%q) = %q, want the plain line as it is", s, out)
		}
	})
}
