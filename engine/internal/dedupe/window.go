// Package dedupe remembers the engine's recent rejections for a window:
// the keys of rejected proposals and their ids, bounded in number, so that
// an identical proposal within the window is answered with the earlier
// rejection.
package dedupe

import (
	"crypto/sha256"
	"sync"
	"time"
)

// Key identifies a request independently of its id: two proposals with
// the same key would be judged alike by the same policy.
type Key [sha256.Size]byte

// Rejection is one remembered rejected proposal.
type Rejection struct {
	key Key
	// ID is the proposal id of the rejected proposal; its verdict is in
	// the store under the same tenant.
	ID string
	// At is the verdict's decided_at: the window runs from the original
	// rejection.
	At  time.Time
	seq uint64
}

// Window remembers recent rejections for a fixed window, at most limit
// of them. Every entry lives equally long, so arrival order is expiry
// order and a FIFO queue is enough to bound memory. It is safe for
// concurrent use.
type Window struct {
	window time.Duration
	limit  int

	mu    sync.Mutex
	queue []Rejection // oldest first, from head on
	head  int
	byKey map[Key]Rejection
	seq   uint64
}

// New returns a Window that remembers rejections for window, at most
// limit of them.
func New(window time.Duration, limit int) *Window {
	return &Window{window: window, limit: limit, byKey: map[Key]Rejection{}}
}

// Lookup returns the rejection remembered under k, if it is still within
// the window at now.
func (c *Window) Lookup(k Key, now time.Time) (Rejection, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(now)
	rej, ok := c.byKey[k]
	if !ok || now.Sub(rej.At) >= c.window {
		return Rejection{}, false
	}
	return rej, true
}

// Remember records the rejection of proposal id, decided at, under k. A
// later rejection under the same key replaces the earlier one.
func (c *Window) Remember(k Key, id string, at, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	rej := Rejection{key: k, ID: id, At: at, seq: c.seq}
	c.queue = append(c.queue, rej)
	c.byKey[k] = rej
	c.expire(now)
	for c.size() > c.limit {
		c.pop()
	}
}

// size is the number of queued entries, superseded ones included.
func (c *Window) size() int { return len(c.queue) - c.head }

// expire drops the entries whose window has passed at now. Entries are
// queued in the order they were remembered; a clock that stepped back
// may leave a younger entry behind an older one, which then lives until
// the one in front of it expires or the cap pushes it out.
func (c *Window) expire(now time.Time) {
	for c.size() > 0 && now.Sub(c.queue[c.head].At) >= c.window {
		c.pop()
	}
}

// pop removes the oldest queued entry, and its key unless a later
// rejection replaced it.
func (c *Window) pop() {
	old := c.queue[c.head]
	c.queue[c.head] = Rejection{}
	c.head++
	if cur, ok := c.byKey[old.key]; ok && cur.seq == old.seq {
		delete(c.byKey, old.key)
	}
	// Reuse the front of the slice once half of it is spent, so a long
	// run of remember and expire does not grow it without end.
	if c.head >= 64 && c.head*2 >= len(c.queue) {
		n := copy(c.queue, c.queue[c.head:])
		clear(c.queue[n:])
		c.queue = c.queue[:n]
		c.head = 0
	}
}
