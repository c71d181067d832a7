package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
)

// refusals collects what a store reports through its corrupt-record hook.
type refusals struct {
	mu   sync.Mutex
	errs []*store.RecordError
}

func (r *refusals) hook(_ context.Context, e *store.RecordError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, e)
}

func (r *refusals) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	for _, e := range r.errs {
		keys = append(keys, e.Key)
	}
	return keys
}

// storeWithRefusals sets gated's objects up on a fresh server and returns
// the raw bucket and a store over it that reports its refusals.
func storeWithRefusals(t *testing.T) (jetstream.KeyValue, *store.Verdicts, *refusals) {
	t.Helper()
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &refusals{}
	return res.Verdicts, store.New(res.Verdicts, store.WithCorruptRecordHook(r.hook)), r
}

// pubAck is what JetStream stores when a client names a key of the
// bucket as the reply subject of its publish.
const pubAck = `{"stream":"GATED_PROPOSALS","seq":7}`

// wantRefused checks that err is the refusal of key, reported once.
func wantRefused(t *testing.T, err error, r *refusals, key string) {
	t.Helper()
	var re *store.RecordError
	if !errors.Is(err, gated.ErrCorruptRecord) || !errors.As(err, &re) || re.Key != key {
		t.Fatalf("error %v, want a *store.RecordError for %s wrapping gated.ErrCorruptRecord", err, key)
	}
	if got := r.keys(); len(got) != 1 || got[0] != key {
		t.Fatalf("hook told of %v, want [%s]", got, key)
	}
}

func approval(tenant, id string) *gated.Verdict {
	return &gated.Verdict{V: 1, ProposalID: id, Tenant: tenant, Action: "host_list_services", Kind: gated.KindAction,
		Outcome: gated.OutcomeApproved, Approved: true, Stage: gated.StagePolicy, Reason: "ok", DecidedAt: time.Now().UTC()}
}

// A stored verdict is checked against its key: an entry that does not
// decode, or is the verdict of another key, is refused, never replayed.
func TestStoredVerdictMustMatchItsKey(t *testing.T) {
	other, _ := approval("globex", "p1").JSON()
	for _, tc := range []struct {
		note  string
		value string
	}{
		{note: "publish acknowledgement", value: pubAck},
		{note: "not JSON", value: "junk"},
		{note: "another tenant's verdict", value: string(other)},
		{note: "unknown outcome", value: `{"v":1,"proposal_id":"p1","tenant":"acme","outcome":"yes","approved":true}`},
		{note: "approved without the outcome", value: `{"v":1,"proposal_id":"p1","tenant":"acme","outcome":"rejected","approved":true}`},
		{note: "malformed digest", value: `{"v":1,"proposal_id":"p1","tenant":"acme","outcome":"approved","approved":true,"proposal_sha256":"zz"}`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			kv, store, r := storeWithRefusals(t)
			ctx := t.Context()
			if _, err := kv.Put(ctx, "acme.p1", []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			v, err := store.Get(ctx, "acme", "p1")
			if v != nil {
				t.Fatalf("Get returned %+v", v)
			}
			wantRefused(t, err, r, "acme.p1")

			// The proposal's own verdict replaces the entry.
			mine := approval("acme", "p1")
			if got, err := store.Create(ctx, mine); err != nil || got != mine {
				t.Fatalf("Create over the refused entry: %v, %+v", err, got)
			}
			got, err := store.Get(ctx, "acme", "p1")
			if err != nil || got.Tenant != "acme" || got.ProposalID != "p1" || got.Outcome != gated.OutcomeApproved {
				t.Fatalf("Get after Create: %v, %+v", err, got)
			}
			// A verdict of gated's is never replaced.
			if _, err := store.Create(ctx, approval("acme", "p1")); !errors.Is(err, gated.ErrExists) {
				t.Fatalf("second Create: %v, want gated.ErrExists", err)
			}
		})
	}
}

// Await skips an entry that is not the awaited verdict and returns the
// verdict stored after it.
func TestAwaitSkipsARefusedVerdict(t *testing.T) {
	kv, store, r := storeWithRefusals(t)
	ctx := t.Context()
	if _, err := kv.Put(ctx, "acme.p1", []byte(pubAck)); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		v, err := store.Await(ctx, "acme", "p1")
		if err == nil && (v.ProposalID != "p1" || v.Tenant != "acme") {
			err = errors.New("awaited the wrong verdict")
		}
		got <- err
	}()
	// Once the refusal is reported the watch has read the junk entry.
	for deadline := time.Now().Add(10 * time.Second); len(r.keys()) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the watch never reported the junk entry")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := store.Create(ctx, approval("acme", "p1")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// A run record that is not the run's is an error: the policy must not
