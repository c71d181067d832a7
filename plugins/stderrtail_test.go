package plugins

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStderrTail(t *testing.T) {
	long := strings.Repeat("é", stderrLineBytes)
	tests := []struct {
		note   string
		writes []string
		want   []string
	}{
		{note: "nothing", want: nil},
		{note: "lines as go-plugin writes them", writes: []string{"Traceback", "\n", "ModuleNotFoundError: x", "\n"},
			want: []string{"Traceback", "ModuleNotFoundError: x"}},
		{note: "a line not yet ended", writes: []string{"a\nb"}, want: []string{"a", "b"}},
		{note: "blank lines at either end", writes: []string{"\n\r\n  \nkept\n\nkept too\n\n"}, want: []string{"kept", "", "kept too"}},
		{note: "carriage returns", writes: []string{"dos\r\n"}, want: []string{"dos"}},
		{note: "the last lines only", writes: []string{strings.Repeat("old\n", 20) + "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"},
			want: []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"}},
		{note: "a long line cut on a character", writes: []string{long + "\n"}, want: []string{long[:stderrLineBytes-4] + "…"}},
		{note: "invalid UTF-8", writes: []string{"a\xffb\n"}, want: []string{"a\uFFFDb"}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			var tail stderrTail
			for _, w := range tc.writes {
				if n, err := tail.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if got := tail.last(); !slices.Equal(got, tc.want) {
				t.Errorf("last() = %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzStderrTail writes arbitrary output to a tail in two pieces cut
// anywhere and in one piece: the lines kept must not depend on how the
// output was written, must be at most stderrLines, each valid UTF-8 of at
// most stderrLineBytes without a line break, and the last line kept must
// be the output's own last non-blank line, cut.
func FuzzStderrTail(f *testing.F) {
	f.Add([]byte("Traceback (most recent call last):\n  File \"x\", line 2\nModuleNotFoundError: No module named 'gated'\n"), uint16(9))
	f.Add([]byte(strings.Repeat("é", 600)+"\r\n\xff\n"), uint16(511))
	f.Add([]byte(strings.Repeat("line\n", 30)), uint16(0))
	f.Fuzz(func(t *testing.T, out []byte, at uint16) {
		cut := int(at) % (len(out) + 1)
		var whole, pieces stderrTail
		_, _ = whole.Write(out)
		_, _ = pieces.Write(out[:cut])
		_, _ = pieces.Write(out[cut:])
		got := whole.last()
		if p := pieces.last(); !slices.Equal(got, p) {
			t.Fatalf("written whole: %q\nin two pieces at %d: %q", got, cut, p)
		}
		if len(got) > stderrLines {
			t.Fatalf("%d lines kept, at most %d", len(got), stderrLines)
		}
		for _, l := range got {
			if len(l) > stderrLineBytes || !utf8.ValidString(l) || strings.ContainsAny(l, "\n") {
				t.Fatalf("line %q: over %d bytes, invalid UTF-8 or holds a line break", l, stderrLineBytes)
			}
		}
		var lastLine []byte
		for _, l := range bytes.Split(out, []byte{'\n'}) {
			// The tail reads a line's first stderrLineBytes+1 bytes.
			if len(bytes.TrimSpace(l[:min(len(l), stderrLineBytes+1)])) > 0 {
				lastLine = l
			}
		}
		if lastLine == nil {
			if len(got) != 0 {
				t.Fatalf("only blank output, kept %q", got)
			}
			return
		}
		if len(got) == 0 {
			t.Fatalf("output ending with %q, nothing kept", lastLine)
		}
		want := string(bytes.TrimRight(lastLine, "\r"))
		if g := got[len(got)-1]; len(want) <= stderrLineBytes && utf8.ValidString(want) && g != want {
			t.Fatalf("last line kept %q, want %q", g, want)
		}
	})
}
