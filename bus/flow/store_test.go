package flow_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/flow"
	"github.com/gated/gated/internal/natstest"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func executed(id, action string, at time.Time, labels ...string) gated.ExecutedAction {
	return gated.ExecutedAction{ProposalID: id, Action: action, Labels: labels, At: at}
}

// stores returns n Stores over one bucket, each on a connection of its
// own, as n gated processes have them, and the bucket.
func stores(t *testing.T, n int) ([]*flow.Store, jetstream.KeyValue) {
	t.Helper()
	srv := natstest.Server(t)
	var out []*flow.Store
	var kv jetstream.KeyValue
	for range n {
		_, js := natstest.Connect(t, srv)
		var err error
		if kv, err = flow.Setup(t.Context(), js, 1); err != nil {
			t.Fatal(err)
		}
		out = append(out, flow.New(kv))
	}
	return out, kv
}

// TestRecordTwoWriters: two processes recording the same agent's actions
// at once lose none of them.
func TestRecordTwoWriters(t *testing.T) {
	ss, _ := stores(t, 2)
	const each = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for w, s := range ss {
		wg.Go(func() {
			for i := range each {
				a := executed(fmt.Sprintf("w%d-%d", w, i), "read_secret", t0.Add(time.Duration(i)*time.Millisecond), "secret")
				if err := s.Record(t.Context(), "acme", "agent-1", a, time.Hour, flow.MaxRecent); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, err := ss[1].Session(t.Context(), "acme", "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Recent) != 2*each {
		t.Fatalf("the state holds %d actions, want the %d both writers recorded", len(st.Recent), 2*each)
	}
	if !slices.Equal(st.Labels, []string{"secret"}) || !st.Since.Equal(t0) {
		t.Errorf("labels %q since %s", st.Labels, st.Since)
	}
}

// TestRecordKeepsTheWindowAndTheBound: an action drops those a window or
// more older, the newest max stay, and a proposal counts once.
func TestRecordKeepsTheWindowAndTheBound(t *testing.T) {
	ss, _ := stores(t, 1)
	s := ss[0]
	rec := func(a gated.ExecutedAction, max int) {
		t.Helper()
		if err := s.Record(t.Context(), "acme", "a", a, time.Hour, max); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []string {
		t.Helper()
		st, err := s.Session(t.Context(), "acme", "a")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range st.Recent {
			out = append(out, a.ProposalID)
		}
		return out
	}
	rec(executed("old", "read_secret", t0, "secret"), 8)
	rec(executed("p1", "fetch_page", t0.Add(30*time.Minute), "untrusted"), 8)
	rec(executed("p1", "fetch_page", t0.Add(31*time.Minute), "untrusted"), 8)
	if got := ids(); !slices.Equal(got, []string{"old", "p1"}) {
		t.Fatalf("recent = %q, want old and p1 once", got)
	}
	rec(executed("p2", "fetch_page", t0.Add(time.Hour), "untrusted"), 8)
	if got := ids(); !slices.Equal(got, []string{"p1", "p2"}) {
		t.Fatalf("recent = %q, want old dropped an hour on", got)
	}
	rec(executed("p3", "fetch_page", t0.Add(61*time.Minute), "untrusted"), 2)
	if got := ids(); !slices.Equal(got, []string{"p2", "p3"}) {
		t.Fatalf("recent = %q, want the newest two", got)
	}
}

// TestStateIsPerTenantAndAgent: another agent, or the same agent name in
// another tenant, sees nothing of an agent's state.
func TestStateIsPerTenantAndAgent(t *testing.T) {
	ss, _ := stores(t, 1)
	s := ss[0]
	if err := s.Record(t.Context(), "acme", "agent 1/é", executed("p1", "read_secret", t0, "secret"), time.Hour, 8); err != nil {
		t.Fatal(err)
	}
	for _, who := range [][2]string{{"acme", "agent-2"}, {"globex", "agent 1/é"}, {"acme", ""}} {
		st, err := s.Session(t.Context(), who[0], who[1])
		if err != nil || len(st.Recent) != 0 || len(st.Labels) != 0 {
			t.Errorf("%q sees %+v, %v", who, st, err)
		}
	}
	st, err := s.Session(t.Context(), "acme", "agent 1/é")
	if err != nil || len(st.Recent) != 1 {
		t.Fatalf("the agent's own state: %+v, %v", st, err)
	}
}

// TestCorruptRecordFailsClosed: a record that does not decode is an
// error to read and to record on, is not replaced by a write, and is
// gone once cleared.
func TestCorruptRecordFailsClosed(t *testing.T) {
	ss, kv := stores(t, 1)
	s := ss[0]
	if _, err := kv.Put(t.Context(), flow.Key("acme", "a"), []byte(`{"v":1,"recent":[{"proposal_id":"p1"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(t.Context(), "acme", "a"); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Session of a corrupt record = %v, want an error saying so", err)
	}
	if err := s.Record(t.Context(), "acme", "a", executed("p2", "send_email", t0, "egress"), time.Hour, 8); err == nil {
		t.Fatal("Record over a corrupt record succeeded: it would shed what the record held")
	}
	if _, err := s.Session(t.Context(), "acme", "a"); err == nil {
		t.Fatal("the corrupt record was replaced")
	}
	snap, err := s.Snapshot(t.Context(), "acme", "a")
	if err != nil || snap.Revision == 0 || snap.Corrupt == "" {
		t.Fatalf("Snapshot of a corrupt record = %+v, %v; want its revision and why it is corrupt", snap, err)
	}
	if err := s.Clear(t.Context(), "acme", "a", snap.Revision+1); !errors.Is(err, flow.ErrChanged) {
		t.Fatalf("Clear at another revision = %v, want ErrChanged", err)
	}
	if _, err := s.Session(t.Context(), "acme", "a"); err == nil {
		t.Fatal("a Clear at another revision removed the record")
	}
	if err := s.Clear(t.Context(), "acme", "a", snap.Revision); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Session(t.Context(), "acme", "a"); err != nil || len(st.Recent) != 0 {
		t.Fatalf("after Clear: %+v, %v", st, err)
	}
	if err := s.Clear(t.Context(), "acme", "a", snap.Revision); !errors.Is(err, flow.ErrChanged) {
		t.Fatalf("the same Clear again = %v, want ErrChanged", err)
	}
	if err := s.Record(t.Context(), "acme", "a", executed("p3", "send_email", t0, "egress"), time.Hour, 8); err != nil {
		t.Fatalf("Record after Clear: %v", err)
	}
}

// TestStoppedBucketFailsClosed: a bucket that is gone is an error, never
// an empty state.
func TestStoppedBucketFailsClosed(t *testing.T) {
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv)
	kv, err := flow.Setup(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	s := flow.New(kv)
	if err := js.DeleteKeyValue(t.Context(), flow.Bucket); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(t.Context(), "acme", "a"); err == nil {
		t.Fatal("Session on a deleted bucket returned a state")
	}
}
