package replay

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/gated/gated/bus/replay/replaytest"
)

// recordedPolicyCases are policy.decided data in the form gated writes
// and in the forms the one-pass reading leaves to encoding/json.
var recordedPolicyCases = []struct {
	note string
	data string
	// fast says whether the one-pass reading takes the data itself.
	fast bool
}{
	{note: "as gated writes it", fast: true, data: `{"action":"cache_purge","denied_tools":["run_shell"],"denies":[{"rule":"change_freeze","message":"frozen"}],"eval_us":41,"review":{"required":true,"persona":"reviewer","quorum":1,"why":"write"},"reviewer_tools":[],"run":null,"sop":"SOP-7","input":{"proposal":{"v":1,"id":"p1","tenant":"acme","target":{"tags":["a\"b"]}},"persona":"reviewer","now":"2026-11-01T09:00:00Z","history":[{"outcome":"approved"}]}}`},
	{note: "white space and no input", fast: true, data: " {\n\"action\" : \"x\" , \"input\" : null }\t"},
	{note: "an empty object", fast: true, data: `{}`},
	{note: "a failed evaluation", fast: true, data: `{"error":"boom","shadow_revision":"r2"}`},
	{note: "the head and the holds", fast: true, data: `{"action":"dns_delete_zone","operator":"u-1042","delivery":3,"policy_eval_us":12,"holds":[{"rule":"hold_prod","reason":"prod"}],"reviewer_tools":["ls"]}`},
	{note: "a delivery that is not small", fast: true, data: `{"delivery":12345678901,"policy_eval_us":-1}`},
	{note: "a run record", fast: true, data: `{"input":{"proposal":null,"now":null,"run_record":{"run_id":"r1"}}}`},
	{note: "a string with an escape", fast: true, data: `{"action":"a\u0062","sop":"\u00e9"}`},
	{note: "a route with every member", fast: true, data: `{"review":{"required":false,"persona":"dba","quorum":2,"why":"w","rule":"route_class","personas":["a", "b"],"also":[],"blocked":"b","extra":{"x":[1]}}}`},
	{note: "a route read by encoding/json", fast: true, data: `{"review":{"Required":true,"quorum":10000000000,"personas":null}}`},
	{note: "a null route", fast: true, data: `{"review":null,"denies":null,"denied_tools":null}`},
	{note: "lists with escapes, nulls and other forms", fast: true, data: `{"denied_tools":[ "a\u0062" , null ],"denies":[null,{"Rule":"r"},{"rule":"r","message":"m\n","x":1}]}`},
	{note: "a quorum that is not an integer", data: `{"review":{"quorum":1.5}}`},
	{note: "a deny of the wrong type", data: `{"denies":[{"rule":7}]}`},
	{note: "a tool of the wrong type", data: `{"denied_tools":["a",7]}`},
	{note: "a key given twice", data: `{"action":"a","action":"b"}`},
	{note: "a key in other case", data: `{"Action":"a"}`},
	{note: "an input key in other case", data: `{"input":{"PROPOSAL":{}}}`},
	{note: "a key with an escape", data: `{"\u0061ction":"a"}`},
	{note: "a member of the wrong type", data: `{"action":7,"sop":"s"}`},
	{note: "input of the wrong type", data: `{"input":[1]}`},
	{note: "a clock that does not parse", data: `{"input":{"now":"yesterday"}}`},
	{note: "not an object", data: `[1,2]`},
	{note: "null", data: `null`},
}

// TestDecodeRecordedPolicyValid: the one-pass reading of policy.decided
// gives what encoding/json gives, on the data it reads itself and on the
// data it leaves to encoding/json.
func TestDecodeRecordedPolicyValid(t *testing.T) {
	for _, tc := range recordedPolicyCases {
		t.Run(tc.note, func(t *testing.T) {
			data := []byte(tc.data)
			if !json.Valid(data) {
				t.Fatalf("the case is not valid JSON: %s", data)
			}
			if _, ok := decodeRecordedPolicyFast(data); ok != tc.fast {
				t.Fatalf("read in one pass: %v, want %v", ok, tc.fast)
			}
			got, want := decodeRecordedPolicyValid(data), decodeRecordedPolicy(data)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("one pass:\n%+v\nencoding/json:\n%+v", got, want)
			}
		})
	}
}

// FuzzDecodeRecordedPolicy holds the one-pass reading of policy.decided
// data equal to encoding/json's on any valid JSON.
func FuzzDecodeRecordedPolicy(f *testing.F) {
	for _, tc := range recordedPolicyCases {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // the record decoder passes only valid data on
		}
		fast, ok := decodeRecordedPolicyFast(data)
		want := decodeRecordedPolicy(data)
		if ok && !reflect.DeepEqual(fast, want) {
			t.Fatalf("one pass:\n%+v\nencoding/json:\n%+v", fast, want)
		}
		if got := decodeRecordedPolicyValid(data); !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeRecordedPolicyValid:\n%+v\nencoding/json:\n%+v", got, want)
		}
	})
}

// BenchmarkDecodeRecorded reads a policy.decided record's data as a
// replay reads it, in one pass and with encoding/json, into the same
// declared types.
func BenchmarkDecodeRecorded(b *testing.B) {
	_, _, prop := replaytest.ScriptedProposal(6)
	policy := []byte(`{"action":"cache_purge","operator":"u-1042","delivery":1,"policy_eval_us":41,"denied_tools":["run_shell","kill_process"],"denies":[],"eval_us":41,"review":{"required":true,"persona":"reviewer","quorum":1,"why":"write"},"reviewer_tools":["get_sop_text"],"run":null,"sop":"SOP-7","input":{"proposal":` + string(prop) + `,"persona":"reviewer","now":"2026-11-01T09:00:00Z"}}`)
	for _, read := range []struct {
		note string
		fn   func([]byte) *recordedPolicy
	}{{"one pass", decodeRecordedPolicyValid}, {"encoding/json", decodeRecordedPolicy}} {
		b.Run(read.note, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if p := read.fn(policy); p.Error != "" {
					b.Fatal(p.Error)
				}
			}
		})
	}
}
