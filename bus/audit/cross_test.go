package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/wire"
)

// crossStream is a gated worker (real engine, default policy, no plugins)
// that has decided proposals p1..p6 of tenant acme: read actions approved,
// writes that ask to skip review rejected, other writes blocked.
type crossStream struct {
	g *bustest.Fleet
	// verdicts are the published verdicts of p1..p6, in order.
	verdicts []*gated.Verdict
	// raw are the audit stream's messages when p6 was decided, by
	// sequence (raw[0] is seq 1).
	raw []*jetstream.RawStreamMsg
}

func newCrossStream(t *testing.T) *crossStream {
	t.Helper()
	s := &crossStream{g: bustest.StartFleet(t, nil, bus.Config{})}
	s.verdicts = s.decide(t, "p", 6)
	last := s.verdicts[len(s.verdicts)-1].AuditSeq
	for seq := uint64(1); seq <= last; seq++ {
		m, err := s.g.Resources.Audit.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("reading audit seq %d: %v", seq, err)
		}
		s.raw = append(s.raw, m)
	}
	return s
}

// decide has gated decide n proposals prefix1..prefixN.
func (s *crossStream) decide(t *testing.T, prefix string, n int) []*gated.Verdict {
	t.Helper()
	var out []*gated.Verdict
	for i := 1; i <= n; i++ {
		id := fmt.Sprint(prefix, i)
		var data []byte
		switch i % 3 {
		case 1:
			data = bustest.Proposal(id, "read", "host_list_services", "")
		case 2:
			data = bustest.Proposal(id, "write", "host_restart_service", `,"flags":{"skip_review":true}`)
		default:
			data = bustest.Proposal(id, "write", "host_restart_service", "")
		}
		v := s.g.Propose(t, data)
		if v.AuditSeq == 0 {
			t.Fatalf("verdict of %s names no audit record", id)
		}
		out = append(out, v)
	}
	return out
}

// seq is the audit_seq of p<i>'s verdict.
func (s *crossStream) seq(i int) uint64 { return s.verdicts[i-1].AuditSeq }

