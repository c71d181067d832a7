package audit_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

// chainWriter publishes records of tenant acme straight to the stream,
// each linked to the one before, for a test to slip tampered ones in.
type chainWriter struct {
	js   jetstream.JetStream
	res  *bus.Resources
	n    uint64
	prev string
}

func newChainWriter(t *testing.T) *chainWriter {
	t.Helper()
	res, js := setupAudit(t)
	return &chainWriter{js: js, res: res}
}

// next builds acme's next record of ev, linked and MACed under key, and
// moves the chain on as if it were published as built.
func (w *chainWriter) next(t *testing.T, ev gated.AuditEvent, key []byte) *nats.Msg {
	t.Helper()
	w.n++
	m := auditMsg(t, ev, audit.Chain{N: w.n, Prev: w.prev}, key)
	w.prev = hexSHA256(m.Data)
	return m
}

// publish writes msgs in order with one pending acknowledgement each, and
// returns the sequence of the first.
func (w *chainWriter) publish(t *testing.T, msgs ...*nats.Msg) uint64 {
	t.Helper()
	var futs []jetstream.PubAckFuture
	for _, m := range msgs {
		f, err := w.js.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	var first uint64
	for i, f := range futs {
		select {
		case ack := <-f.Ok():
			if i == 0 {
				first = ack.Sequence
			}
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(time.Minute):
			t.Fatal("no acknowledgement within a minute")
		}
	}
	return first
}

func receivedEvent(id string) gated.AuditEvent {
	return gated.AuditEvent{V: 1, Event: gated.EventReceived, Tenant: "acme", ProposalID: id,
		At: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC), Data: []byte(`{"action":"host_list_services","operator":"alice","delivery":1}`)}
}

// TestVerifyReportsTamperingInEveryBatch: records are checked in batches
// on several goroutines; a tampered record anywhere in a long stream is
// reported at its own sequence, and the problems come in stream order.
func TestVerifyReportsTamperingInEveryBatch(t *testing.T) {
	otherKey := []byte("fedcba9876543210fedcba9876543210")
	const total = 2000
	altered, otherMAC, madeUp := 300, 777, 1500 // 1-based positions
	w := newChainWriter(t)
	var msgs []*nats.Msg
	for i := 1; i <= total; i++ {
		ev := receivedEvent(fmt.Sprint("p", i))
		switch i {
		case altered:
			m := w.next(t, ev, testKey)
			m.Data = bytes.Replace(m.Data, []byte(`"alice"`), []byte(`"mallory"`), 1)
			msgs = append(msgs, m)
		case otherMAC:
			m := w.next(t, ev, otherKey)
			msgs = append(msgs, m)
		case madeUp:
			m := w.next(t, ev, testKey)
			m.Header.Set(wire.AuditMACHeader, hexSHA256([]byte("made up")))
			msgs = append(msgs, m)
		default:
			msgs = append(msgs, w.next(t, ev, testKey))
		}
	}
	first := w.publish(t, msgs...)
	seq := func(pos int) uint64 { return first + uint64(pos) - 1 }
	rep := verify(t, w.js, audit.VerifyOptions{Keys: [][]byte{testKey}, SkipVerdicts: true})
	want := []wantProblem{
		{seq(altered), audit.ProblemModified},     // its body
		{seq(altered + 1), audit.ProblemModified}, // the link to it
		{seq(otherMAC), audit.ProblemForged},
		{seq(madeUp), audit.ProblemForged},
	}
	if got := problemsOf(rep); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
	}
	if rep.Messages != total || rep.Records != total || len(rep.Heads) != 1 || rep.Heads[0].N != total {
		t.Fatalf("report: %d messages, %d records, heads %+v", rep.Messages, rep.Records, rep.Heads)
	}
}

