package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// GoRuntime is what a Go process's runtime says of its memory, read from
// the Prometheus metrics it serves: how many goroutines it runs, the
// stacks they take, and the heap in use.
type GoRuntime struct {
	Goroutines int64 `json:"goroutines"`
	StackBytes int64 `json:"stack_bytes"`
	HeapBytes  int64 `json:"heap_in_use_bytes"`
}

// goRuntimeMetrics are the metrics GoRuntime is read from, as Prometheus'
// Go collector names them.
var goRuntimeMetrics = [...]string{"go_goroutines", "go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes"}

// maxMetricsBytes bounds what is read of a metrics page.
const maxMetricsBytes = 8 << 20

// ParseGoRuntime reads a GoRuntime from a page in Prometheus' text format.
// Every one of its metrics must be there once, without labels, as a
// number from 0 to 2^62; any other line is skipped.
func ParseGoRuntime(r io.Reader) (GoRuntime, error) {
	var values [len(goRuntimeMetrics)]float64
	var seen [len(goRuntimeMetrics)]bool
	sc := bufio.NewScanner(io.LimitReader(r, maxMetricsBytes))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for i, m := range goRuntimeMetrics {
			if name != m {
				continue
			}
			if seen[i] {
				return GoRuntime{}, fmt.Errorf("metric %s is given twice", m)
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil || math.IsNaN(v) || v < 0 || v >= 1<<62 {
				return GoRuntime{}, fmt.Errorf("metric %s: want a number from 0 to 2^62, got %q", m, value)
			}
			values[i], seen[i] = v, true
		}
	}
	if err := sc.Err(); err != nil {
		return GoRuntime{}, fmt.Errorf("reading the metrics: %w", err)
	}
	var missing []string
	for i, m := range goRuntimeMetrics {
		if !seen[i] {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		return GoRuntime{}, errors.New("the metrics lack " + strings.Join(missing, ", "))
	}
	return GoRuntime{
		Goroutines: int64(values[0]),
		StackBytes: int64(values[1]),
		HeapBytes:  int64(values[2]),
	}, nil
}

// GoRuntimeOf returns a reader of the Go runtime of the gated serving its
// metrics at addr (host:port), for Sampler.ReadGoRuntime.
func GoRuntimeOf(addr string) func() (GoRuntime, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	return func() (GoRuntime, error) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			return GoRuntime{}, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return GoRuntime{}, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return GoRuntime{}, fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		return ParseGoRuntime(resp.Body)
	}
}