// recreate deletes the audit stream and creates it again as gated's
// Setup does, as someone with the server's admin rights can: the stream
// denies deletes and purges, but it can be replaced whole.
func (s *crossStream) recreate(t *testing.T) {
	t.Helper()
	if err := s.g.JS.DeleteStream(t.Context(), audit.Stream); err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(t.Context(), s.g.JS, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s.g.Resources.Audit = res.Audit
}

// republish publishes the record at seq again, exactly as it was stored
// (body and audit headers), and returns its new sequence.
func (s *crossStream) republish(t *testing.T, seq uint64) uint64 {
	t.Helper()
	orig := s.raw[seq-1]
	m := nats.NewMsg(orig.Subject)
	for _, h := range []string{wire.AuditHashHeader, wire.AuditMACHeader, wire.AuditKeyHeader} {
		if v := orig.Header.Get(h); v != "" {
			m.Header.Set(h, v)
		}
	}
	m.Data = orig.Data
	ack, err := s.g.JS.PublishMsg(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// store overwrites the stored verdict under key, as someone with write
// access to the bucket can.
func (s *crossStream) store(t *testing.T, key string, value []byte) {
	t.Helper()
	if _, err := s.g.Resources.Verdicts.Put(t.Context(), key, value); err != nil {
		t.Fatal(err)
	}
}

// storeVerdict stores p<i>'s verdict under key after change.
func (s *crossStream) storeVerdict(t *testing.T, key string, i int, change func(v *gated.Verdict)) {
	t.Helper()
	v := *s.verdicts[i-1]
	change(&v)
	data, err := json.Marshal(&v)
	if err != nil {
		t.Fatal(err)
	}
	s.store(t, key, data)
}

// storeProblem is a problem Verify must report: at seq, of kind, naming
// the proposal id when id is set.
type storeProblem struct {
	seq  uint64
	kind audit.ProblemKind
	id   string
}

func (p storeProblem) String() string { return fmt.Sprintf("{%d %s %s}", p.seq, p.kind, p.id) }

// gotProblems lists rep's problems as storeProblems. A problem that names
// a proposal must say so in its detail too, which is what a reader sees.
func gotProblems(t *testing.T, rep *audit.Report) []storeProblem {
	t.Helper()
	out := []storeProblem{}
	for _, p := range rep.Problems {
		if p.ProposalID != "" && !strings.Contains(p.Detail, p.Tenant+"."+p.ProposalID) {
			t.Errorf("problem %+v: the detail does not name %s.%s", p, p.Tenant, p.ProposalID)
		}
		out = append(out, storeProblem{seq: p.Seq, kind: p.Kind, id: p.ProposalID})
	}
	return out
}

func sortProblems(ps []storeProblem) {
	slices.SortFunc(ps, func(a, b storeProblem) int {
		if a.seq != b.seq {
			return int(a.seq) - int(b.seq)
		}
		if a.kind != b.kind {
			return strings.Compare(string(a.kind), string(b.kind))
		}
		return strings.Compare(a.id, b.id)
	})
}

// TestVerifyCrossChecksTheVerdictStore changes the audit stream or the
// verdict bucket the way someone with admin rights on the server could,
// without anchors, and checks that Verify reports every stored verdict
// whose audit_seq no longer holds that verdict's verdict.decided record.
func TestVerifyCrossChecksTheVerdictStore(t *testing.T) {
	tests := []struct {
		note string
		// tamper changes the stream or the bucket and returns the
		// problems Verify must report, in any order.
		tamper func(t *testing.T, s *crossStream) []storeProblem
	}{
		{
			note: "a cut tail",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.recreate(t)
				for seq := uint64(1); seq <= s.seq(4); seq++ {
					s.republish(t, seq)
				}
				return []storeProblem{{s.seq(5), audit.ProblemRemoved, "p5"}, {s.seq(6), audit.ProblemRemoved, "p6"}}
			},
		},
		{
			note: "a cut tail that gated then wrote past",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.recreate(t)
				for seq := uint64(1); seq <= s.seq(4); seq++ {
					s.republish(t, seq)
				}
				// The next proposals' records take the cut records' sequences.
				later := s.decide(t, "q", 2)
				if later[1].AuditSeq != s.seq(6) {
					t.Fatalf("q2's record is at seq %d, want p6's %d", later[1].AuditSeq, s.seq(6))
				}
				return []storeProblem{{s.seq(5), audit.ProblemModified, "p5"}, {s.seq(6), audit.ProblemModified, "p6"}}
			},
		},
		{
			note: "a stream deleted and created again empty",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.recreate(t)
				var want []storeProblem
				for i := 1; i <= 6; i++ {
					want = append(want, storeProblem{s.seq(i), audit.ProblemRemoved, fmt.Sprint("p", i)})
				}
				return want
			},
		},
		{
			note: "a stream deleted and created again, then filled by gated",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.recreate(t)
				s.decide(t, "q", 3)
				return []storeProblem{
					{s.seq(1), audit.ProblemModified, "p1"}, {s.seq(2), audit.ProblemModified, "p2"}, {s.seq(3), audit.ProblemModified, "p3"},
					{s.seq(4), audit.ProblemRemoved, "p4"}, {s.seq(5), audit.ProblemRemoved, "p5"}, {s.seq(6), audit.ProblemRemoved, "p6"},
				}
			},
		},
		{
			note: "a verdict's record cut and the next published again in its place",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.recreate(t)
				// p4's record (it holds its whole decision) is cut, p5's
				// moves up into its place.
				for seq := uint64(1); seq < s.seq(4); seq++ {
					s.republish(t, seq)
				}
				moved := s.republish(t, s.seq(5))
				return []storeProblem{
					{moved, audit.ProblemRemoved, ""}, // the chain: n jumps
					{s.seq(4), audit.ProblemModified, "p4"},
					{s.seq(5), audit.ProblemReordered, "p5"},
					{s.seq(6), audit.ProblemRemoved, "p6"},
				}
			},
		},
		{
			note: "an outcome flipped in the store",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.storeVerdict(t, "acme.p2", 2, func(v *gated.Verdict) { v.Outcome, v.Approved = gated.OutcomeApproved, true })
				return []storeProblem{{s.seq(2), audit.ProblemModified, "p2"}}
			},
		},
		{
			note: "a proposal digest changed in the store",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.storeVerdict(t, "acme.p2", 2, func(v *gated.Verdict) { v.ProposalSHA256 = hexSHA256([]byte("other")) })
				return []storeProblem{{s.seq(2), audit.ProblemModified, "p2"}}
			},
		},
		{
			note: "an audit_seq that names another proposal's verdict",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.storeVerdict(t, "acme.p2", 2, func(v *gated.Verdict) { v.AuditSeq = s.seq(4) })
				return []storeProblem{{s.seq(4), audit.ProblemReordered, "p2"}}
			},
		},
		{
			note: "an audit_seq that names the record before its own",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				// A decision by the policy alone is one record: the one
				// before it is the previous proposal's.
				s.storeVerdict(t, "acme.p2", 2, func(v *gated.Verdict) { v.AuditSeq-- })
				return []storeProblem{{s.seq(2) - 1, audit.ProblemReordered, "p2"}}
			},
		},
		{
			note: "an audit_seq past the stream's end",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.storeVerdict(t, "acme.p3", 3, func(v *gated.Verdict) { v.AuditSeq = 9999 })
				// Its record is still at its place: the verdict names the
				// wrong one.
				return []storeProblem{{9999, audit.ProblemReordered, "p3"}}
			},
		},
		{
			note: "a verdict stored under another proposal's key",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.storeVerdict(t, "acme.p9", 1, func(*gated.Verdict) {})
				return []storeProblem{{s.seq(1), audit.ProblemModified, "p9"}}
			},
		},
		{
			note: "a verdict without an audit_seq",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.storeVerdict(t, "acme.p4", 4, func(v *gated.Verdict) { v.AuditSeq = 0 })
				return []storeProblem{{0, audit.ProblemModified, "p4"}}
			},
		},
		{
			note: "a stored value that is not a verdict",
			tamper: func(t *testing.T, s *crossStream) []storeProblem {
				s.store(t, "acme.p9", []byte(`{"outcome":"approved"`))
				return []storeProblem{{0, audit.ProblemModified, "p9"}}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			s := newCrossStream(t)
			if rep := verify(t, s.g.JS, audit.VerifyOptions{}); !rep.Clean() {
				t.Fatalf("problems before tampering: %+v", rep.Problems)
			}
			want := tc.tamper(t, s)
			rep := verify(t, s.g.JS, audit.VerifyOptions{})
			got := gotProblems(t, rep)
			sortProblems(got)
			sortProblems(want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
			}
			// One tenant's verify checks that tenant's verdicts.
			one := verify(t, s.g.JS, audit.VerifyOptions{Tenant: "acme"})
			for _, w := range want {
				if w.id != "" && !slices.Contains(gotProblems(t, one), w) {
					t.Errorf("verify --tenant acme does not report %v:\n%+v", w, one.Problems)
				}
			}
		})
	}
}

