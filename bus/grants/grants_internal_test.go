package grants

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// topLevelKeys lists the names of the members of the JSON object data as
// encoding/json's tokenizer reads them, repeats included: the reference
// decodeGrantUse is held to.
func topLevelKeys(data []byte) ([]string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return nil, false
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, false
		}
	}
	return keys, true
}

// FuzzDecodeGrantUse holds the use request's decoder to what it promises:
// it never panics; what it accepts is one JSON object whose members are
// grant and, perhaps, by, each once and spelled exactly, with the values
// encoding/json reads; and every refusal says it is the request's.
func FuzzDecodeGrantUse(f *testing.F) {
	for _, s := range []string{
		`{"grant":"a.b.c","by":"agent"}`, `{"grant":"a.b.c"}`, `{"by":"x","grant":"t"}`,
		`{"grant":"x","grant":"y"}`, `{"grant":"x","gr\u0061nt":"y"}`, `{"GRANT":"x"}`, `{"grant":"x","Grant":"y"}`,
		`{"grant":null}`, `{"grant":"x","by":7}`, `{"grant":"x"}{}`, `{"grant":"x"} `, `[]`, `"grant"`, ``,
		`{"grant":"\ud800"}`, `{"grant":"x","by":"` + strings.Repeat("b", 300) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeGrantUse(data)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "request") && !strings.HasPrefix(msg, "by ") {
				t.Fatalf("refusal %q does not say it is the request's", msg)
			}
			return
		}
		keys, ok := topLevelKeys(data)
		if !ok {
			t.Fatalf("accepted %q, which is not a JSON object", data)
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k] || k != "grant" && k != "by" {
				t.Fatalf("accepted %q with member %q (members %q)", data, k, keys)
			}
			seen[k] = true
		}
		var ref map[string]string
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", data, err)
		}
		if !seen["grant"] || req.Grant == "" || req.Grant != ref["grant"] || req.By != ref["by"] || len(req.By) > maxGrantUseBy {
			t.Fatalf("accepted %q as %+v; encoding/json reads %v", data, req, ref)
		}
	})
}

// FuzzGrantSubjects: a use or outcome subject made of a tenant, an id and
// an agent reads back to them, and whatever else the subjects' wildcards
// let through reads as valid tokens or as nothing: the agent a use or
// report is checked against is the one the subject spells.
func FuzzGrantSubjects(f *testing.F) {
	f.Add("acme", "p-1", "agent-a")
	f.Add("acme", "p-1", "")
	f.Add("acme", "p.1", "agent")
	f.Add("acme", "p", "agent.b")
	f.Add("ACME", "p", "a")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, tenant, id, agent string) {
		valid := gated.ValidTenant(tenant) && (agent == "" || gated.ValidID(agent))
		use := wire.GrantUseSubject(tenant)
		if agent != "" {
			use = wire.GrantUseSubjectAs(tenant, agent)
		}
		gotTenant, gotAgent, ok := parseUseSubject(use)
		if valid && (!ok || gotTenant != tenant || gotAgent != agent) {
			t.Fatalf("%q read as %q, %q, %v", use, gotTenant, gotAgent, ok)
		}
		if ok && (!gated.ValidTenant(gotTenant) || gotAgent != "" && !gated.ValidID(gotAgent)) {
			t.Fatalf("%q read as invalid tokens %q, %q", use, gotTenant, gotAgent)
		}
		out := wire.OutcomeSubject(tenant, id)
		if agent != "" {
			out = wire.OutcomeSubjectAs(tenant, id, agent)
		}
		gotTenant, gotID, gotAgent, ok := parseOutcomeSubject(out)
		if valid && gated.ValidID(id) && (!ok || gotTenant != tenant || gotID != id || gotAgent != agent) {
			t.Fatalf("%q read as %q, %q, %q, %v", out, gotTenant, gotID, gotAgent, ok)
		}
		if ok && (!gated.ValidTenant(gotTenant) || !gated.ValidID(gotID) || gotAgent != "" && !gated.ValidID(gotAgent)) {
			t.Fatalf("%q read as invalid tokens %q, %q, %q", out, gotTenant, gotID, gotAgent)
		}
	})
}
