package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/jsonscan"
)

// policyRefCases are a policy event's denies, eval_us and review members
// as the engine writes them and in the forms the fast reading leaves to
// encoding/json; fast says which is which.
var policyRefCases = []struct {
	denies, evalUS, review string
	fast                   bool
}{
	{`[]`, `41`, `{"required":true,"persona":"reviewer","quorum":1,"why":"w","rule":"route_class"}`, true},
	{`[{"rule":"change_freeze","message":"frozen"},{"rule":"change_freeze","message":"again"},{"rule":"r2","message":""}]`, `0`, `{"required":false,"quorum":0,"why":"w","rule":"route_read"}`, true},
	{`[{"rule":"","message":"m"}]`, `-3`, `null`, true},
	{`[]`, `7`, `{}`, true},
	{`[]`, `7`, ``, true},
	{`[` + strings.Repeat(`{"rule":"r1","message":"m"},{"rule":"r2","message":"m"},{"rule":"r3","message":"m"},{"rule":"r4","message":"m"},{"rule":"r5","message":"m"},`, 2) +
		`{"rule":"r6","message":"m"},{"rule":"r7","message":"m"},{"rule":"r8","message":"m"},{"rule":"r9","message":"m"},{"rule":"r10","message":"m"},{"rule":"r9","message":"m"}]`, `1`, `{"rule":"` + strings.Repeat("x", 200) + `"}`, true},
	{`[{"rule":"` + strings.Repeat("y", 300) + `","message":"m"}]`, `1`, `{"rule":""}`, true},
	{`[{"rule":"no_skip_review","message":"refused for operator \"bob\", roles [\"sre\"]: a\\b\n\r\t \u003cx\u003e \u0026"}]`, `1`, `null`, true},
	{`[{"rule":"a<b","message":"m"}]`, `1`, `null`, false},
	{`[{"rule":"a","message":"\u003C"}]`, `1`, `null`, false},
	{`[{"rule":"a","message":"\/"}]`, `1`, `null`, false},
	{`[{"rule":"a","message":"\b\f"}]`, `1`, `null`, false},
	{`[{"rule":"a","message":"\u0041"}]`, `1`, `null`, false},
	{`[{"rule":"a","message":"<"}]`, `1`, `null`, false},
	{`[{"rule":"a\"b","message":"m"}]`, `1`, `null`, false},
	{`[{"rule":"a","message":"é"}]`, `1`, `null`, false},
	{`[{"message":"m","rule":"a"}]`, `1`, `null`, false},
	{`[{"rule":"a","message":"m","x":1}]`, `1`, `null`, false},
	{`[null]`, `1`, `null`, false},
	{`null`, `1`, `null`, false},
	{`[]`, `1.5`, `null`, false},
	{`[]`, `null`, `null`, false},
	{`[]`, `1`, `{"Rule":"route_class"}`, false},
	{`[]`, `1`, `{"rule":"a","rule":"b"}`, false},
	{`[]`, `1`, `{"r\u0075le":"a"}`, false},
	{`[]`, `1`, `{"rule":"a\"b"}`, false},
	{`[]`, `1`, `[]`, false},
}

func policyFrom(denies, evalUS, review, revision string) verdictFrom {
	f := verdictFrom{env: engine.AuditEvent{PolicyRevision: revision}}
	f.policy = []member{{key: []byte(`"denies"`), val: []byte(denies)}, {key: []byte(`"eval_us"`), val: []byte(evalUS)}}
	if review != "" {
		f.policy = append(f.policy, member{key: []byte(`"review"`), val: []byte(review)})
	}
	return f
}

// TestPolicyRefFast: the policy section rebuilt without reflection is
// encoding/json's, byte for byte, and the forms it does not read are
// left to encoding/json.
func TestPolicyRefFast(t *testing.T) {
	for i, tc := range policyRefCases {
		f := policyFrom(tc.denies, tc.evalUS, tc.review, "sha256:ab<c")
		got, ok := f.policyRefFast()
		if ok != tc.fast {
			t.Errorf("case %d: read without reflection: %v, want %v", i, ok, tc.fast)
		}
		want, wantOK := f.policyRefJSON()
		if ok && (!wantOK || !bytes.Equal(got, want)) {
			t.Errorf("case %d:\n got %s\nwant %s (%v)", i, got, want, wantOK)
		}
		if p, pOK := f.policyRef(); pOK != wantOK || !bytes.Equal(p, want) {
			t.Errorf("case %d: policyRef gives %s (%v), want %s (%v)", i, p, pOK, want, wantOK)
		}
	}
}

// FuzzPolicyRef holds the rebuilt policy section without reflection to
// the one encoding/json writes, on members of any compact form.
func FuzzPolicyRef(f *testing.F) {
	for _, tc := range policyRefCases {
		f.Add(tc.denies, tc.evalUS, tc.review, "sha256:ab")
	}
	f.Fuzz(func(t *testing.T, denies, evalUS, review, revision string) {
		for _, v := range []string{denies, evalUS, review} {
			if v != "" && (!json.Valid([]byte(v)) || !compactJSON([]byte(v))) {
				return // a record's members are compact JSON
			}
		}
		if denies == "" || evalUS == "" {
			return
		}
		pf := policyFrom(denies, evalUS, review, revision)
		got, ok := pf.policyRefFast()
		if !ok {
			return
		}
		want, wantOK := pf.policyRefJSON()
		if !wantOK || !bytes.Equal(got, want) {
			t.Fatalf("denies %s eval_us %s review %s:\n got %s\nwant %s (%v)", denies, evalUS, review, got, want, wantOK)
		}
	})
}

// FuzzCanonicalString: a string canonicalString takes is the one
// encoding/json writes for what it decodes to.
func FuzzCanonicalString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"q \"x\" \\ \n\r\t"`, `"\u003c\u003e\u0026"`, `"\u003C"`, `"\b"`, `"é"`, `"\u2028"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v string
		if json.Unmarshal([]byte(s), &v) != nil || jsonscan.String([]byte(s), 0) != len(s) {
			return
		}
		if !canonicalString([]byte(s)) {
			return
		}
		if b, _ := json.Marshal(v); string(b) != s {
			t.Fatalf("%s taken as written, but encoding/json writes %s", s, b)
		}
	})
}
