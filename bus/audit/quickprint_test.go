package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/gated/gated"
)

// FuzzQuickPrint holds the verdict check's quick comparison to the full
// one: a record's data and a stored verdict with the same quick print,
// when the stored verdict decodes, decode to the same verdict.
func FuzzQuickPrint(f *testing.F) {
	doc := []byte(`{"v":1,"proposal_id":"p1","tenant":"acme","outcome":"approved","approved":true,"decided_at":"2026-11-01T09:00:00Z","audit_seq":0}`)
	f.Add(append([]byte(`{"operator":"alice","delivery":1,"policy_eval_us":3,`), doc[1:]...), bytes.Replace(doc, []byte(`"audit_seq":0`), []byte(`"audit_seq":42`), 1))
	f.Add([]byte(`{"Operator":"x","v":1}`), []byte(`{"v":1}`))
	f.Add([]byte(`{"audit_seq":"x","v":1}`), []byte(`{"v":1,"audit_seq":3}`))
	f.Add([]byte(`{"v":1,"outcome":5}`), []byte(`{"v":1,"outcome":5}`))
	f.Fuzz(func(t *testing.T, record, stored []byte) {
		tenant, id := []byte("acme"), []byte("p1")
		pr, okR := quickPrintOf(tenant, id, record, recordDropped)
		ps, okS := quickPrintOf(tenant, id, stored, storedDropped)
		if okR && !json.Valid(record) || okS && !json.Valid(stored) {
			t.Fatal("a quick print of a document that is not JSON")
		}
		if !okR || !okS || pr != ps {
			return
		}
		var sv gated.Verdict
		if err := json.Unmarshal(stored, &sv); err != nil {
			return // not a verdict: the check reports it before comparing
		}
		var rv gated.Verdict
		if err := json.Unmarshal(record, &rv); err != nil {
			t.Fatalf("same quick print, the stored verdict decodes, the record's does not (%v):\n%s\n%s", err, record, stored)
		}
		if printVerdict(&rv) != printVerdict(&sv) {
			t.Fatalf("same quick print, different verdicts:\n%s\n%s", record, stored)
		}
	})
}

// grantToken is a token shaped as a grant's, whose claims hold gid.
func grantToken(gid string) string {
	claims := base64.RawURLEncoding.EncodeToString([]byte(`{"gid":"` + gid + `","kid":"k1","exp":1}`))
	return "eyJhbGciOiJFZERTQSJ9." + claims + ".c2ln"
}

// TestGIDPrint: a record that folded its grant matches the stored verdict
// holding the grant's token, by the grant's id, without decoding either;
// what may be read as a grant another way has no gid print.
func TestGIDPrint(t *testing.T) {
	tenant, id := []byte("acme"), []byte("p1")
	record := `{"operator":"alice","v":1,"outcome":"approved","approved":true,"audit_seq":0}`
	stored := func(grant string) []byte {
		return []byte(`{"v":1,"outcome":"approved","approved":true,` + grant + `"audit_seq":42}`)
	}
	pr, ok := gidPrintOf(tenant, id, []byte(record), recordDropped, "g1")
	if !ok {
		t.Fatal("no gid print of a record that folded its grant")
	}
	tests := []struct {
		note   string
		stored []byte
		ok     bool
		match  bool
	}{
		{"the grant's token", stored(`"grant":"` + grantToken("g1") + `",`), true, true},
		{"another grant's token", stored(`"grant":"` + grantToken("g2") + `",`), true, false},
		{"no grant", stored(``), false, false},
		{"a grant spelt Grant", stored(`"Grant":"` + grantToken("g1") + `",`), false, false},
		{"a key with an escape", stored(`"gr\u0061nt":"` + grantToken("g1") + `",`), false, false},
		{"two grants", stored(`"grant":"` + grantToken("g1") + `","grant":"` + grantToken("g1") + `",`), false, false},
		{"a token that is no grant", stored(`"grant":"not-a-token",`), false, false},
		{"a grant that is no string", stored(`"grant":1,`), false, false},
	}
	for _, tc := range tests {
		ps, ok := gidPrintOf(tenant, id, tc.stored, storedDropped, "")
		if ok != tc.ok || ok && (ps == pr) != tc.match {
			t.Errorf("%s: gid print ok %v, matches %v; want %v, %v", tc.note, ok, ps == pr, tc.ok, tc.match)
		}
	}
	if _, ok := gidPrintOf(tenant, id, stored(`"grant":"`+grantToken("g1")+`",`), recordDropped, "g1"); ok {
		t.Error("a gid print of a record that kept a grant member beside the folded one")
	}
	for _, kept := range []string{`"Grant":"x",`, `"gr\u0061nt":"x",`} {
		// encoding/json reads either into the verdict's grant: the record
		// has then no grant to fold.
		if _, ok := gidPrintOf(tenant, id, []byte(`{"v":1,`+kept+`"outcome":"approved"}`), recordDropped, "g1"); ok {
			t.Errorf("a gid print of a record whose verdict holds %s", kept)
		}
	}
	if _, ok := gidPrintOf(tenant, id, []byte(record), recordDropped, ""); ok {
		t.Error("a gid print of a record without a grant")
	}
	if q, _ := quickPrintOf(tenant, id, []byte(record), recordDropped); q == pr {
		t.Error("the gid print is the quick print: a verdict without its grant would match one with it")
	}
}

