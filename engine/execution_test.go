package engine_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gated/gated"
)

const goodReport = `{"v":1,"gid":"AAECAwQFBgcICQoLDA0ODw","tenant":"acme","proposal_id":"restart-7","status":"failed","error":"unit failed","at":"2026-11-26T01:00:00Z"}`

func TestDecodeExecutionReport(t *testing.T) {
	for _, tc := range []struct {
		note, data, member string
	}{
		{note: "failed", data: goodReport},
		{note: "started without error", data: `{"v":1,"gid":"AAECAwQFBgcICQoLDA0ODw","tenant":"acme","proposal_id":"p","status":"started","at":"2026-11-26T01:00:00.5+01:00"}`},
		{note: "refused without gid", data: `{"v":1,"gid":"","tenant":"acme","proposal_id":"p","status":"refused","error":"grant refused: signature","at":"2026-11-26T01:00:00Z"}`},
		{note: "not json", data: `{"v":1,`, member: "JSON"},
		{note: "array", data: `[]`, member: "JSON object"},
		{note: "unknown member", data: strings.Replace(goodReport, `"v":1`, `"v":1,"ok":true`, 1), member: `"ok"`},
		{note: "duplicate member", data: strings.Replace(goodReport, `"v":1`, `"v":1,"v":1`, 1), member: `"v"`},
		{note: "v 2", data: strings.Replace(goodReport, `"v":1`, `"v":2`, 1), member: "v"},
		{note: "v string", data: strings.Replace(goodReport, `"v":1`, `"v":"1"`, 1), member: "v"},
		{note: "missing at", data: strings.Replace(goodReport, `,"at":"2026-11-26T01:00:00Z"`, ``, 1), member: "at"},
		{note: "bad at", data: strings.Replace(goodReport, `2026-11-26T01:00:00Z`, `yesterday`, 1), member: "at"},
		{note: "bad tenant", data: strings.Replace(goodReport, `"acme"`, `"Acme.x"`, 1), member: "tenant"},
		{note: "bad proposal id", data: strings.Replace(goodReport, `restart-7`, `a.b`, 1), member: "proposal_id"},
		{note: "bad gid", data: strings.Replace(goodReport, `AAECAwQFBgcICQoLDA0ODw`, `short`, 1), member: "gid"},
		{note: "empty gid on failed", data: strings.Replace(goodReport, `AAECAwQFBgcICQoLDA0ODw`, ``, 1), member: "gid"},
		{note: "bad status", data: strings.Replace(goodReport, `"failed"`, `"approved"`, 1), member: "status"},
		{note: "null status", data: strings.Replace(goodReport, `"failed"`, `null`, 1), member: "status"},
		{note: "refused without reason", data: `{"v":1,"gid":"","tenant":"acme","proposal_id":"p","status":"refused","at":"2026-11-26T01:00:00Z"}`, member: "error"},
		{note: "long error", data: strings.Replace(goodReport, `unit failed`, strings.Repeat("x", gated.MaxExecutionError+1), 1), member: "error"},
		{note: "trailing data", data: goodReport + `{}`, member: "JSON"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			r, err := gated.DecodeExecutionReport([]byte(tc.data))
			switch {
			case tc.member == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.member != "" && err == nil:
				t.Fatalf("accepted %+v", r)
			case tc.member != "" && !strings.Contains(err.Error(), tc.member):
				t.Fatalf("error %q does not name %s", err, tc.member)
			}
		})
	}
}

func FuzzDecodeExecutionReport(f *testing.F) {
	f.Add([]byte(goodReport))
	f.Add([]byte(`{"v":1,"gid":"","tenant":"acme","proposal_id":"p","status":"refused","error":"x","at":"2026-11-26T01:00:00Z"}`))
	f.Add([]byte(`{"v":1e0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := gated.DecodeExecutionReport(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "outcome report") {
				t.Fatalf("error %q does not say it is the outcome report's", err)
			}
			return
		}
		// An accepted report survives its own encoding unchanged.
		again, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := gated.DecodeExecutionReport(again)
		if err != nil {
			t.Fatalf("re-encoded report %s refused: %v", again, err)
		}
		if r2.Execution() != r.Execution() || r2.GID != r.GID || r2.Tenant != r.Tenant || r2.ProposalID != r.ProposalID {
			t.Fatalf("round trip changed %+v into %+v", r, r2)
		}
	})
}
