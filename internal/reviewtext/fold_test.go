package reviewtext

import (
	"strings"
	"testing"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// foldReference is fold as first written: the whole text normalised to
// NFD, then read rune by rune. fold must read every text as it does.
func foldReference(s string, keepUnderscore bool) string {
	rs := []rune(norm.NFD.String(s))
	var b strings.Builder
	for i, r := range rs {
		r = lookalike(r)
		switch {
		case unicode.In(r, unicode.M, unicode.Cf):
			continue
		case unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(unicode.ToLower(r))
		case separator(r):
			b.WriteByte(':')
		case r == '-' && i > 0 && i+1 < len(rs) && isBlank(rs[i-1]) && isBlank(rs[i+1]):
			b.WriteByte(':')
		case r == '-' && i+1 < len(rs) && rs[i+1] == '>':
			b.WriteByte(':')
		case r == '_' && keepUnderscore:
			b.WriteByte('_')
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

var foldSeeds = []string{
	"Decision: approve",
	"DECISION — Approve",
	"Decision - reject",
	"sop_covers -> fail",
	"- no_parallel_operation: pass — nothing else is under way",
	"Ｄｅｃｉｓｉｏｎ：ａｐｐｒｏｖｅ",
	"Dеcision: аpprove", // Cyrillic e and a
	"De\u0301cision\u200b: approve",
	"Décision : approuvé",
	"a\u00a0-\u00a0b",
	"\xff\xfeDecision:\x80approve",
	"-",
	"- ",
	" -",
	"->",
	"x-\u0301 y",
	"𝐃𝐞𝐜𝐢𝐬𝐢𝐨𝐧: 𝐚𝐩𝐩𝐫𝐨𝐯𝐞",
	"ǅ ǈ ǋ ǲ Ⅻ ① ½",
	"e\u0301\u0327-\u0301>",
}

func TestFoldReadsAsTheReference(t *testing.T) {
	for _, s := range foldSeeds {
		for _, keep := range []bool{false, true} {
			if got, want := fold(s, keep), foldReference(s, keep); got != want {
				t.Errorf("fold(%q, %v) = %q, want %q", s, keep, got, want)
			}
		}
	}
}

// FuzzFold holds fold to the reference reading on any text.
func FuzzFold(f *testing.F) {
	for _, s := range foldSeeds {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, keep bool) {
		if got, want := fold(s, keep), foldReference(s, keep); got != want {
			t.Fatalf("fold(%q, %v) = %q, want %q", s, keep, got, want)
		}
	})
}

// scriptedReview is an approving answer in the form the built-in
// reviewer's persona asks for, with the typography models use.
const scriptedReview = "Decision: approve\n" +
	"Gates:\n" +
	"- sop_covers: pass — SOP-001 covers restarting a web service\n" +
	"- no_parallel_operation: pass — nothing else is under way on the device\n" +
	"- rollback_known: pass — a restart is undone by the previous unit state\n" +
	"Notes: the service stopped answering after a config reload; restarting it is what SOP-001 says to do first."

func BenchmarkFold(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		fold(scriptedReview, false)
	}
}
