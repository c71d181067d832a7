package budget

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gated/gated/engine"
)

// counterVersion is the schema version of a counter record.
const counterVersion = 1

// maxRefusals bounds the refusals one record remembers; the counts the
// policy sees stop there.
const maxRefusals = 1000

// counters is the record of one scope (a tenant, or one of its agents),
// stored under the scope's key. Every change is a compare-and-set of the
// whole record, so concurrent gated processes never lose a count.
type counters struct {
	V int `json:"v"`
	// Scope names the scope, checked against the key on every read:
	// "<tenant>" or "<tenant>/<agent key>".
	Scope string `json:"scope"`
	// Windows are the windowed counts by limit name (proposals, reads,
	// tokens): the current window's start and count.
	Windows map[string]window `json:"windows,omitempty"`
	// Reviews and Holds are leases by proposal id, each until a Unix time
	// in milliseconds; a lease past its end counts no more, whether or not
	// it was released.
	Reviews map[string]int64 `json:"reviews,omitempty"`
	Holds   map[string]int64 `json:"holds,omitempty"`
	// Refusals are the refusals of the last ten minutes, oldest first.
	Refusals []refusal `json:"refusals,omitempty"`
}

// window is one windowed count.
type window struct {
	// Start is the window's start, Unix milliseconds; Interval its length
	// in seconds.
	Start    int64 `json:"start"`
	Interval int64 `json:"interval_s"`
	N        int64 `json:"n"`
}

// refusal is one proposal refused, by a rejection or a budget.
type refusal struct {
	At     int64 `json:"at"`
	Budget bool  `json:"budget,omitempty"`
}

// decodeCounters reads a counter record strictly and checks it names
// scope. Every error wraps ErrCorruptCounters.
func decodeCounters(data []byte, scope string) (*counters, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c counters
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptCounters, scope, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: %s: data after the record", ErrCorruptCounters, scope)
	}
	switch {
	case c.V != counterVersion:
		return nil, fmt.Errorf("%w: %s: version %d, want %d", ErrCorruptCounters, scope, c.V, counterVersion)
	case c.Scope != scope:
		return nil, fmt.Errorf("%w: %s: the record names scope %q", ErrCorruptCounters, scope, clip(c.Scope))
	}
	for name, w := range c.Windows {
		if w.N < 0 || w.Interval <= 0 || w.Start < 0 {
			return nil, fmt.Errorf("%w: %s: window %q is negative or empty", ErrCorruptCounters, scope, clip(name))
		}
	}
	return &c, nil
}

func newCounters(scope string) *counters { return &counters{V: counterVersion, Scope: scope} }

// clone copies c deeply, so a compare-and-set that loses leaves the
// cached record as it was.
func (c *counters) clone() *counters {
	out := &counters{V: c.V, Scope: c.Scope, Refusals: slices.Clone(c.Refusals)}
	if c.Windows != nil {
		out.Windows = make(map[string]window, len(c.Windows))
		for k, v := range c.Windows {
			out.Windows[k] = v
		}
	}
	out.Reviews = cloneMap(c.Reviews)
	out.Holds = cloneMap(c.Holds)
	return out
}

