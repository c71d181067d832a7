package replay

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/replay/replaytest"
	"github.com/gated/gated/engine"
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

// recordedVerdictCases are verdict.decided data in the form gated writes
// and in the forms the one-pass reading leaves to encoding/json.
var recordedVerdictCases = []struct {
	note string
	data string
	fast bool
}{
	{note: "as gated writes it", fast: true, data: `{"v":1,"proposal_id":"p1","tenant":"acme","action":"cache_purge","kind":"action","outcome":"rejected","approved":false,"stage":"policy","reason":"policy denied: change_freeze: \"frozen\"","policy":{"denies":[{"rule":"change_freeze","message":"frozen"}]},"reviews":[{"plugin":"sop"}],"decided_at":"2026-11-01T09:00:00Z"}`},
	{note: "null members", fast: true, data: `{"outcome":null,"stage":"review"}`},
	{note: "white space", fast: true, data: " { \"outcome\" : \"approved\" }\n"},
	{note: "a member of the wrong type", data: `{"outcome":7}`},
	{note: "a key given twice", data: `{"outcome":"approved","outcome":"rejected"}`},
	{note: "a key in other case", data: `{"OUTCOME":"approved"}`},
	{note: "not an object", data: `"approved"`},
}

// TestDecodeRecordedVerdict: the one-pass reading of verdict.decided
// gives what encoding/json gives, error or not.
func TestDecodeRecordedVerdict(t *testing.T) {
	for _, tc := range recordedVerdictCases {
		t.Run(tc.note, func(t *testing.T) {
			data := []byte(tc.data)
			if _, ok := decodeRecordedVerdictFast(data); ok != tc.fast {
				t.Fatalf("read in one pass: %v, want %v", ok, tc.fast)
			}
			checkRecordedVerdict(t, data)
		})
	}
}

// checkRecordedVerdict fails t when decodeRecordedVerdict reads data
// otherwise than encoding/json does.
func checkRecordedVerdict(t *testing.T, data []byte) {
	t.Helper()
	var want recordedVerdict
	wantErr := json.Unmarshal(data, &want)
	got, err := decodeRecordedVerdict(data)
	if (err != nil) != (wantErr != nil) || (err == nil && got != want) {
		t.Fatalf("read %+v (err %v), encoding/json %+v (err %v)", got, err, want, wantErr)
	}
}

// FuzzDecodeRecordedVerdict holds the one-pass reading of verdict.decided
// data equal to encoding/json's on any valid JSON.
func FuzzDecodeRecordedVerdict(f *testing.F) {
	for _, tc := range recordedVerdictCases {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // the record decoder passes only valid data on
		}
		checkRecordedVerdict(t, data)
	})
}

