package store

import (
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/digest"
)

// TestCheckVerdictDigest checks that a stored verdict's proposal_sha256 is
// held to the spelling gated writes and operators must sign: 64 lower-case
// hex digits.
func TestCheckVerdictDigest(t *testing.T) {
	good := digest.SHA256([]byte("proposal"))
	for _, tc := range []struct {
		note string
		sum  string
		want string // "" means the verdict is accepted
	}{
		{note: "none", sum: ""},
		{note: "lower case", sum: good},
		{note: "upper case", sum: strings.ToUpper(good), want: "is not a SHA-256 digest"},
		{note: "short", sum: good[:62], want: "is not a SHA-256 digest"},
		{note: "not hex", sum: strings.Repeat("x", 64), want: "is not a SHA-256 digest"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			v := &gated.Verdict{V: gated.SchemaVersion, Tenant: "acme", ProposalID: "p1",
				Outcome: gated.OutcomeRejected, ProposalSHA256: tc.sum}
			got := checkVerdict(v, "acme", "p1")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("checkVerdict = %q, want %q", got, tc.want)
			}
		})
	}
}