// verdictDoc is the verdict of acme's proposal id as the engine encodes
// it, with audit_seq seq.
func verdictDoc(t *testing.T, id string, seq uint64) []byte {
	t.Helper()
	v := &gated.Verdict{V: 1, ProposalID: id, Tenant: "acme", Action: "host_list_services", Kind: gated.KindAction,
		Outcome: gated.OutcomeApproved, Approved: true, Stage: gated.StagePolicy, Reason: "read actions change nothing",
		DecidedAt: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC), LatencyMS: 0.5, AuditSeq: seq,
		Policy: &gated.PolicyRef{Denies: []gated.Deny{}, Revision: "r1", EvalUS: 40}}
	doc, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// verdictRecordEvent is the verdict.decided event of acme's proposal id,
// its data as the engine writes it: the proposal's members, then the
// verdict with audit_seq 0.
func verdictRecordEvent(t *testing.T, id string) gated.AuditEvent {
	t.Helper()
	doc := verdictDoc(t, id, 0)
	data := append([]byte(`{"operator":"alice","delivery":1,"policy_eval_us":40,`), doc[1:]...)
	return gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: id,
		At: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC), Data: data}
}

// TestVerifyChecksVerdictsWhateverTheWindow: the verdict check keeps a
// bounded window of records and stored verdicts; stored verdicts written
// in another order than their records, some of whose records have left
// the window, some spelt otherwise than the record, are checked all the
// same, and the same problems are found with a window of a few records as
// with the default one.
func TestVerifyChecksVerdictsWhateverTheWindow(t *testing.T) {
	const total = 300
	w := newChainWriter(t)
	var msgs []*nats.Msg
	for i := 1; i <= total; i++ {
		id := fmt.Sprint("p", i)
		msgs = append(msgs, w.next(t, receivedEvent(id), testKey), w.next(t, verdictRecordEvent(t, id), testKey))
	}
	first := w.publish(t, msgs...)
	seqOf := func(i int) uint64 { return first + 2*uint64(i) - 1 } // p<i>'s verdict record
	order := rand.New(rand.NewPCG(1, 2)).Perm(total)
	for _, k := range order {
		i := k + 1
		id := fmt.Sprint("p", i)
		doc := verdictDoc(t, id, seqOf(i))
		switch i {
		case 10: // the outcome changed in the bucket
			doc = bytes.Replace(doc, []byte(`"approved":true`), []byte(`"approved":false`), 1)
		case 20: // names the record of another proposal
			doc = verdictDoc(t, id, seqOf(21))
		case 30: // names a sequence past the stream's end
			doc = verdictDoc(t, id, seqOf(total)+100)
		case 40: // names the proposal's received record
			doc = verdictDoc(t, id, seqOf(i)-1)
		case 50, 60: // spelt otherwise: the same verdict
			var v map[string]any
			if err := json.Unmarshal(doc, &v); err != nil {
				t.Fatal(err)
			}
			if doc, err := json.MarshalIndent(v, "", "  "); err == nil {
				if _, err := w.res.Verdicts.Put(t.Context(), "acme."+id, doc); err != nil {
					t.Fatal(err)
				}
				continue
			}
		}
		if _, err := w.res.Verdicts.Put(t.Context(), "acme."+id, doc); err != nil {
			t.Fatal(err)
		}
	}
	// A stored verdict whose record is in the stream at another sequence
	// than its audit_seq is a reordering.
	want := []storeProblem{
		{seqOf(10), audit.ProblemModified, "p10"},
		{seqOf(21), audit.ProblemReordered, "p20"},
		{seqOf(40) - 1, audit.ProblemReordered, "p40"},
		{seqOf(total) + 100, audit.ProblemReordered, "p30"},
	}
	sortProblems(want)
	for _, window := range []struct {
		note            string
		recent, waiting int
	}{
		{note: "default window"},
		{note: "a window of a few records", recent: 4, waiting: 2},
	} {
		t.Run(window.note, func(t *testing.T) {
			if window.recent > 0 {
				audit.SetVerdictWindow(t, window.recent, window.waiting)
			}
			rep := verify(t, w.js, audit.VerifyOptions{Keys: [][]byte{testKey}})
			got := gotProblems(t, rep)
			sortProblems(got)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
			}
			if c := rep.Verdicts; c.Verdicts != total || c.Matched != total-4 || c.Problems != 4 {
				t.Fatalf("verdict check %+v, want %d verdicts, %d matched, 4 problems", *c, total, total-4)
			}
			for _, p := range rep.Problems {
				if p.ProposalID == "p20" && !strings.Contains(p.Detail, "acme.p21") {
					t.Errorf("p20's problem does not name the record it found: %s", p.Detail)
				}
			}
		})
	}
}

