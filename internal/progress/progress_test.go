package progress

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		note        string
		total, done int
		elapsed     time.Duration
		want        []string
		not         string
	}{
		{note: "half way", total: 100, done: 50, elapsed: 2 * time.Second,
			want: []string{"replay   [", "===============               ]", " 50%", "50/100", "25/s", "eta 2s"}},
		{note: "finished", total: 10, done: 10, elapsed: time.Second, want: []string{"100%", "10/10"}, not: "eta"},
		{note: "more done than total", total: 10, done: 12, elapsed: time.Second, want: []string{"100%", "10/10"}},
		{note: "nothing yet", total: 10, elapsed: 0, want: []string{"  0%", "0/10", "0/s"}, not: "eta"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			got := progressLine("replay", tc.total, tc.done, tc.elapsed)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("progressLine = %q, want it to hold %q", got, w)
				}
			}
			if tc.not != "" && strings.Contains(got, tc.not) {
				t.Errorf("progressLine = %q holds %q", got, tc.not)
			}
		})
	}
}

// TestStartDrawsOnlyWhereAsked: "off" and "auto" on a buffer draw
// nothing; "on" draws frames and ends with the final one on its own line.
func TestStartDrawsOnlyWhereAsked(t *testing.T) {
	var done atomic.Int64
	done.Store(3)
	for _, mode := range []string{"off", "auto"} {
		var b bytes.Buffer
		Start(&b, mode, "x", 3, &done)()
		if b.Len() != 0 {
			t.Errorf("mode %s drew %q on a buffer", mode, b.String())
		}
	}
	var b bytes.Buffer
	Start(&b, "on", "x", 3, &done)()
	if !strings.Contains(b.String(), "3/3") || !strings.HasSuffix(b.String(), "\n") {
		t.Errorf("mode on drew %q, want the final frame and a new line", b.String())
	}
}
