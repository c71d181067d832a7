package gated_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gated/gated"
)

const localBatchSample = `{"v":1,"tenant":"acme","decisions":[{"id":"mcp-1","agent":"ops-agent","action":"host_get_status","class":"read","method":"tools/call","name":"get_status","outcome":"approved","stage":"policy","policy_revision":"sha256:1","arguments_sha256":"` + "abababababababababababababababababababababababababababababababab" + `","at":"2025-01-02T03:04:06Z"}]}`

func TestDecodeLocalBatch(t *testing.T) {
	b, err := gated.DecodeLocalBatch([]byte(localBatchSample))
	if err != nil || b.Tenant != "acme" || len(b.Decisions) != 1 || b.Decisions[0].ID != "mcp-1" {
		t.Fatalf("%+v, %v", b, err)
	}
	for _, c := range []struct{ from, to, why string }{
		{`"v":1`, `"v":2`, "member v"},
		{`"tenant":"acme"`, `"tenant":"Acme!"`, "not a tenant"},
		{`"class":"read"`, `"class":"write"`, "decides reads alone"},
		{`"outcome":"approved"`, `"outcome":"rejected"`, "only approvals"},
		{`"stage":"policy"`, `"stage":"review"`, "only approvals"},
		{`"id":"mcp-1"`, `"id":"a.b"`, "not an id"},
		{`"method":"tools/call"`, `"method":"tools/list"`, "member method"},
		{`"at":"2025-01-02T03:04:06Z"`, `"at":"yesterday"`, "RFC 3339"},
		{`"name":"get_status",`, ``, "name is missing"},
		{`"name":"get_status"`, `"name":null`, "want a string"},
		{`"name":"get_status"`, `"name":"get_status","name":"x"`, "twice"},
		{`"policy_revision"`, `"rule"`, "unknown"},
		{`"abab`, `"ABAB`, "hex"},
	} {
		in := strings.Replace(localBatchSample, c.from, c.to, 1)
		if _, err := gated.DecodeLocalBatch([]byte(in)); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s -> %s: %v, want %q", c.from, c.to, err, c.why)
		}
	}
	if _, err := gated.DecodeLocalBatch([]byte(`{"v":1,"tenant":"acme","decisions":[]}`)); err == nil {
		t.Error("an empty batch decoded")
	}
}

// FuzzDecodeLocalBatch: whatever the bytes, a batch that decodes holds
// only approved reads of valid ids, and encodes to what decodes the same.
func FuzzDecodeLocalBatch(f *testing.F) {
	f.Add([]byte(localBatchSample))
	f.Add([]byte(`{"v":1,"tenant":"acme","decisions":[{}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := gated.DecodeLocalBatch(data)
		if err != nil {
			return
		}
		for _, d := range b.Decisions {
			if d.Class != gated.ClassRead || d.Outcome != gated.OutcomeApproved || d.Stage != gated.StagePolicy || !gated.ValidID(d.ID) {
				t.Fatalf("decoded %+v", d)
			}
		}
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		again, err := gated.DecodeLocalBatch(out)
		if err != nil || len(again.Decisions) != len(b.Decisions) {
			t.Fatalf("%s does not decode again: %v", out, err)
		}
	})
}
