package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gated/gated"
)

// The strict-key check's refusals name the key's path and say what is
// wrong with it in the proposal's own terms.
func TestDecodeProposalKeyErrors(t *testing.T) {
	for _, tc := range []struct {
		note, in, field, want string
	}{
		{note: "duplicate key", in: `{"v":1,"id":"a","id":"b"}`, field: "id",
			want: "appears more than once; every key must be unique"},
		{note: "case variant", in: `{"v":1,"class":"write","CLASS":"read"}`, field: "CLASS",
			want: "is not a field of the v1 proposal schema (field names are case-sensitive)"},
		{note: "nested unknown key", in: `{"v":1,"flags":{"skip_review":false,"skip":true}}`, field: "flags.skip",
			want: "is not a field of the v1 proposal schema (field names are case-sensitive)"},
		{note: "duplicate in the target", in: `{"v":1,"target":{"a":1,"a":2}}`, field: "target.a",
			want: "appears more than once; every key must be unique"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			_, err := gated.DecodeProposal([]byte(tc.in), "", "", gated.Limits{})
			var fe *gated.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeProposal = %v, want a *FieldError on %q saying %q", err, tc.field, tc.want)
			}
		})
	}
}