// TestVerifyReadsCraftedBodiesAsTheFullDecoder: bodies written so that a
// reader of the first member, of a key's spelling, or of the last chain
// member anywhere in the body would find a good link, are read as
// encoding/json reads them, and the bad link that reading finds is
// reported.
func TestVerifyReadsCraftedBodiesAsTheFullDecoder(t *testing.T) {
	tests := []struct {
		note string
		// body is record 2's body given record 1's hash.
		body func(prev string) string
		want audit.ProblemKind
	}{
		{
			note: "a second chain member",
			body: func(prev string) string {
				return `{"v":1,"event":"proposal.received","tenant":"acme","at":"2026-11-01T09:00:00Z","chain":{"n":2,"prev":"` + prev + `"},"chain":{"n":5,"prev":"` + prev + `"}}`
			},
			want: audit.ProblemRemoved,
		},
		{
			note: "a chain member spelt with an escape",
			body: func(prev string) string {
				return `{"v":1,"event":"proposal.received","tenant":"acme","at":"2026-11-01T09:00:00Z","chain":{"n":2,"prev":"` + prev + `"},"ch\u0061in":{"n":5,"prev":"` + prev + `"}}`
			},
			want: audit.ProblemRemoved,
		},
		{
			note: "a chain member in upper case",
			body: func(prev string) string {
				return `{"v":1,"event":"proposal.received","tenant":"acme","at":"2026-11-01T09:00:00Z","chain":{"n":2,"prev":"` + prev + `"},"CHAIN":{"n":5,"prev":"` + prev + `"}}`
			},
			want: audit.ProblemRemoved,
		},
		{
			note: "a good link inside data, a bad one outside",
			body: func(prev string) string {
				return `{"v":1,"event":"proposal.received","tenant":"acme","at":"2026-11-01T09:00:00Z","chain":{"n":5,"prev":"` + prev + `"},"data":{"x":1,"chain":{"n":2,"prev":"` + prev + `"}}}`
			},
			want: audit.ProblemRemoved,
		},
		{
			note: "a second n in the chain",
			body: func(prev string) string {
				return `{"v":1,"event":"proposal.received","tenant":"acme","at":"2026-11-01T09:00:00Z","chain":{"n":2,"prev":"` + prev + `","n":5}}`
			},
			want: audit.ProblemRemoved,
		},
		{
			note: "a version written as a fraction",
			body: func(prev string) string {
				return `{"v":1.0,"event":"proposal.received","tenant":"acme","at":"2026-11-01T09:00:00Z","chain":{"n":2,"prev":"` + prev + `"}}`
			},
			want: audit.ProblemForged,
		},
		{
			note: "a member gated does not write",
			body: func(prev string) string {
				return `{"v":1,"event":"proposal.received","tenant":"acme","at":"2026-11-01T09:00:00Z","extra":true,"chain":{"n":2,"prev":"` + prev + `"}}`
			},
			want: audit.ProblemForged,
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			w := newChainWriter(t)
			one := w.next(t, receivedEvent("p1"), nil)
			two := nats.NewMsg(wire.AuditSubject("acme", gated.EventReceived))
			two.Data = []byte(tc.body(w.prev))
			two.Header.Set(wire.AuditHashHeader, hexSHA256(two.Data))
			first := w.publish(t, one, two)
			rep := verify(t, w.js, audit.VerifyOptions{SkipVerdicts: true})
			want := []wantProblem{{first + 1, tc.want}}
			if got := problemsOf(rep); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
			}
		})
	}
}