// TestVerifyLabelsAReplayedRecordReordered appends a copy of an earlier
// verdict.decided record to the stream: the copy is reported reordered,
// nothing is reported removed, and the stored verdict, whose record is
// still at its audit_seq, is not reported.
func TestVerifyLabelsAReplayedRecordReordered(t *testing.T) {
	s := newCrossStream(t)
	replay := s.republish(t, s.seq(2))
	rep := verify(t, s.g.JS, audit.VerifyOptions{})
	got := gotProblems(t, rep)
	if want := []storeProblem{{replay, audit.ProblemReordered, ""}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
	}
}

// TestVerifyTellsExpiredVerdictRecordsFromRemovedOnes purges the head of
// an audit stream whose records expire after an hour: the stored verdicts
// decided just now cannot have lost their records to the limit, so they
// are reported removed; a verdict decided two hours ago is counted as
// expired. The chain alone takes the purge for expiry.
func TestVerifyTellsExpiredVerdictRecordsFromRemovedOnes(t *testing.T) {
	s := newCrossStream(t)
	if err := s.g.JS.DeleteStream(t.Context(), audit.Stream); err != nil {
		t.Fatal(err)
	}
	stream, err := s.g.JS.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: audit.Stream, Subjects: []string{wire.AuditSubjectPrefix + ">"}, MaxAge: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	for seq := range uint64(len(s.raw)) {
		s.republish(t, seq+1)
	}
	if err := stream.Purge(t.Context(), jetstream.WithPurgeSequence(s.seq(3)+1)); err != nil {
		t.Fatal(err)
	}
	s.storeVerdict(t, "acme.p1", 1, func(v *gated.Verdict) { v.DecidedAt = v.DecidedAt.Add(-2 * time.Hour) })

	rep := verify(t, s.g.JS, audit.VerifyOptions{})
	want := []storeProblem{{s.seq(2), audit.ProblemRemoved, "p2"}, {s.seq(3), audit.ProblemRemoved, "p3"}}
	if got := gotProblems(t, rep); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
	}
	if want := (audit.VerdictCheck{Verdicts: 6, Matched: 3, Expired: 1, Problems: 2}); *rep.Verdicts != want {
		t.Fatalf("verdict check %+v, want %+v", *rep.Verdicts, want)
	}
	if skipped := verify(t, s.g.JS, audit.VerifyOptions{SkipVerdicts: true}); !skipped.Clean() || skipped.Verdicts != nil {
		t.Fatalf("the chain alone: problems %+v, verdicts %+v", skipped.Problems, skipped.Verdicts)
	}
}