// take it for an open run with no rounds.
func TestStoredRunRecordMustMatchItsKey(t *testing.T) {
	for _, tc := range []struct {
		note  string
		value string
	}{
		{note: "publish acknowledgement", value: pubAck},
		{note: "not JSON", value: "[1,"},
		{note: "another run's record", value: `{"tenant":"acme","run_id":"run-2","rounds":[]}`},
		{note: "another tenant's record", value: `{"tenant":"globex","run_id":"run-1","rounds":[]}`},
		{note: "round without a proposal", value: `{"tenant":"acme","run_id":"run-1","rounds":[{"round":1,"outcome":"rejected"}]}`},
		{note: "unknown state", value: `{"tenant":"acme","run_id":"run-1","rounds":[],"closed":"reopened"}`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			kv, store, r := storeWithRefusals(t)
			ctx := t.Context()
			if _, err := kv.Put(ctx, "acme.runs.run-1", []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			rec, err := store.RunRecord(ctx, "acme", "run-1")
			if rec != nil {
				t.Fatalf("RunRecord returned %+v", rec)
			}
			wantRefused(t, err, r, "acme.runs.run-1")
			// Nor is a round recorded on top of it.
			v := approval("acme", "run-1-r1")
			v.Kind, v.Run = gated.KindRun, &gated.RunVerdict{RunID: "run-1", Round: 1, MaxRounds: 3}
			if _, err := store.Create(ctx, v); !errors.Is(err, gated.ErrCorruptRecord) {
				t.Fatalf("Create of a round of the run: %v, want gated.ErrCorruptRecord", err)
			}
			e, err := kv.Get(ctx, "acme.runs.run-1")
			if err != nil || string(e.Value()) != tc.value {
				t.Fatalf("the refused record was changed: %v %s", err, e.Value())
			}
		})
	}
}

// A target history holds approvals of the tenant on that target only; any
// other entry makes the history an error, not an empty history.
func TestStoredTargetHistoryMustMatchItsKey(t *testing.T) {
	for _, tc := range []struct {
		note  string
		value string
	}{
		{note: "publish acknowledgement", value: pubAck},
		{note: "null", value: "null"},
		{note: "another target's approval", value: `[{"v":1,"proposal_id":"p0","tenant":"acme","outcome":"approved","approved":true,"target_key":"db-1","decided_at":"2026-01-01T00:00:00Z"}]`},
		{note: "another tenant's approval", value: `[{"v":1,"proposal_id":"p0","tenant":"globex","outcome":"approved","approved":true,"target_key":"web-1","decided_at":"2026-01-01T00:00:00Z"}]`},
		{note: "a rejection", value: `[{"v":1,"proposal_id":"p0","tenant":"acme","outcome":"rejected","target_key":"web-1","decided_at":"2026-01-01T00:00:00Z"}]`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			kv, store, r := storeWithRefusals(t)
			ctx := t.Context()
			if _, err := kv.Put(ctx, "acme.targets.web-1", []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			list, err := store.Recent(ctx, "acme", "web-1")
			if list.Verdicts != nil || list.Revision != 0 {
				t.Fatalf("Recent returned %+v", list)
			}
			wantRefused(t, err, r, "acme.targets.web-1")
		})
	}
}

// A claim names its proposal; one that does not, or does not decode, is
// no one's: it is reported and taken over.
func TestStoredClaimMustMatchItsKey(t *testing.T) {
	for _, tc := range []struct {
		note  string
		value string
	}{
		{note: "publish acknowledgement", value: pubAck},
		{note: "another proposal's claim", value: `{"tenant":"acme","proposal_id":"p2","holder":"seq:9","until":"2999-01-01T00:00:00Z"}`},
		{note: "a claim naming no proposal", value: `{"holder":"seq:9","until":"2999-01-01T00:00:00Z"}`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			kv, store, r := storeWithRefusals(t)
			ctx := t.Context()
			if _, err := kv.Put(ctx, "acme.claims.p1", []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			mine := engine.Claim{Holder: "seq:1", Until: time.Now().Add(time.Minute).UTC(), Delivery: 1}
			got, err := store.Claim(ctx, "acme", "p1", mine)
			if err != nil || got.Holder != "seq:1" {
				t.Fatalf("Claim over the refused entry: %v, %+v", err, got)
			}
			if keys := r.keys(); len(keys) != 1 || keys[0] != "acme.claims.p1" {
				t.Fatalf("hook told of %v, want [acme.claims.p1]", keys)
			}
			// The claim now held is gated's: another holder waits.
			other := engine.Claim{Holder: "seq:2", Until: time.Now().Add(time.Minute).UTC(), Delivery: 1}
			if _, err := store.Claim(ctx, "acme", "p1", other); !errors.Is(err, gated.ErrClaimed) {
				t.Fatalf("a second holder's claim: %v, want gated.ErrClaimed", err)
			}
		})
	}
}