func cloneMap(m map[string]int64) map[string]int64 {
	if m == nil {
		return nil
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// windowStart is the start of the window of length d holding now.
func windowStart(now time.Time, d time.Duration) int64 {
	n, w := ms(now), d.Milliseconds()
	return n - n%w
}

// used returns the count of limit's current window at now.
func (c *counters) used(limit string, r Rate, now time.Time) int64 {
	w, ok := c.Windows[limit]
	if !ok || w.Interval != int64(r.Interval/time.Second) || w.Start != windowStart(now, r.Interval) {
		return 0
	}
	return w.N
}

// add adds n to limit's current window at now.
func (c *counters) add(limit string, r Rate, now time.Time, n int64) {
	if c.Windows == nil {
		c.Windows = map[string]window{}
	}
	cur := c.used(limit, r, now)
	c.Windows[limit] = window{Start: windowStart(now, r.Interval), Interval: int64(r.Interval / time.Second), N: max(0, cur+n)}
}

// live counts the leases of m that have not ended at now, and returns
// the earliest end among them.
func live(m map[string]int64, now time.Time) (n int64, first int64) {
	t := ms(now)
	for _, until := range m {
		if until > t {
			n++
			if first == 0 || until < first {
				first = until
			}
		}
	}
	return n, first
}

// prune drops the leases that ended and the refusals older than the
// refusal window.
func (c *counters) prune(now time.Time) {
	t := ms(now)
	for _, m := range []map[string]int64{c.Reviews, c.Holds} {
		for id, until := range m {
			if until <= t {
				delete(m, id)
			}
		}
	}
	cut := t - engine.RefusalWindow.Milliseconds()
	i := 0
	for i < len(c.Refusals) && c.Refusals[i].At <= cut {
		i++
	}
	c.Refusals = c.Refusals[i:]
}

// state is the scope's counters as the policy sees them.
func (c *counters) state(l Limits, now time.Time) engine.BudgetCounters {
	out := engine.BudgetCounters{
		Proposals: c.used(engine.LimitProposals, l.Proposals, now),
		Reads:     c.used(engine.LimitReads, l.Reads, now),
		Tokens:    c.used(engine.LimitTokens, l.Tokens, now),
	}
	out.ReviewsInFlight, _ = live(c.Reviews, now)
	out.HoldsPending, _ = live(c.Holds, now)
	cut := ms(now) - engine.RefusalWindow.Milliseconds()
	for _, r := range c.Refusals {
		if r.At > cut && r.At <= ms(now) {
			out.Refusals++
			if r.Budget {
				out.BudgetRefusals++
			}
		}
	}
	return out
}

// admit counts one proposal of req against l, or says which limit refuses
// it and leaves c alone. A proposal whose lease c holds already (a
// redelivery) is admitted again without counting twice.
func (c *counters) admit(l Limits, req engine.BudgetRequest) *engine.BudgetRefusal {
	now := req.Now
	windowed := func(limit string, r Rate) *engine.BudgetRefusal {
		used := c.used(limit, r, now)
		if r.Max == 0 || used < r.Max {
			return nil
		}
		start := windowStart(now, r.Interval)
		return &engine.BudgetRefusal{Limit: limit, Max: r.Max, Used: used, Interval: shortDuration(r.Interval),
			ResetsAt: time.UnixMilli(start).Add(r.Interval).UTC()}
	}
	leased := func(limit string, m map[string]int64, max int64) *engine.BudgetRefusal {
		n, first := live(m, now)
		if max == 0 || n < max {
			return nil
		}
		return &engine.BudgetRefusal{Limit: limit, Max: max, Used: n, ResetsAt: time.UnixMilli(first).UTC()}
	}
	c.prune(now)
	switch req.Use {
	case engine.BudgetRead:
		if r := windowed(engine.LimitReads, l.Reads); r != nil {
			return r
		}
		c.add(engine.LimitReads, l.Reads, now, 1)
	case engine.BudgetReview:
		if _, again := c.Reviews[req.ID]; again {
			c.Reviews[req.ID] = max(c.Reviews[req.ID], ms(req.Until))
			return nil
		}
		for _, r := range []*engine.BudgetRefusal{
			windowed(engine.LimitTokens, l.Tokens),
			leased(engine.LimitReviewsInFlight, c.Reviews, l.ReviewsInFlight),
			windowed(engine.LimitProposals, l.Proposals),
		} {
			if r != nil {
				return r
			}
		}
		c.add(engine.LimitProposals, l.Proposals, now, 1)
		if c.Reviews == nil {
			c.Reviews = map[string]int64{}
		}
		c.Reviews[req.ID] = ms(req.Until)
	case engine.BudgetHold:
		if _, again := c.Holds[req.ID]; again {
			return nil
		}
		for _, r := range []*engine.BudgetRefusal{
			leased(engine.LimitHoldsPending, c.Holds, l.HoldsPending),
			windowed(engine.LimitProposals, l.Proposals),
		} {
			if r != nil {
				return r
			}
		}
		c.add(engine.LimitProposals, l.Proposals, now, 1)
		if c.Holds == nil {
			c.Holds = map[string]int64{}
		}
		c.Holds[req.ID] = ms(req.Until)
	}
	return nil
}

// unadmit takes back what admit counted for req, when the other scope
// refused it.
func (c *counters) unadmit(l Limits, req engine.BudgetRequest) {
	switch req.Use {
	case engine.BudgetRead:
		c.add(engine.LimitReads, l.Reads, req.Now, -1)
	case engine.BudgetReview:
		c.add(engine.LimitProposals, l.Proposals, req.Now, -1)
		delete(c.Reviews, req.ID)
	case engine.BudgetHold:
		c.add(engine.LimitProposals, l.Proposals, req.Now, -1)
		delete(c.Holds, req.ID)
	}
}

// release ends a lease; it reports whether there was one.
func (c *counters) release(id string, use engine.BudgetUse) bool {
	m := c.Reviews
	if use == engine.BudgetHold {
		m = c.Holds
	}
	if _, ok := m[id]; !ok {
		return false
	}
	delete(m, id)
	return true
}

// refused remembers one refusal at now.
func (c *counters) refused(kind engine.RefusalKind, now time.Time) {
	c.prune(now)
	c.Refusals = append(c.Refusals, refusal{At: ms(now), Budget: kind == engine.RefusedBudget})
	// Refusals stamped by another process's clock may come out of order.
	slices.SortStableFunc(c.Refusals, func(a, b refusal) int { return cmp.Compare(a.At, b.At) })
	if n := len(c.Refusals); n > maxRefusals {
		c.Refusals = c.Refusals[n-maxRefusals:]
	}
}