// BenchmarkDecodeRecorded reads a policy.decided and a verdict.decided
// record's data as a replay reads them, in one pass and with
// encoding/json.
func BenchmarkDecodeRecorded(b *testing.B) {
	_, _, prop := replaytest.ScriptedProposal(6)
	policy := []byte(`{"action":"cache_purge","denied_tools":["run_shell","kill_process"],"denies":[],"eval_us":41,"review":{"required":true,"persona":"reviewer","quorum":1,"why":"write"},"reviewer_tools":["get_sop_text"],"run":null,"sop":"SOP-7","input":{"proposal":` + string(prop) + `,"persona":"reviewer","now":"2026-11-01T09:00:00Z"}}`)
	verdict := []byte(recordedVerdictCases[0].data)
	b.Run("one pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = decodeRecordedPolicyValid(policy)
			if _, err := decodeRecordedVerdict(verdict); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = decodeRecordedPolicy(policy)
			var v gated.Verdict
			if err := json.Unmarshal(verdict, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// reviewRecordCases are review.started and review.finished data in the
// form gated writes and in the forms the one-pass reading leaves to
// encoding/json.
var reviewRecordCases = []struct {
	note  string
	event string
	data  string
	fast  bool
}{
	{note: "started as gated writes it", event: engine.EventReviewStarted, fast: true, data: `{"action":"cache_purge","review_id":"rp1","persona":"reviewer","plugin":"sop","tools":["get_sop_text","get_proposal"],"deadline":"2026-11-01T09:01:00Z","persona_revision":"ab12","model":"anthropic/claude"}`},
	{note: "finished as gated writes it", event: engine.EventReviewDone, fast: true, data: `{"action":"cache_purge","review_id":"rp1","plugin":"sop","plugin_version":"1.0.0","decision":"approve","latency_ms":3,"why":"SOP-7 covers it"}`},
	{note: "finished with an error", event: engine.EventReviewDone, fast: true, data: `{"review_id":"rp1","outcome":"timeout","error":"deadline passed","model":"m"}`},
	{note: "started with null and empty tools", event: engine.EventReviewStarted, fast: true, data: ` { "review_id" : "r" , "persona" : "p" , "tools" : null , "model" : null } `},
	{note: "started with no tools", event: engine.EventReviewStarted, fast: true, data: `{"review_id":"r","persona":"p","tools":[]}`},
	{note: "started without a persona", event: engine.EventReviewStarted, fast: true, data: `{"review_id":"r"}`},
	{note: "finished without a review id", event: engine.EventReviewDone, fast: true, data: `{"decision":"approve"}`},
	{note: "a string with an escape", event: engine.EventReviewDone, fast: true, data: `{"review_id":"r\u0031","why":"\u00e9 \"q\""}`},
	{note: "a key given twice", event: engine.EventReviewDone, data: `{"review_id":"r","decision":"reject","decision":"approve"}`},
	{note: "a key in other case", event: engine.EventReviewDone, data: `{"review_id":"r","Decision":"approve"}`},
	{note: "a key with an escape", event: engine.EventReviewStarted, data: `{"review_id":"r","\u0070ersona":"p"}`},
	{note: "a member of the wrong type", event: engine.EventReviewStarted, data: `{"review_id":7,"persona":"p"}`},
	{note: "tools of the wrong type", event: engine.EventReviewStarted, data: `{"review_id":"r","persona":"p","tools":"get_sop_text"}`},
	{note: "not an object", event: engine.EventReviewDone, data: `["review_id"]`},
	{note: "null", event: engine.EventReviewStarted, data: `null`},
}

// TestDecodeReviewRecordValid: the one-pass reading of the review records
// gives what encoding/json gives, error or not, on the data it reads
// itself and on the data it leaves to encoding/json.
func TestDecodeReviewRecordValid(t *testing.T) {
	for _, tc := range reviewRecordCases {
		t.Run(tc.note, func(t *testing.T) {
			data := []byte(tc.data)
			if !json.Valid(data) {
				t.Fatalf("the case is not valid JSON: %s", data)
			}
			var ok bool
			if tc.event == engine.EventReviewStarted {
				_, ok = decodeReviewStartedFast(data)
			} else {
				_, ok = decodeReviewFinishedFast(data)
			}
			if ok != tc.fast {
				t.Fatalf("read in one pass: %v, want %v", ok, tc.fast)
			}
			checkReviewRecord(t, tc.event, data)
		})
	}
}

// checkReviewRecord fails t when decodeReviewRecordValid reads data, of a
// record of event, otherwise than decodeReviewRecord does.
func checkReviewRecord(t *testing.T, event string, data []byte) {
	t.Helper()
	r := &replayEvent{Seq: 9, Event: engine.AuditEvent{Event: event, Tenant: "acme", ProposalID: "p1", Data: data}}
	got, want := decodeReviewRecordValid(r), decodeReviewRecord(r)
	if fmt.Sprint(got.err) != fmt.Sprint(want.err) || !reflect.DeepEqual(got.started, want.started) || !reflect.DeepEqual(got.finished, want.finished) {
		t.Fatalf("one pass: %+v %+v (err %v)\nencoding/json: %+v %+v (err %v)", got.started, got.finished, got.err, want.started, want.finished, want.err)
	}
}

// FuzzDecodeReviewRecord holds the one-pass reading of the review
// records' data equal to encoding/json's on any valid JSON.
func FuzzDecodeReviewRecord(f *testing.F) {
	for _, tc := range reviewRecordCases {
		f.Add(tc.event == engine.EventReviewStarted, []byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, started bool, data []byte) {
		if !json.Valid(data) {
			return // the record decoder passes only valid data on
		}
		event := engine.EventReviewDone
		if started {
			event = engine.EventReviewStarted
		}
		checkReviewRecord(t, event, data)
	})
}

// BenchmarkDecodeReviewRecord reads a review.started and a
// review.finished record's data as a replay reads them, in one pass and
// with encoding/json.
func BenchmarkDecodeReviewRecord(b *testing.B) {
	started := &replayEvent{Event: engine.AuditEvent{Event: engine.EventReviewStarted, Data: []byte(reviewRecordCases[0].data)}}
	finished := &replayEvent{Event: engine.AuditEvent{Event: engine.EventReviewDone, Data: []byte(reviewRecordCases[1].data)}}
	for _, read := range []struct {
		note string
		fn   func(*replayEvent) reviewRecord
	}{{"one pass", decodeReviewRecordValid}, {"encoding/json", decodeReviewRecord}} {
		b.Run(read.note, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s, f := read.fn(started), read.fn(finished); s.err != nil || f.err != nil {
					b.Fatal(s.err, f.err)
				}
			}
		})
	}
}
