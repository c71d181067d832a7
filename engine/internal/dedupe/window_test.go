package dedupe

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := New(time.Minute, 2)
	a, b, c := Key{1}, Key{2}, Key{3}
	w.Remember(a, "p1", t0, t0)
	if rej, ok := w.Lookup(a, t0.Add(59*time.Second)); !ok || rej.ID != "p1" || !rej.At.Equal(t0) {
		t.Fatalf("Lookup within the window = %+v, %v", rej, ok)
	}
	if _, ok := w.Lookup(a, t0.Add(time.Minute)); ok {
		t.Fatal("Lookup found a rejection whose window has passed")
	}

	// A later rejection under the same key replaces the earlier one, and
	// the earlier one's expiry does not take it away.
	w = New(time.Minute, 10)
	w.Remember(a, "p1", t0, t0)
	w.Remember(a, "p2", t0.Add(30*time.Second), t0.Add(30*time.Second))
	if rej, ok := w.Lookup(a, t0.Add(70*time.Second)); !ok || rej.ID != "p2" {
		t.Fatalf("Lookup after the first expired = %+v, %v; want p2", rej, ok)
	}

	// The oldest goes once limit rejections are remembered.
	w = New(time.Minute, 2)
	w.Remember(a, "p1", t0, t0)
	w.Remember(b, "p2", t0, t0)
	w.Remember(c, "p3", t0, t0)
	if _, ok := w.Lookup(a, t0); ok {
		t.Error("the oldest rejection outlived the limit")
	}
	for k, id := range map[Key]string{b: "p2", c: "p3"} {
		if rej, ok := w.Lookup(k, t0); !ok || rej.ID != id {
			t.Errorf("Lookup(%v) = %+v, %v; want %s", k[0], rej, ok, id)
		}
	}
}

// A long run of rejections that expire keeps the queue short.
func TestWindowReusesItsQueue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := New(time.Second, 1<<20)
	for i := range 10000 {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		w.Remember(Key{byte(i), byte(i >> 8)}, "p", now, now)
	}
	if n := len(w.queue); n > 200 {
		t.Errorf("queue holds %d entries for 10 live ones", n)
	}
}
