package budget

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// counterVersion is the schema version of the counter records gated
// writes. Records of legacyVersion are still read (see decodeCounters).
const counterVersion = 2

// legacyVersion is the first schema: leases listed by proposal id and
// refusals listed one by one, so that the record grew with the load.
const legacyVersion = 1

// slot is the width of the time slots leases and refusals are counted
// by: a lease counts until the end of the slot its end falls in, so at
// most this long after its end, never less.
const slot = 10 * time.Second

// maxRefusalSlots bounds the refusal slots one record keeps: the refusal
// window's slots, and a few more for refusals stamped ahead by another
// process's clock.
const maxRefusalSlots = int(engine.RefusalWindow/slot) + 8

// maxCount bounds a slot's count in a record read: no more leases or
// refusals than that can have been counted, and sums of such counts do
// not overflow.
const maxCount = 1 << 40

// counters is the record of one scope (a tenant, or one of its agents),
// stored under the scope's key. Every change is a compare-and-set of the
// whole record, so concurrent gated processes never lose a count. Its size
// depends on time (the slots of the live leases and of the refusal
// window), never on how many leases or refusals there are.
type counters struct {
	V int `json:"v"`
	// Scope names the scope, checked against the key on every read:
	// "<tenant>" or "<tenant>/<agent key>".
	Scope string `json:"scope"`
	// Windows are the windowed counts by limit name (proposals, reads,
	// tokens): the current window's start and count.
	Windows map[string]window `json:"windows,omitempty"`
	// ReviewEnds and HoldEnds count the leases of reviews in flight and of
	// pending holds by the end of their slot, earliest first; a slot past
	// its end counts no more, whether or not its leases were released.
	// Each lease is also a key of its own (see leaseKey) that says which
	// slot a release takes it from.
	ReviewEnds []slotCount `json:"review_ends,omitempty"`
	HoldEnds   []slotCount `json:"hold_ends,omitempty"`
	// RefusalSlots count the refusals of the last ten minutes by slot,
	// oldest first.
	RefusalSlots []refusalSlot `json:"refusal_slots,omitempty"`

	// Reviews, Holds and Refusals are version 1's leases by proposal id
	// and refusals one by one: read and converted, never written.
	Reviews  map[string]int64 `json:"reviews,omitempty"`
	Holds    map[string]int64 `json:"holds,omitempty"`
	Refusals []refusal        `json:"refusals,omitempty"`
}

// window is one windowed count.
type window struct {
	// Start is the window's start, Unix milliseconds; Interval its length
	// in seconds.
	Start    int64 `json:"start"`
	Interval int64 `json:"interval_s"`
	N        int64 `json:"n"`
}

// slotCount is the number of leases that end in the slot ending at End,
// Unix milliseconds.
type slotCount struct {
	End int64 `json:"end"`
	N   int64 `json:"n"`
}

// refusalSlot counts the refusals of the slot starting at Start, Unix
// milliseconds; Last is the latest of them, and the slot counts until
// Last is out of the refusal window. Budget counts the budget refusals
// among the N.
type refusalSlot struct {
	Start  int64 `json:"start"`
	Last   int64 `json:"last"`
	N      int64 `json:"n"`
	Budget int64 `json:"budget,omitempty"`
}

// refusal is one refusal of a version 1 record.
type refusal struct {
	At     int64 `json:"at"`
	Budget bool  `json:"budget,omitempty"`
}

