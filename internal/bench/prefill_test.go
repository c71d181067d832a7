package bench

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine/wire"
)

// TestPrefillWritesWhatGatedWrites captures the trails gated wrote for a
// denied and a read proposal, copies them under new ids, and checks that
// the copy is a history gated itself could have written: every tenant's
// chain verifies with each stored verdict naming its record, the verdicts
// and the target's history read back through gated's store, and gated
// goes on deciding and chaining after it.
func TestPrefillWritesWhatGatedWrites(t *testing.T) {
	g := bustest.StartGated(t, nil, bus.Config{})
	ctx := t.Context()
	since := time.Now().Add(-time.Second)
	warm := Proposals{Tenant: "acme", Nonce: "tw"}
	fleet, err := NewGatedFleet(g.NC, warm, map[Path]int{PathDenied: 2, PathRead: 2}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	for _, p := range []Path{PathDenied, PathRead} {
		if _, err := fleet.Send(ctx, p, 0); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	var trails []*Trail
	for _, p := range []Path{PathDenied, PathRead} {
		tr, err := CaptureTrail(ctx, g.JS, warm, p, 0, since)
		if err != nil {
			t.Fatal(err)
		}
		trails = append(trails, tr)
	}
	for _, tr := range trails {
		// A policy decision stores its verdict alone: reads and refusals
		// leave no target history and take no review claim.
		if len(tr.Bucket) != 1 {
			t.Fatalf("%s: %d bucket messages, want its verdict", tr.Path, len(tr.Bucket))
		}
	}

	const n = 301
	gen := Proposals{Tenant: "acme", Nonce: "tp"}
	var done atomic.Int64
	res, err := Prefill(ctx, g.JS, PrefillOptions{Proposals: n, Gen: gen, Trails: trails, InFlight: 16, Done: &done})
	if err != nil {
		t.Fatal(err)
	}
	// A policy decision's trail is one record, whatever its events.
	wantRecords := n
	if res.Proposals != n || done.Load() != n || res.Records != wantRecords || res.BucketMsgs != n {
		t.Fatalf("prefill wrote %+v (progress %d), want %d proposals, %d records, %d bucket messages", res, done.Load(), n, wantRecords, n)
	}

	// gated goes on after the copy: its chain head moved under it.
	if _, err := fleet.Send(ctx, PathRead, 1); err != nil {
		t.Fatalf("a read after the prefill: %v", err)
	}

	rep, err := audit.Verify(ctx, g.JS, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("audit verify after the prefill: %d problems, first %+v", len(rep.Problems), rep.Problems[0])
	}
	// A decision by the policy alone is one record: the three gated
	// decided and the copies.
	if want := uint64(3 + n); rep.Records < want {
		t.Errorf("audit verify read %d records, want at least %d", rep.Records, want)
	}

	kv, err := g.JS.KeyValue(ctx, wire.VerdictBucket)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(kv)
	for _, tc := range []struct {
		note string
		p    Path
		i    int
	}{
		{"denied", PathDenied, 0},
		{"read", PathRead, 1},
		{"last", PathDenied, n - 1},
	} {
		t.Run(tc.note, func(t *testing.T) {
			pr := gen.New(tc.p, tc.i)
			v, err := st.Get(ctx, "acme", pr.ID)
			if err != nil {
				t.Fatal(err)
			}
			outcome, stage := tc.p.Expect()
			if v.ProposalID != pr.ID || v.Outcome != outcome || v.Stage != stage || v.AuditSeq == 0 {
				t.Fatalf("stored verdict %s: %s at %s, audit_seq %d", v.ProposalID, v.Outcome, v.Stage, v.AuditSeq)
			}
		})
	}
}

func TestBucketHeaderKeepsWhatAMessageIs(t *testing.T) {
	h := map[string][]string{
		"KV-Operation": {"PURGE"}, "Nats-Rollup": {"sub"}, "Nats-Expected-Last-Subject-Sequence": {"42"},
		"Nats-Msg-Id": {"x"}, "Nats-Stream": {"KV_GATED_VERDICTS"}, "Nats-Sequence": {"9"}, "Trace": {"t"},
	}
	got := bucketHeader(h)
	for _, k := range []string{"KV-Operation", "Nats-Rollup", "Trace"} {
		if got.Get(k) == "" {
			t.Errorf("%s dropped", k)
		}
	}
	for _, k := range []string{"Nats-Expected-Last-Subject-Sequence", "Nats-Msg-Id", "Nats-Stream", "Nats-Sequence"} {
		if got.Get(k) != "" {
			t.Errorf("%s kept", k)
		}
	}
}

func TestPrefillNeedsTheStreams(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tr := &Trail{Path: PathRead, ID: "x", Events: []gated.AuditEvent{{V: 1, Event: gated.EventVerdict, Tenant: "acme"}}}
	_, err := Prefill(ctx, js, PrefillOptions{Proposals: 1, Gen: Proposals{Tenant: "acme", Nonce: "n"}, Trails: []*Trail{tr}})
	if err == nil {
		t.Fatal("prefill without gated's streams succeeded")
	}
	if _, err := js.Stream(ctx, audit.Stream); err != jetstream.ErrStreamNotFound {
		t.Fatalf("prefill created the audit stream: %v", err)
	}
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		note, in string
		want     []int
		err      string
	}{
		{note: "curve", in: "0,100000,1000000", want: []int{0, 100000, 1000000}},
		{note: "spaces", in: " 5 , 0", want: []int{5, 0}},
		{note: "empty", in: "", err: `"" is not a whole number`},
		{note: "empty member", in: "1,,2", err: `"" is not a whole number`},
		{note: "negative", in: "-1", err: "not a whole number"},
		{note: "too large", in: "10000001", err: "not a whole number"},
		{note: "plus sign", in: "+5", err: "not a whole number"},
		{note: "leading zero", in: "05", err: "not a whole number"},
		{note: "twice", in: "0,5,0", err: "given twice"},
		{note: "too many", in: "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", err: "more than 16"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			got, err := ParseSizes(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseSizes(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseSizes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func FuzzParseSizes(f *testing.F) {
	for _, s := range []string{"0,100000,1000000", "", "1,,2", "-1", "05", "0,5,0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sizes, err := ParseSizes(s)
		if err != nil {
			return
		}
		if len(sizes) == 0 || len(sizes) > 16 {
			t.Fatalf("ParseSizes(%q) = %d sizes", s, len(sizes))
		}
		seen := map[int]bool{}
		for _, n := range sizes {
			if n < 0 || n > MaxPrefill || seen[n] {
				t.Fatalf("ParseSizes(%q) = %v", s, sizes)
			}
			seen[n] = true
		}
	})
}

// TestPrefillFailsWhenTheBucketRefuses checks that a bucket write the
// server does not store fails the prefill instead of being counted.
func TestPrefillFailsWhenTheBucketRefuses(t *testing.T) {
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	ctx := t.Context()
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, wire.VerdictBucket); err != nil {
		t.Fatal(err)
	}
	tr := &Trail{Path: PathRead, ID: "x-read-0", Events: []gated.AuditEvent{
		{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "x-read-0", At: time.Now()},
	}, Bucket: []BucketMsg{{Key: "acme.x-read-0", Data: []byte(`{"v":1,"proposal_id":"x-read-0","tenant":"acme"}`)}}}
	res, err := Prefill(ctx, js, PrefillOptions{Proposals: 20, Gen: Proposals{Tenant: "acme", Nonce: "n"}, Trails: []*Trail{tr}, InFlight: 4})
	if err == nil || !strings.Contains(err.Error(), "writing bucket key") {
		t.Fatalf("prefill into a missing bucket: %+v, %v; want an error writing a bucket key", res, err)
	}
}