// TestVerifyListsTheFirstVerdictProblems replaces the stream: every
// stored verdict is wrong, the first MaxVerdictProblems are listed and
// the rest counted, and the report is not clean.
func TestVerifyListsTheFirstVerdictProblems(t *testing.T) {
	s := newCrossStream(t)
	s.recreate(t)
	rep := verify(t, s.g.JS, audit.VerifyOptions{MaxVerdictProblems: 2})
	if len(rep.Problems) != 2 || rep.Clean() {
		t.Fatalf("listed %d problems (clean %v), want 2:\n%+v", len(rep.Problems), rep.Clean(), rep.Problems)
	}
	if want := (audit.VerdictCheck{Verdicts: 6, Problems: 6, Unlisted: 4}); *rep.Verdicts != want {
		t.Fatalf("verdict check %+v, want %+v", *rep.Verdicts, want)
	}
}

// TestVerifyDetectsATailDeletedFromTheStream deletes the last records of
// a stream that allows deletes, with no verdict stored: the stream still
// counts its last sequence, so verify reports the sequences missing at
// its end. One tenant's verify cannot tell them from other tenants'.
func TestVerifyDetectsATailDeletedFromTheStream(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: audit.Stream, Subjects: []string{wire.AuditSubjectPrefix + ">"},
	})
	if err != nil {
		t.Fatal(err)
	}
	a := natstest.AuditWriter(t, js, audit.Config{Key: testKey})
	for i := range 5 {
		if _, err := a.Trail().Seal(t.Context(), verdictEvent("acme", fmt.Sprint("p", i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []uint64{4, 5} {
		if err := stream.DeleteMsg(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
	}
	rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}})
	if got, want := gotProblems(t, rep), []storeProblem{{4, audit.ProblemRemoved, ""}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
	}
	if !strings.Contains(rep.Problems[0].Detail, "4-5") {
		t.Errorf("the detail does not name sequences 4-5: %s", rep.Problems[0].Detail)
	}
}

// TestVerifyChecksGrantedVerdicts: approved verdicts carry a signed grant
// that their version-2 records fold to {gid, kid, exp}. Verify matches
// each stored verdict with its record, and still reports a stored
// verdict whose reason changed or whose grant is another proposal's.
func TestVerifyChecksGrantedVerdicts(t *testing.T) {
	tests := []struct {
		note   string
		tamper func(v *gated.Verdict, other *gated.Verdict)
	}{
		{"untouched", nil},
		{"a reason changed", func(v, _ *gated.Verdict) { v.Reason += " (edited)" }},
		{"another proposal's grant", func(v, other *gated.Verdict) { v.Grant = other.Grant }},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			g, c := bustest.StartGrantingFleet(t)
			var verdicts []*gated.Verdict
			for i := 1; i <= 4; i++ {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				v, err := c.ProposeRaw(ctx, bustest.Proposal(fmt.Sprint("g", i), "read", "host_list_services", ""))
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if v.Outcome != gated.OutcomeApproved || v.Grant == "" {
					t.Fatalf("verdict of g%d: %s, grant %q; want approved with a grant", i, v.Outcome, v.Grant)
				}
				verdicts = append(verdicts, v)
			}
			rep := verify(t, g.JS, audit.VerifyOptions{})
			if !rep.Clean() || rep.Verdicts == nil || rep.Verdicts.Matched != 4 {
				t.Fatalf("before tampering: problems %+v, verdict check %+v; want 4 matched", rep.Problems, rep.Verdicts)
			}
			if tc.tamper == nil {
				return
			}
			v := *verdicts[1]
			tc.tamper(&v, verdicts[2])
			data, err := json.Marshal(&v)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.Resources.Verdicts.Put(t.Context(), "acme.g2", data); err != nil {
				t.Fatal(err)
			}
			rep = verify(t, g.JS, audit.VerifyOptions{})
			got := gotProblems(t, rep)
			if want := (storeProblem{verdicts[1].AuditSeq, audit.ProblemModified, "g2"}); fmt.Sprint(got) != fmt.Sprint([]storeProblem{want}) {
				t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
			}
		})
	}
}