// decodeCounters reads a counter record strictly and checks it names
// scope. A version 1 record is converted: its leases are counted by the
// slot of their end and its refusals by their slot. Its leases have no key
// of their own, so releasing one takes nothing off: each counts until its
// end, as a lease of a crashed gated does. Every error wraps
// ErrCorruptCounters.
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
	case c.V != counterVersion && c.V != legacyVersion:
		return nil, fmt.Errorf("%w: %s: version %d, want %d", ErrCorruptCounters, scope, c.V, counterVersion)
	case c.Scope != scope:
		return nil, fmt.Errorf("%w: %s: the record names scope %q", ErrCorruptCounters, scope, clip(c.Scope))
	}
	for name, w := range c.Windows {
		if w.N < 0 || w.Interval <= 0 || w.Start < 0 {
			return nil, fmt.Errorf("%w: %s: window %q is negative or empty", ErrCorruptCounters, scope, clip(name))
		}
	}
	if c.V == legacyVersion {
		if c.ReviewEnds != nil || c.HoldEnds != nil || c.RefusalSlots != nil {
			return nil, fmt.Errorf("%w: %s: a version %d record with version %d's members", ErrCorruptCounters, scope, legacyVersion, counterVersion)
		}
		c.upgrade()
		return &c, nil
	}
	if c.Reviews != nil || c.Holds != nil || c.Refusals != nil {
		return nil, fmt.Errorf("%w: %s: a version %d record with version %d's members", ErrCorruptCounters, scope, counterVersion, legacyVersion)
	}
	w := slot.Milliseconds()
	for name, slots := range map[string][]slotCount{"review_ends": c.ReviewEnds, "hold_ends": c.HoldEnds} {
		for i, s := range slots {
			if s.N <= 0 || s.N > maxCount || s.End <= 0 || s.End%w != 0 || (i > 0 && s.End <= slots[i-1].End) {
				return nil, fmt.Errorf("%w: %s: %s[%d] is not a count of a slot after the one before", ErrCorruptCounters, scope, name, i)
			}
		}
	}
	for i, r := range c.RefusalSlots {
		if r.N <= 0 || r.N > maxCount || r.Budget < 0 || r.Budget > r.N || r.Start < 0 || r.Start%w != 0 ||
			r.Last < r.Start || r.Last-r.Start >= w || (i > 0 && r.Start <= c.RefusalSlots[i-1].Start) {
			return nil, fmt.Errorf("%w: %s: refusal_slots[%d] is not a count of a slot after the one before", ErrCorruptCounters, scope, i)
		}
	}
	if len(c.RefusalSlots) > maxRefusalSlots {
		return nil, fmt.Errorf("%w: %s: %d refusal slots, at most %d", ErrCorruptCounters, scope, len(c.RefusalSlots), maxRefusalSlots)
	}
	return &c, nil
}

// upgrade converts a version 1 record to the current version.
func (c *counters) upgrade() {
	for _, l := range []struct {
		ids  map[string]int64
		ends *[]slotCount
	}{{c.Reviews, &c.ReviewEnds}, {c.Holds, &c.HoldEnds}} {
		for _, until := range l.ids {
			if until > 0 {
				*l.ends = addSlot(*l.ends, slotEnd(until), 1)
			}
		}
	}
	for _, r := range c.Refusals {
		if r.At >= 0 {
			c.countRefusal(r.At, r.Budget)
		}
	}
	c.V, c.Reviews, c.Holds, c.Refusals = counterVersion, nil, nil, nil
}

func newCounters(scope string) *counters { return &counters{V: counterVersion, Scope: scope} }

