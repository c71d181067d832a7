// Package progress draws a one-line progress bar on a terminal, for the
// long runs of gated's commands (a policy replay, the load generator's
// prefill).
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Start draws a progress bar of done out of total items on w until stop
// is called: with mode "auto" only when w is a terminal, always with
// "on", never with "off".
func Start(w io.Writer, mode, label string, total int, done *atomic.Int64) (stop func()) {
	if mode == "off" || (mode == "auto" && !IsTerminal(w)) || total <= 0 {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprintf(w, "\r%s\n", progressLine(label, total, int(done.Load()), time.Since(start)))
				return
			case <-t.C:
				fmt.Fprintf(w, "\r%s", progressLine(label, total, int(done.Load()), time.Since(start)))
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}

// progressLine is one frame: label, bar, count, rate, elapsed time and,
// while unfinished, the time left at that rate.
func progressLine(label string, total, done int, elapsed time.Duration) string {
	const width = 30
	done = min(max(done, 0), total)
	filled := width * done / total
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	eta := ""
	if rate > 0 && done < total {
		eta = "  eta " + time.Duration(float64(total-done)/rate*float64(time.Second)).Truncate(time.Second).String()
	}
	return fmt.Sprintf("%-8s [%s%s] %3d%% %d/%d  %.0f/s  %s%s", label, strings.Repeat("=", filled),
		strings.Repeat(" ", width-filled), 100*done/total, done, total, rate, elapsed.Truncate(100*time.Millisecond), eta)
}

// IsTerminal reports whether w is a character device: a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
