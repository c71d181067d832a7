package audit_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
)

// rec is an audit record of tenant acme for proposal id with data.
func rec(event, id, data string) *audit.Record {
	return audit.NewRecord(0, gated.AuditEvent{V: 1, Event: event, Tenant: "acme", ProposalID: id, Data: json.RawMessage(data)})
}

// verdictRec is the verdict.decided record of id: outcome, stage, and one
// review by sop as reviewer, with decision and latency; extra adds fields.
func verdictRec(id, outcome, stage, decision string, latency float64, extra string) *audit.Record {
	return rec(gated.EventVerdict, id, fmt.Sprintf(`{"v":1,"proposal_id":%q,"tenant":"acme","outcome":%q,"stage":%q,`+
		`"reviews":[{"plugin":"sop","plugin_version":"1","persona":"reviewer","decision":%q,"latency_ms":%g}]%s}`,
		id, outcome, stage, decision, latency, extra))
}

func outcomeRec(id, status string) *audit.Record {
	return rec(gated.EventGrantOutcome, id, fmt.Sprintf(`{"proposal_id":%q,"tenant":"acme","status":%q}`, id, status))
}

func ptr(f float64) *float64 { return &f }

// TestTrackRecord: the fold counts each proposal's reviews once, an
// approval's last final outcome, and operator decisions that differ.
func TestTrackRecord(t *testing.T) {
	sop := audit.ReviewerKey{Plugin: "sop", PluginVersion: "1", Persona: "reviewer"}
	cases := []struct {
		note    string
		records []*audit.Record
		want    audit.ReviewerStats
	}{
		{
			note: "the last final outcome counts; started alone does not",
			records: []*audit.Record{
				verdictRec("a", "approved", "review", "approve", 10, ""),
				outcomeRec("a", "started"), outcomeRec("a", "failed"), outcomeRec("a", "succeeded"),
				verdictRec("b", "approved", "review", "approve", 20, ""),
				outcomeRec("b", "started"), outcomeRec("b", "failed"),
				verdictRec("c", "approved", "review", "approve", 30, ""),
				outcomeRec("c", "started"),
			},
			want: audit.ReviewerStats{ReviewerKey: sop, Reviews: 3, Approvals: 3, ApprovedSucceeded: 1, ApprovedFailed: 1,
				ApprovedThenFailedRate: ptr(0.5), LatencyP50MS: ptr(20), LatencyP99MS: ptr(30)},
		},
		{
			note: "a dedupe answer is not a review",
			records: []*audit.Record{
				verdictRec("a", "rejected", "review", "reject", 5, ""),
				verdictRec("b", "rejected", "dedupe", "reject", 5, `,"duplicate_of":"a"`),
			},
			want: audit.ReviewerStats{ReviewerKey: sop, Reviews: 1, Rejections: 1, LatencyP50MS: ptr(5), LatencyP99MS: ptr(5)},
		},
		{
			note: "an operator who rejects what the reviewer approved overrides it",
			records: []*audit.Record{
				verdictRec("h", "blocked", "review", "approve", 7, `,"awaiting_operator":{}`),
				rec(gated.EventOperatorDecided, "h", `{"operator":"bob","decision":"reject","outcome":"rejected"}`),
				verdictRec("h", "rejected", "operator", "approve", 7, `,"operator_decision":{"id":"bob","decision":"reject"}`),
			},
			want: audit.ReviewerStats{ReviewerKey: sop, Reviews: 1, Approvals: 1, OperatorOverrides: 1,
				LatencyP50MS: ptr(7), LatencyP99MS: ptr(7)},
		},
		{
			note: "an operator's approval is not the reviewer's, and a run's operator outcome counts",
			records: []*audit.Record{
				verdictRec("h", "blocked", "review", "reject", 7, `,"awaiting_operator":{}`),
				rec(gated.EventOperatorDecided, "h", `{"operator":"bob","decision":"approve","outcome":"approved"}`),
				verdictRec("h", "approved", "operator", "reject", 7, `,"operator_decision":{"id":"bob","decision":"approve"}`),
				outcomeRec("h", "failed"),
				verdictRec("r", "rejected", "review", "approve", 9, ""),
				rec(gated.EventOperatorDecided, "r", `{"operator":"bob","criteria":{"c1":true},"outcome":"approved"}`),
			},
			want: audit.ReviewerStats{ReviewerKey: sop, Reviews: 2, Approvals: 1, Rejections: 1, OperatorOverrides: 1,
				LatencyP50MS: ptr(7), LatencyP99MS: ptr(9)},
		},
		{
			note: "records that do not decode are skipped",
			records: []*audit.Record{
				nil,
				rec(gated.EventVerdict, "x", `[1]`),
				rec(gated.EventGrantOutcome, "x", `"failed"`),
				rec(gated.EventOperatorDecided, "", `{"decision":"approve"}`),
				verdictRec("a", "approved", "review", "approve", 1, ""),
			},
			want: audit.ReviewerStats{ReviewerKey: sop, Reviews: 1, Approvals: 1, LatencyP50MS: ptr(1), LatencyP99MS: ptr(1)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			var tr audit.TrackRecord
			for _, r := range tc.records {
				tr.Add(r)
			}
			got, _ := json.Marshal(tr.Reviewers())
			want, _ := json.Marshal([]audit.ReviewerStats{tc.want})
			if string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// TestTrackRecordPercentilesAndOrder: nearest-rank percentiles, and rows
// in plugin, version, persona, model order.
func TestTrackRecordPercentilesAndOrder(t *testing.T) {
	var tr audit.TrackRecord
	for i := 100; i >= 1; i-- {
		tr.Add(verdictRec(fmt.Sprint("p", i), "rejected", "review", "reject", float64(i), ""))
	}
	tr.Add(rec(gated.EventVerdict, "q", `{"proposal_id":"q","outcome":"approved","stage":"review","reviews":[`+
		`{"plugin":"llm","persona":"dba","model":"m2","decision":"approve","latency_ms":3},`+
		`{"plugin":"llm","persona":"dba","model":"m1","decision":"approve","latency_ms":4}]}`))
	got := tr.Reviewers()
	var keys []string
	for _, s := range got {
		keys = append(keys, s.Plugin+"/"+s.Persona+"/"+s.Model)
	}
	if fmt.Sprint(keys) != "[llm/dba/m1 llm/dba/m2 sop/reviewer/]" {
		t.Fatalf("order %v", keys)
	}
	if s := got[2]; s.Reviews != 100 || *s.LatencyP50MS != 50 || *s.LatencyP99MS != 99 {
		t.Errorf("sop: %d reviews, p50 %v, p99 %v; want 100, 50, 99", s.Reviews, *s.LatencyP50MS, *s.LatencyP99MS)
	}
}

// TestTrackRecordLimit: past its Limit a track record keeps at most Limit
// proposals, and the figures of the settled ones stay counted.
func TestTrackRecordLimit(t *testing.T) {
	var all audit.TrackRecord
	bounded := audit.TrackRecord{Limit: 10, SettledLatencies: 1000}
	for i := range 1000 {
		id := fmt.Sprint("p", i)
		records := []*audit.Record{verdictRec(id, "approved", "review", "approve", float64(i%97), "")}
		if i%3 == 0 {
			records = append(records, outcomeRec(id, "failed"))
		}
		for _, r := range records {
			all.Add(r)
			bounded.Add(r)
		}
	}
	if n := bounded.Tracked(); n != 10 {
		t.Errorf("the bounded track record keeps %d proposals, want 10", n)
	}
	got, _ := json.Marshal(bounded.Reviewers())
	want, _ := json.Marshal(all.Reviewers())
	if string(got) != string(want) {
		t.Errorf("bounded %s\nall     %s", got, want)
	}
}

// FuzzTrackRecord: no record data makes the fold panic, and every row's
// counts stay consistent.
func FuzzTrackRecord(f *testing.F) {
	f.Add(gated.EventVerdict, `{"proposal_id":"a","outcome":"approved","reviews":[{"plugin":"sop","decision":"approve","latency_ms":1}]}`)
	f.Add(gated.EventGrantOutcome, `{"proposal_id":"a","status":"failed"}`)
	f.Add(gated.EventOperatorDecided, `{"decision":"reject"}`)
	f.Add(gated.EventVerdict, `{"proposal_id":"a","reviews":[{"latency_ms":-1e308}]}`)
	f.Fuzz(func(t *testing.T, event, data string) {
		var tr audit.TrackRecord
		tr.Add(verdictRec("a", "approved", "review", "approve", 1, ""))
		tr.Add(rec(event, "a", data))
		tr.Add(outcomeRec("a", "failed"))
		for _, s := range tr.Reviewers() {
			if s.Approvals+s.Rejections > s.Reviews || s.ApprovedFailed+s.ApprovedSucceeded > s.Approvals ||
				(s.Reviews > 0) != (s.LatencyP50MS != nil) {
				t.Fatalf("inconsistent row %+v", s)
			}
		}
	})
}

// foldsSomething reports whether folding the record of evs, encoded the
// way gated's writer encodes it (version 2) and as a version-1 record of
// its last event, keeps a proposal in a track record, and whether
// MayTrack said so of each body.
func foldsSomething(t *testing.T, evs ...gated.AuditEvent) (folds, mayV2, mayV1 bool) {
	t.Helper()
	m2, err := audit.NewRecordMsg(evs, audit.Chain{N: 1}, nil)
	if err != nil {
		t.Skipf("not a record: %v", err)
	}
	m1, err := audit.NewMsg(evs[len(evs)-1], audit.Chain{N: 1}, nil)
	if err != nil {
		t.Skipf("not a record: %v", err)
	}
	r, err := audit.DecodeRecord(m2.Subject, m2.Header, m2.Data)
	if err != nil {
		t.Fatalf("decoding the record just encoded: %v", err)
	}
	var tr audit.TrackRecord
	tr.Add(r)
	// The writer's default form: the same record compressed says the same.
	z, err := audit.NewCompressedRecordMsg(evs, audit.Chain{N: 1}, nil)
	if err != nil {
		t.Fatalf("compressing the record just encoded: %v", err)
	}
	if got, want := audit.MayTrack(z.Data), audit.MayTrack(m2.Data); got != want {
		t.Fatalf("MayTrack says %v of the compressed record, %v of its JSON", got, want)
	}
	// DecodeIfTracked decodes exactly the bodies MayTrack passes, into
	// the record Decode makes of them.
	for _, m := range []*nats.Msg{z, m2, m1} {
		e := audit.Entry{Seq: 7, Subject: m.Subject, Header: m.Header, Data: m.Data}
		if got, want := e.DecodeIfTracked(), audit.MayTrack(m.Data); got != want {
			t.Fatalf("DecodeIfTracked says %v of %q, MayTrack %v", got, m.Data, want)
		}
		if e.Record == nil && e.Err == nil {
			continue
		}
		d := audit.Entry{Seq: 7, Subject: m.Subject, Header: m.Header, Data: m.Data}
		d.Decode()
		got, _ := json.Marshal(e.Record)
		want, _ := json.Marshal(d.Record)
		if string(got) != string(want) || (e.Err == nil) != (d.Err == nil) {
			t.Fatalf("DecodeIfTracked decoded %s (err %v), Decode %s (err %v)", got, e.Err, want, d.Err)
		}
	}
	return tr.Tracked() > 0, audit.MayTrack(m2.Data), audit.MayTrack(m1.Data)
}

// TestMayTrack: every record that the track record folds in passes the
// pre-filter of the reviewer metrics, in both record versions, and the
// policy's own decisions do not.
func TestMayTrack(t *testing.T) {
	ev := func(event, data string) gated.AuditEvent {
		return gated.AuditEvent{V: 1, Event: event, Tenant: "acme", ProposalID: "p-1", Data: json.RawMessage(data)}
	}
	received := ev(gated.EventReceived, `{"action":"host_restart_service","bytes":10,"sha256":"ab"}`)
	cases := []struct {
		note  string
		evs   []gated.AuditEvent
		folds bool
	}{
		{"reviewed verdict", []gated.AuditEvent{received, ev(gated.EventVerdict,
			`{"v":1,"proposal_id":"p-1","tenant":"acme","outcome":"approved","stage":"review","reviews":[{"plugin":"sop","decision":"approve","latency_ms":3}]}`)}, true},
		{"grant outcome", []gated.AuditEvent{ev(gated.EventGrantOutcome, `{"proposal_id":"p-1","tenant":"acme","status":"failed"}`)}, true},
		{"operator decision", []gated.AuditEvent{ev(gated.EventOperatorDecided, `{"decision":"approve"}`)}, true},
		{"policy's verdict", []gated.AuditEvent{received, ev(gated.EventVerdict,
			`{"v":1,"proposal_id":"p-1","tenant":"acme","outcome":"rejected","stage":"policy","reason":"\"reviews\":[ in a string"}`)}, false},
		{"proposal received", []gated.AuditEvent{received}, false},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			folds, v2, v1 := foldsSomething(t, tc.evs...)
			if folds != tc.folds {
				t.Fatalf("folds %v, want %v", folds, tc.folds)
			}
			if v2 != tc.folds || v1 != tc.folds {
				t.Errorf("MayTrack: version 2 %v, version 1 %v; want %v", v2, v1, tc.folds)
			}
		})
	}
}

// FuzzMayTrack: no record that gated writes and the track record folds
// in is one that MayTrack turns away. The data is encoded as gated's
// engine encodes it (encoding/json), from fuzzed values.
func FuzzMayTrack(f *testing.F) {
	f.Add(uint8(0), "approved", "review", uint8(1), "sop", "approve")
	f.Add(uint8(1), "", "", uint8(0), "", "failed")
	f.Add(uint8(2), "", "", uint8(0), "", "reject")
	f.Add(uint8(0), "rejected", "policy", uint8(0), "", "")
	f.Fuzz(func(t *testing.T, kind uint8, outcome, stage string, reviews uint8, plugin, word string) {
		var event string
		var data any
		switch kind % 3 {
		case 0:
			v := gated.Verdict{V: 1, ProposalID: "p-1", Tenant: "acme", Outcome: gated.Outcome(outcome), Stage: gated.Stage(stage)}
			for range reviews % 4 {
				v.Reviews = append(v.Reviews, gated.Review{Plugin: plugin, Decision: gated.ReviewDecision(word)})
			}
			event, data = gated.EventVerdict, v
		case 1:
			event, data = gated.EventGrantOutcome, map[string]string{"proposal_id": "p-1", "tenant": "acme", "status": word}
		default:
			event, data = gated.EventOperatorDecided, map[string]string{"decision": word, "outcome": outcome}
		}
		raw, err := json.Marshal(data)
		if err != nil {
			t.Skip()
		}
		folds, v2, v1 := foldsSomething(t, gated.AuditEvent{V: 1, Event: event, Tenant: "acme", ProposalID: "p-1", Data: raw})
		if folds && !(v2 && v1) {
			t.Fatalf("a record that counts was turned away: %s %s: version 2 %v, version 1 %v", event, raw, v2, v1)
		}
	})
}

// BenchmarkTrackRecordHeld reports what a track record holds for each
// proposal it keeps one by one (held-B/proposal): serve keeps up to
// 100,000 of them for its reviewer metrics.
func BenchmarkTrackRecordHeld(b *testing.B) {
	const n = 20_000
	records := make([]*audit.Record, n)
	for i := range records {
		records[i] = rec(gated.EventVerdict, fmt.Sprint("proposal-", i), fmt.Sprintf(`{"v":1,"proposal_id":"proposal-%d","tenant":"acme","outcome":"approved","stage":"review",`+
			`"reviews":[{"plugin":"llm","plugin_version":"0.9.1","persona":"security-reviewer","model":"gpt-4o-mini","decision":"approve","latency_ms":%d}]}`, i, i%2000))
	}
	var held float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var t audit.TrackRecord
		for _, r := range records {
			t.Add(r)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(&t)
	}
	b.ReportMetric(held, "held-B/proposal")
}