// clone copies c deeply, so a compare-and-set that loses leaves the
// cached record as it was.
func (c *counters) clone() *counters {
	out := &counters{V: c.V, Scope: c.Scope, ReviewEnds: slices.Clone(c.ReviewEnds),
		HoldEnds: slices.Clone(c.HoldEnds), RefusalSlots: slices.Clone(c.RefusalSlots)}
	if c.Windows != nil {
		out.Windows = make(map[string]window, len(c.Windows))
		for k, v := range c.Windows {
			out.Windows[k] = v
		}
	}
	return out
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// windowStart is the start of the window of length d holding now.
func windowStart(now time.Time, d time.Duration) int64 {
	n, w := ms(now), d.Milliseconds()
	return n - n%w
}

// slotEnd is the end of the slot a lease ending at until (Unix
// milliseconds) counts in: until rounded up to a whole slot.
func slotEnd(until int64) int64 {
	w := slot.Milliseconds()
	if until > math.MaxInt64-w {
		return math.MaxInt64 - math.MaxInt64%w
	}
	if r := until % w; r != 0 {
		return until - r + w
	}
	return until
}

// current returns the start of limit's window that counts at now: the
// window holding now, or the record's own when that one is later (a now
// from a process whose clock lags the one that began it), so that a
// lagging clock counts in the later window and never starts an earlier
// one afresh over its count.
func (c *counters) current(limit string, r Rate, now time.Time) int64 {
	start := windowStart(now, r.Interval)
	if w, ok := c.Windows[limit]; ok && w.Interval == int64(r.Interval/time.Second) && w.Start > start {
		return w.Start
	}
	return start
}

// used returns the count of limit's current window at now.
func (c *counters) used(limit string, r Rate, now time.Time) int64 {
	w, ok := c.Windows[limit]
	if !ok || w.Interval != int64(r.Interval/time.Second) || w.Start != c.current(limit, r, now) {
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
	c.Windows[limit] = window{Start: c.current(limit, r, now), Interval: int64(r.Interval / time.Second), N: max(0, cur+n)}
}

// giveBack takes n off limit's window that starts at start (Unix ms) and
// lasts interval seconds: the unused part of a block leased from it. It
// reports whether that window is the one counted; another counts the
// block no more.
func (c *counters) giveBack(limit string, start, interval, n int64) bool {
	w, ok := c.Windows[limit]
	if !ok || w.Start != start || w.Interval != interval || n <= 0 {
		return false
	}
	w.N = max(0, w.N-n)
	c.Windows[limit] = w
	return true
}

// ends returns the lease slots of use.
func (c *counters) ends(use engine.BudgetUse) *[]slotCount {
	if use == engine.BudgetHold {
		return &c.HoldEnds
	}
	return &c.ReviewEnds
}

// addSlot adds n to the slot ending at end, keeping the slots in order
// and dropping one that comes to zero; a slot that is not there is not
// taken below zero.
func addSlot(slots []slotCount, end, n int64) []slotCount {
	i, found := slices.BinarySearchFunc(slots, end, func(s slotCount, end int64) int { return cmp.Compare(s.End, end) })
	switch {
	case found && slots[i].N+n > 0:
		slots[i].N += n
	case found:
		slots = slices.Delete(slots, i, i+1)
	case n > 0:
		slots = slices.Insert(slots, i, slotCount{End: end, N: n})
	}
	return slots
}

// live counts the leases of slots that have not ended at now, and returns
// the earliest end among them.
func live(slots []slotCount, now time.Time) (n int64, first int64) {
	t := ms(now)
	for _, s := range slots {
		if s.End > t {
			n += s.N
			if first == 0 {
				first = s.End
			}
		}
	}
	return n, first
}

// prune drops the lease slots that ended and the refusal slots out of the
// refusal window.
func (c *counters) prune(now time.Time) {
	t := ms(now)
	for _, slots := range []*[]slotCount{&c.ReviewEnds, &c.HoldEnds} {
		*slots = slices.DeleteFunc(*slots, func(s slotCount) bool { return s.End <= t })
	}
	cut := t - engine.RefusalWindow.Milliseconds()
	c.RefusalSlots = slices.DeleteFunc(c.RefusalSlots, func(r refusalSlot) bool { return r.Last <= cut })
}

// state is the scope's counters as the policy sees them.
func (c *counters) state(l Limits, now time.Time) gated.BudgetCounters {
	out := gated.BudgetCounters{
		Proposals: c.used(gated.LimitProposals, l.Proposals, now),
		Reads:     c.used(gated.LimitReads, l.Reads, now),
		Tokens:    c.used(gated.LimitTokens, l.Tokens, now),
	}
	out.ReviewsInFlight, _ = live(c.ReviewEnds, now)
	out.HoldsPending, _ = live(c.HoldEnds, now)
	out.Refusals, out.BudgetRefusals = refusalsAt(c.RefusalSlots, now)
	return out
}

// refusalsAt counts the refusals of slots in the refusal window that ends
// at now, and the budget refusals among them.
func refusalsAt(slots []refusalSlot, now time.Time) (n, budget int64) {
	t := ms(now)
	cut := t - engine.RefusalWindow.Milliseconds()
	for _, r := range slots {
		if r.Last > cut && r.Start <= t {
			n += r.N
			budget += r.Budget
		}
	}
	return n, budget
}

// over returns the refusal of limit's current window at now when it is
// spent, else nil.
func (c *counters) over(limit string, r Rate, now time.Time) *gated.BudgetRefusal {
	used := c.used(limit, r, now)
	if r.Max == 0 || used < r.Max {
		return nil
	}
	start := c.current(limit, r, now)
	return &gated.BudgetRefusal{Limit: limit, Max: r.Max, Used: used, Interval: shortDuration(r.Interval),
		ResetsAt: time.UnixMilli(start).Add(r.Interval).UTC()}
}

// admit counts one proposal of req against l, or says which limit refuses
// it and leaves c alone. A review or hold takes a lease in the slot of
// req.Until; whether the proposal holds a lease already (a redelivery) is
// the lease key's to say, before admit is asked.
func (c *counters) admit(l Limits, req engine.BudgetRequest) *gated.BudgetRefusal {
	now := req.Now
	windowed := func(limit string, r Rate) *gated.BudgetRefusal { return c.over(limit, r, now) }
	leased := func(limit string, slots []slotCount, max int64) *gated.BudgetRefusal {
		n, first := live(slots, now)
		if max == 0 || n < max {
			return nil
		}
		return &gated.BudgetRefusal{Limit: limit, Max: max, Used: n, ResetsAt: time.UnixMilli(first).UTC()}
	}
	c.prune(now)
	var checks []*gated.BudgetRefusal
	switch req.Use {
	case engine.BudgetRead:
		checks = []*gated.BudgetRefusal{windowed(gated.LimitReads, l.Reads)}
	case engine.BudgetReview:
		checks = []*gated.BudgetRefusal{
			windowed(gated.LimitTokens, l.Tokens),
			leased(gated.LimitReviewsInFlight, c.ReviewEnds, l.ReviewsInFlight),
			windowed(gated.LimitProposals, l.Proposals),
		}
	case engine.BudgetHold:
		checks = []*gated.BudgetRefusal{
			leased(gated.LimitHoldsPending, c.HoldEnds, l.HoldsPending),
			windowed(gated.LimitProposals, l.Proposals),
		}
	}
	for _, r := range checks {
		if r != nil {
			return r
		}
	}
	c.count(l, req, 1)
	return nil
}

// count adds n (1 or -1) to what req counts against.
func (c *counters) count(l Limits, req engine.BudgetRequest, n int64) {
	if req.Use == engine.BudgetRead {
		c.add(gated.LimitReads, l.Reads, req.Now, n)
		return
	}
	c.add(gated.LimitProposals, l.Proposals, req.Now, n)
	ends := c.ends(req.Use)
	*ends = addSlot(*ends, slotEnd(ms(req.Until)), n)
}

// unadmit takes back what admit counted for req, when the other scope
// refused it or its lease could not be written.
func (c *counters) unadmit(l Limits, req engine.BudgetRequest) { c.count(l, req, -1) }

// release ends a lease of use that counts in the slot ending at end; it
// reports whether the slot still counted one.
func (c *counters) release(use engine.BudgetUse, end int64) bool {
	ends := c.ends(use)
	if _, found := slices.BinarySearchFunc(*ends, end, func(s slotCount, end int64) int { return cmp.Compare(s.End, end) }); !found {
		return false
	}
	*ends = addSlot(*ends, end, -1)
	return true
}

// move moves a lease of use from the slot ending at from to the one
// ending at to (a redelivery's later end).
func (c *counters) move(use engine.BudgetUse, from, to int64) {
	c.release(use, from)
	ends := c.ends(use)
	*ends = addSlot(*ends, to, 1)
}

// countRefusal counts one refusal at t, Unix milliseconds, in its slot.
func (c *counters) countRefusal(t int64, budget bool) {
	r := refusalSlot{Start: t - t%slot.Milliseconds(), Last: t, N: 1}
	if budget {
		r.Budget = 1
	}
	c.addRefusals(r)
}

// addRefusals adds the refusals of add to those of its slot, keeping the
// newest maxRefusalSlots slots.
func (c *counters) addRefusals(add refusalSlot) {
	i, found := slices.BinarySearchFunc(c.RefusalSlots, add.Start, func(r refusalSlot, start int64) int { return cmp.Compare(r.Start, start) })
	if !found {
		// Refusals stamped by another process's clock may come out of
		// order: the slot goes where its start says.
		c.RefusalSlots = slices.Insert(c.RefusalSlots, i, refusalSlot{Start: add.Start, Last: add.Last})
	}
	r := &c.RefusalSlots[i]
	r.N += add.N
	r.Budget += add.Budget
	r.Last = max(r.Last, add.Last)
	if n := len(c.RefusalSlots); n > maxRefusalSlots {
		c.RefusalSlots = slices.Delete(c.RefusalSlots, 0, n-maxRefusalSlots)
	}
}
