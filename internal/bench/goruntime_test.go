package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const goMetricsPage = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 2272
go_gc_duration_seconds{quantile="0.5"} 0.0001
go_memstats_heap_inuse_bytes 3.35454208e+08
go_memstats_stack_inuse_bytes 7.503872e+07
gated_verdicts_total{outcome="approved"} 12
`

func TestParseGoRuntime(t *testing.T) {
	g, err := ParseGoRuntime(strings.NewReader(goMetricsPage))
	if err != nil {
		t.Fatal(err)
	}
	if want := (GoRuntime{Goroutines: 2272, StackBytes: 75038720, HeapBytes: 335454208}); g != want {
		t.Fatalf("ParseGoRuntime = %+v, want %+v", g, want)
	}
	for _, tc := range []struct{ note, page, want string }{
		{"a metric missing", "go_goroutines 3\ngo_memstats_heap_inuse_bytes 1\n", "lack go_memstats_stack_inuse_bytes"},
		{"a metric twice", goMetricsPage + "go_goroutines 4\n", "go_goroutines is given twice"},
		{"negative", strings.Replace(goMetricsPage, "go_goroutines 2272", "go_goroutines -1", 1), "go_goroutines: want a number"},
		{"not a number", strings.Replace(goMetricsPage, "go_goroutines 2272", "go_goroutines many", 1), "go_goroutines: want a number"},
		{"NaN", strings.Replace(goMetricsPage, "go_goroutines 2272", "go_goroutines NaN", 1), "go_goroutines: want a number"},
		{"too large", strings.Replace(goMetricsPage, "7.503872e+07", "+Inf", 1), "go_memstats_stack_inuse_bytes: want a number"},
		{"empty", "", "lack go_goroutines, go_memstats_stack_inuse_bytes, go_memstats_heap_inuse_bytes"},
	} {
		if _, err := ParseGoRuntime(strings.NewReader(tc.page)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one saying %q", tc.note, err, tc.want)
		}
	}
}

func FuzzParseGoRuntime(f *testing.F) {
	f.Add([]byte(goMetricsPage))
	f.Add([]byte("go_goroutines 1\ngo_memstats_stack_inuse_bytes 0\ngo_memstats_heap_inuse_bytes 4e18\n"))
	f.Add([]byte("go_goroutines  1e300\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		g, err := ParseGoRuntime(strings.NewReader(string(page)))
		if err != nil {
			return
		}
		if g.Goroutines < 0 || g.StackBytes < 0 || g.HeapBytes < 0 {
			t.Fatalf("ParseGoRuntime(%q) = %+v", page, g)
		}
		for _, m := range goRuntimeMetrics {
			if !strings.Contains(string(page), m+" ") {
				t.Fatalf("ParseGoRuntime(%q) accepted a page without %s", page, m)
			}
		}
	})
}

func TestGoRuntimeOf(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(goMetricsPage))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if g, err := GoRuntimeOf(addr)(); err != nil || g.Goroutines != 2272 {
		t.Fatalf("GoRuntimeOf = %+v, %v", g, err)
	}
	srv.Close()
	if _, err := GoRuntimeOf(addr)(); err == nil {
		t.Fatal("a closed listener was read")
	}
}

// TestSamplerKeepsTheGoRuntime: the points along a measurement carry what
// the runtime reader said, and the middle's is reported.
func TestSamplerKeepsTheGoRuntime(t *testing.T) {
	s, err := StartSampler(selfPID(), false, 5*time.Millisecond)
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	reads := 0
	s.ReadGoRuntime(func() (GoRuntime, error) {
		reads++
		return GoRuntime{Goroutines: int64(reads), StackBytes: 1 << 20, HeapBytes: 2 << 20}, nil
	})
	for s.pointsRead() < 6 {
		time.Sleep(5 * time.Millisecond)
	}
	u, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	g := u.RSS.MiddleGo
	if g == nil || g.Goroutines < 1 || g.StackBytes != 1<<20 {
		t.Fatalf("middle %+v, along %+v", g, u.RSS.Along)
	}
	for i, p := range u.RSS.Along[1 : len(u.RSS.Along)-1] {
		if p.Go == nil {
			t.Errorf("point %d has no runtime figures: %+v", i+1, p)
		}
	}
}

// pointsRead is how many points along holds now.
func (s *Sampler) pointsRead() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.along)
}
