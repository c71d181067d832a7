package digest

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestValidSHA256(t *testing.T) {
	good := SHA256([]byte("gated"))
	cases := []struct {
		note string
		s    string
		want bool
	}{
		{"a digest SHA256 writes", good, true},
		{"all zeros", strings.Repeat("0", 64), true},
		{"upper case", strings.ToUpper(good), false},
		{"one digit short", good[:63], false},
		{"one digit long", good + "0", false},
		{"empty", "", false},
		{"not hex", strings.Repeat("g", 64), false},
		{"hex prefix", "0x" + good[:62], false},
		{"white space", " " + good[1:], false},
		{"multi-byte character in 64 bytes", "é" + good[2:], false},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			if got := ValidSHA256(tc.s); got != tc.want {
				t.Errorf("ValidSHA256(%q) = %v, want %v", tc.s, got, tc.want)
			}
		})
	}
}

// FuzzValidSHA256 checks ValidSHA256 against its definition: what hex
// decodes to 32 bytes and encodes back to the same text.
func FuzzValidSHA256(f *testing.F) {
	f.Add(SHA256(nil))
	f.Add(strings.ToUpper(SHA256(nil)))
	f.Add(strings.Repeat("z", 64))
	f.Fuzz(func(t *testing.T, s string) {
		b, err := hex.DecodeString(s)
		want := err == nil && len(b) == 32 && hex.EncodeToString(b) == s
		if got := ValidSHA256(s); got != want {
			t.Fatalf("ValidSHA256(%q) = %v, want %v", s, got, want)
		}
	})
}
