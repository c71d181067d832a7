package budget

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// FuzzDecodeCounters: a record read back is gated's record of its scope
// (of the current version, or of version 1 converted) or an
// ErrCorruptCounters, never a panic; one that decodes encodes back to a
// current record that decodes to the same counters, and admits, releases
// and counts without going negative.
func FuzzDecodeCounters(f *testing.F) {
	v1, _ := json.Marshal(map[string]any{"v": 1, "scope": "acme/bot",
		"windows": map[string]window{"proposals": {Start: 60000, Interval: 60, N: 3}},
		"reviews": map[string]int64{"p1": 90000}, "refusals": []refusal{{At: 1000, Budget: true}}})
	v2, _ := json.Marshal(&counters{V: 2, Scope: "acme/bot",
		Windows:    map[string]window{"proposals": {Start: 60000, Interval: 60, N: 3}},
		ReviewEnds: []slotCount{{End: 90000, N: 2}, {End: 130000, N: 1}}, HoldEnds: []slotCount{{End: 180000, N: 1}},
		RefusalSlots: []refusalSlot{{Start: 0, Last: 1000, N: 2, Budget: 1}, {Start: 110000, Last: 119000, N: 1}}})
	for _, s := range []string{string(v1), string(v2), `{"v":1,"scope":"acme/bot"}`, `{"v":2,"scope":"acme/bot"}`, `{"v":3,"scope":"acme/bot"}`,
		`{"v":2,"scope":"x"}`, `[]`, `{"v":2,"scope":"acme/bot","windows":{"reads":{"start":0,"interval_s":0,"n":1}}}`,
		`{"v":2,"scope":"acme/bot","review_ends":[{"end":20000,"n":1},{"end":10000,"n":1}]}`,
		`{"v":2,"scope":"acme/bot","reviews":{"p1":90000}}`, `{"v":1,"scope":"acme/bot","review_ends":[{"end":10000,"n":1}]}`,
		`{"v":2,"scope":"acme/bot","refusal_slots":[{"start":0,"last":5,"n":1,"budget":2}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeCounters(data, "acme/bot")
		if err != nil {
			if !errors.Is(err, ErrCorruptCounters) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if c.V != counterVersion || c.Reviews != nil || c.Holds != nil || c.Refusals != nil {
			t.Fatalf("a record read is not of the current version: %+v", c)
		}
		now := time.UnixMilli(120000)
		l := Limits{Proposals: Rate{Max: 2, Interval: time.Minute}, Reads: Rate{Max: 2, Interval: time.Minute},
			Tokens: Rate{Max: 2, Interval: time.Minute}, ReviewsInFlight: 1, HoldsPending: 1}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeCounters(again, "acme/bot")
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if a, b := c.state(l, now), back.state(l, now); a != b {
			t.Fatalf("re-encoded record counts %+v, was %+v", b, a)
		}
		for _, use := range []engine.BudgetUse{engine.BudgetRead, engine.BudgetReview, engine.BudgetHold} {
			req := engine.BudgetRequest{Tenant: "acme", Agent: "bot", ID: "new", Use: use, Now: now, Until: now.Add(time.Minute)}
			before := c.state(l, now)
			if r := c.admit(l, req); r == nil {
				c.unadmit(l, req)
				if after := c.state(l, now); after != before {
					t.Fatalf("admitted and taken back, the counters are %+v, were %+v", after, before)
				}
			}
			c.release(use, slotEnd(ms(req.Until)))
		}
		c.prune(now)
		c.countRefusal(ms(now), true)
		st := c.state(l, now)
		if st.Proposals < 0 || st.Reads < 0 || st.Tokens < 0 || st.ReviewsInFlight < 0 || st.HoldsPending < 0 ||
			st.Refusals < 1 || st.BudgetRefusals < 1 || st.BudgetRefusals > st.Refusals {
			t.Fatalf("state %+v", st)
		}
		if _, err := decodeCounters(mustMarshal(t, c), "acme/bot"); err != nil {
			t.Fatalf("the changed record does not decode: %v", err)
		}
	})
}

// FuzzDecodeLease: a lease read back is gated's, ending at the end of a
// slot, or an ErrCorruptCounters naming its key, never a panic.
func FuzzDecodeLease(f *testing.F) {
	for _, s := range []string{`{"v":1,"agent":"bot","end":90000}`, `{"v":1,"agent":"","end":10000}`, `{"v":1,"agent":"bot","end":90001}`,
		`{"v":2,"agent":"bot","end":90000}`, `{"v":1,"agent":"bot","end":-10000}`, `{"v":1,"agent":"bot","end":90000,"x":1}`, `{}`, `null`, `{"v":1} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := decodeLease(data, "acme.lease.review.p1")
		if err != nil {
			if !errors.Is(err, ErrCorruptCounters) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if l.V != leaseVersion || l.End <= 0 || l.End%slot.Milliseconds() != 0 {
			t.Fatalf("lease %+v", l)
		}
		back, err := decodeLease(mustMarshal(t, l), "acme.lease.review.p1")
		if err != nil || *back != *l {
			t.Fatalf("re-encoded lease reads %+v, %v; was %+v", back, err, l)
		}
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestCountsOfAnOlderNowStayInTheLaterWindow: a request whose now lies in
// a window before the one the record counts (a process whose clock lags
// another's across the window's end) counts in the record's window and
// sees its count: it never replaces the later window's count with its
// own, which would admit the window's whole limit again.
func TestCountsOfAnOlderNowStayInTheLaterWindow(t *testing.T) {
	r := Rate{Max: 10, Interval: time.Minute}
	later := time.UnixMilli(10 * 60_000).Add(time.Second)
	older := later.Add(-2 * time.Second) // the end of the window before
	var c counters
	c.add(gated.LimitProposals, r, later, 9)
	if got := c.used(gated.LimitProposals, r, older); got != 9 {
		t.Fatalf("used at an older now = %d, want the later window's 9", got)
	}
	c.add(gated.LimitProposals, r, older, 1)
	if got := c.used(gated.LimitProposals, r, later); got != 10 {
		t.Fatalf("used after an older now's add = %d, want 10", got)
	}
	if w := c.Windows[gated.LimitProposals]; w.Start != windowStart(later, r.Interval) {
		t.Fatalf("window start %d, want the later window's %d", w.Start, windowStart(later, r.Interval))
	}
	// A now in a later window starts that window afresh.
	next := later.Add(time.Minute)
	if got := c.used(gated.LimitProposals, r, next); got != 0 {
		t.Fatalf("used in the next window = %d, want 0", got)
	}
}
