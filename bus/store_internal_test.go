package bus

import (
	"strconv"
	"testing"
)

// The histories kept for approvals are bounded in entries and bytes, the
// newest are kept, and each is handed out once.
func TestSeenHistoriesBounds(t *testing.T) {
	var h seenHistories
	for i := range 3 * seenHistoriesMax {
		h.put(strconv.Itoa(i), seenHistory{rev: uint64(i + 1)})
	}
	if n := len(h.cur) + len(h.old); n > 2*seenHistoriesMax {
		t.Fatalf("%d entries kept, bound %d", n, 2*seenHistoriesMax)
	}
	last := strconv.Itoa(3*seenHistoriesMax - 1)
	if s, ok := h.take(last); !ok || s.rev != 3*seenHistoriesMax {
		t.Fatalf("the newest entry: %+v, %v", s, ok)
	}
	if _, ok := h.take(last); ok {
		t.Fatal("an entry was handed out twice")
	}
	if _, ok := h.take("0"); ok {
		t.Fatal("the oldest entry outlived two generations")
	}
	// One generation back is still there.
	if s, ok := h.take(strconv.Itoa(2*seenHistoriesMax - 1)); !ok || s.rev != 2*seenHistoriesMax {
		t.Fatalf("an entry of the older generation: %+v, %v", s, ok)
	}

	// Bytes: values are counted once per key, and a generation turns old
	// before its values pass the bound.
	var b seenHistories
	mb := make([]byte, 1<<20)
	b.put("a", seenHistory{rev: 1, value: mb})
	b.put("a", seenHistory{rev: 2, value: mb})
	if b.bytes != len(mb) {
		t.Fatalf("one key put twice counts %d bytes, want %d", b.bytes, len(mb))
	}
	for i := range 10 {
		b.put("k"+strconv.Itoa(i), seenHistory{rev: 1, value: mb})
		if b.bytes > seenHistoriesMaxBytes {
			t.Fatalf("after %d puts the newer generation holds %d bytes, bound %d", i+1, b.bytes, seenHistoriesMaxBytes)
		}
	}
	if held := valueBytes(b.cur) + valueBytes(b.old); held > 2*seenHistoriesMaxBytes {
		t.Fatalf("%d bytes held, bound %d", held, 2*seenHistoriesMaxBytes)
	}
	if _, ok := b.take("k9"); !ok || b.bytes != valueBytes(b.cur) {
		t.Fatalf("after taking an entry of the newer generation it counts %d bytes, holds %d", b.bytes, valueBytes(b.cur))
	}
}

func valueBytes(m map[string]seenHistory) int {
	n := 0
	for _, s := range m {
		n += len(s.value)
	}
	return n
}