// FuzzGIDPrint holds the gid print to the full comparison: a record's
// verdict and a stored one with the same gid print, when the stored
// verdict decodes, decode to the same comparable verdict, the record's
// grant being the one it folded.
func FuzzGIDPrint(f *testing.F) {
	f.Add([]byte(`{"operator":"alice","v":1,"outcome":"approved"}`), []byte(`{"v":1,"outcome":"approved","grant":"`+grantToken("g1")+`","audit_seq":3}`), "g1")
	f.Add([]byte(`{"v":1}`), []byte(`{"v":1,"GRANT":"x","grant":"`+grantToken("g1")+`"}`), "g1")
	f.Fuzz(func(t *testing.T, record, stored []byte, gid string) {
		tenant, id := []byte("acme"), []byte("p1")
		pr, okR := gidPrintOf(tenant, id, record, recordDropped, gid)
		ps, okS := gidPrintOf(tenant, id, stored, storedDropped, "")
		if !okR || !okS || pr != ps {
			return
		}
		var sv gated.Verdict
		if err := json.Unmarshal(stored, &sv); err != nil {
			return
		}
		var rv gated.Verdict
		if err := json.Unmarshal(record, &rv); err != nil {
			t.Fatalf("same gid print, the stored verdict decodes, the record's does not (%v):\n%s\n%s", err, record, stored)
		}
		if rv.Grant != "" {
			t.Fatalf("a gid print of a record whose verdict has a grant: %s", record)
		}
		rv.Grant = gidMark + gid
		if printVerdict(&rv) != printVerdict(&sv) {
			t.Fatalf("same gid print, different verdicts:\n%s\n%s (gid %q)", record, stored, gid)
		}
	})
}

// TestQuickPrintLeavesOutTheProposalMembers: the members every event of a
// proposal carries are no field of a verdict, so the quick print leaves
// them out, and a record written as the engine writes it matches its
// stored verdict without decoding.
func TestQuickPrintLeavesOutTheProposalMembers(t *testing.T) {
	for _, k := range []string{`"operator"`, `"delivery"`, `"policy_eval_us"`, `"audit_seq"`} {
		if !recordDropped[k] {
			t.Errorf("the record's %s is not left out", k)
		}
	}
	if len(storedDropped) != 1 || !storedDropped[`"audit_seq"`] {
		t.Errorf("stored verdicts leave out %v, want audit_seq alone", storedDropped)
	}
	if got := droppable("operator_decision", "Outcome"); got[`"operator_decision"`] || got[`"Outcome"`] {
		t.Errorf("members that are fields of a verdict are left out: %v", got)
	}
}
