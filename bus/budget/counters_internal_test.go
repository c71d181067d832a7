package budget

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gated/gated/engine"
)

// FuzzDecodeCounters: a record read back is gated's record of its scope
// or an ErrCorruptCounters, never a panic; one that decodes encodes back
// to a record that decodes alike, and admits and counts without going
// negative.
func FuzzDecodeCounters(f *testing.F) {
	seed, _ := json.Marshal(&counters{V: 1, Scope: "acme/bot",
		Windows: map[string]window{"proposals": {Start: 60000, Interval: 60, N: 3}},
		Reviews: map[string]int64{"p1": 90000}, Refusals: []refusal{{At: 1000, Budget: true}}})
	for _, s := range []string{string(seed), `{"v":1,"scope":"acme/bot"}`, `{"v":2,"scope":"acme/bot"}`, `{"v":1,"scope":"x"}`, `[]`, `{"v":1,"scope":"acme/bot","windows":{"reads":{"start":0,"interval_s":0,"n":1}}}`} {
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
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeCounters(again, "acme/bot"); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		now := time.UnixMilli(120000)
		l := Limits{Proposals: Rate{Max: 2, Interval: time.Minute}, Reads: Rate{Max: 2, Interval: time.Minute},
			Tokens: Rate{Max: 2, Interval: time.Minute}, ReviewsInFlight: 1, HoldsPending: 1}
		for _, use := range []engine.BudgetUse{engine.BudgetRead, engine.BudgetReview, engine.BudgetHold} {
			req := engine.BudgetRequest{Tenant: "acme", Agent: "bot", ID: "new", Use: use, Now: now, Until: now.Add(time.Minute)}
			if r := c.admit(l, req); r == nil {
				c.unadmit(l, req)
			}
		}
		st := c.state(l, now)
		if st.Proposals < 0 || st.Reads < 0 || st.Tokens < 0 || st.ReviewsInFlight < 0 || st.Refusals < 0 {
			t.Fatalf("state %+v", st)
		}
	})
}
