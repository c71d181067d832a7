package bench

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	line := "4242 (gated (x) y) S 1 4242 4242 0 -1 4194560 4361 0 0 0 250 50 0 0 20 0 12 0 12345 2000000000 1000 18446744073709551615 1 1 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	cpu, rss, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if cpu != 3*time.Second {
		t.Errorf("cpu = %s, want 3s (300 ticks)", cpu)
	}
	if rss != 1000*int64(pageSize()) {
		t.Errorf("rss = %d, want 1000 pages", rss)
	}
	for _, bad := range []string{"", "1 gated S 1", "1 (g) S 1 2 3", "1 (g) S 1 1 1 0 -1 0 0 0 0 0 x 50 0 0 20 0 12 0 1 2 3"} {
		if _, _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) accepted", bad)
		}
	}
}

func TestSamplerReadsItself(t *testing.T) {
	s, err := StartSampler(selfPID(), false, 10*time.Millisecond)
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	end := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(end) {
	}
	u, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if u.PeakRSSMB <= 1 || u.CPUSeconds < 0 {
		t.Errorf("usage = %+v", u)
	}
	if _, err := os.Stat("/proc/self/smaps_rollup"); err == nil && (u.PeakPSSMB <= 1 || u.PeakPSSMB > u.PeakRSSMB) {
		t.Errorf("PSS %.1f MB, RSS %.1f MB: want a PSS above 1 MB and at most the RSS", u.PeakPSSMB, u.PeakRSSMB)
	}
}

func TestParsePSS(t *testing.T) {
	rollup := "55d0c0a2b000-7ffd1a5f3000 ---p 00000000 00:00 0                          [rollup]\nRss:              305056 kB\nPss:              299613 kB\nPss_Anon:         283980 kB\n"
	n, err := parsePSS([]byte(rollup))
	if err != nil || n != 299613<<10 {
		t.Fatalf("parsePSS = %d, %v; want %d", n, err, 299613<<10)
	}
	for _, bad := range []string{"", "Rss: 1 kB\n", "Pss: 12\n", "Pss: x kB\n", "Pss: -1 kB\n", "Pss: 1 MB\n", "Pss: 99999999999999 kB\n"} {
		if _, err := parsePSS([]byte(bad)); err == nil {
			t.Errorf("parsePSS(%q) accepted", bad)
		}
	}
}

func FuzzParsePSS(f *testing.F) {
	f.Add([]byte("Rss: 10 kB\nPss: 7 kB\nPss_Anon: 5 kB\n"))
	f.Add([]byte("Pss:\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := parsePSS(b)
		if err == nil && (n < 0 || n > 1<<50) {
			t.Fatalf("parsePSS(%q) = %d", b, n)
		}
	})
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("4242 (gated) S 1 4242 4242 0 -1 4194560 4361 0 0 0 250 50 0 0 20 0 12 0 12345 2000000000 1000 1"))
	f.Add([]byte("1 ()) R"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cpu, rss, err := parseProcStat(b)
		if err == nil && (cpu < 0 || rss < 0) {
			t.Fatalf("negative usage %s %d", cpu, rss)
		}
	})
}

func pageSize() int { return os.Getpagesize() }

func selfPID() int { return os.Getpid() }

// TestSamplerCountsChildren checks that a child's resident set is counted
// with its parent's: gated's plugins are its children.
func TestSamplerCountsChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	_, alone, _ := parseSelf(t)
	pssAlone, _ := readPSS(os.Getpid())
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command")
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if !slices.Contains(descendants(os.Getpid()), cmd.Process.Pid) {
		t.Fatalf("child %d not among %v", cmd.Process.Pid, descendants(os.Getpid()))
	}
	_, withChild, pssWithChild, err := procSample(os.Getpid(), true, true)
	if err != nil {
		t.Fatal(err)
	}
	if withChild <= alone {
		t.Errorf("rss with a child %d <= alone %d", withChild, alone)
	}
	if pssAlone > 0 && pssWithChild <= pssAlone {
		t.Errorf("pss with a child %d <= alone %d", pssWithChild, pssAlone)
	}
	// Shared pages count once in the proportional sum, so it is never
	// above the resident sum.
	if pssWithChild > withChild {
		t.Errorf("pss %d above rss %d", pssWithChild, withChild)
	}
}

func parseSelf(t *testing.T) (time.Duration, int64, error) {
	t.Helper()
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	return parseProcStat(stat)
}

// TestSamplerRSSAlong checks that the resident set is followed along the
// measurement: memory taken after the start shows at the end and not at
// the start, and the points stay few and in order however long it runs.
func TestSamplerRSSAlong(t *testing.T) {
	s, err := StartSampler(selfPID(), false, time.Millisecond)
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	const size = 96 << 20
	held := make([]byte, size)
	for i := range held {
		held[i] = byte(i)
	}
	// Long enough for the points to be halved at least once.
	for s.strideNow() < 20 {
		time.Sleep(5 * time.Millisecond)
	}
	u, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	r := u.RSS
	if r == nil {
		t.Fatal("no RSS along the run")
	}
	if grew := r.EndMB - r.StartMB; grew < 80 {
		t.Errorf("RSS %.1f MB at the start, %.1f MB at the end: want the %d MB taken meanwhile to show", r.StartMB, r.EndMB, size>>20)
	}
	if r.MiddleMB < r.StartMB || r.MiddleMB > max(r.EndMB, u.PeakRSSMB) {
		t.Errorf("middle %.1f MB is outside start %.1f and peak %.1f", r.MiddleMB, r.StartMB, u.PeakRSSMB)
	}
	if len(r.Along) < 3 || len(r.Along) > maxRSSPoints {
		t.Errorf("%d points along the run, want 3 to %d", len(r.Along), maxRSSPoints)
	}
	for i := 1; i < len(r.Along); i++ {
		if r.Along[i].Seconds < r.Along[i-1].Seconds {
			t.Errorf("point %d at %.1f s comes before point %d at %.1f s", i, r.Along[i].Seconds, i-1, r.Along[i-1].Seconds)
		}
	}
	runtime.KeepAlive(held)
}

func TestRSSPointsStayBounded(t *testing.T) {
	s := &Sampler{stride: 1}
	for i := range 10000 {
		if i%s.stride == 0 {
			s.addPoint(time.Duration(i)*time.Second, 1<<20, 2<<20, nil)
		}
	}
	if len(s.along) >= maxRSSPoints || len(s.along) < maxRSSPoints/4 {
		t.Fatalf("%d points after 10,000 samples, want %d to %d", len(s.along), maxRSSPoints/4, maxRSSPoints-1)
	}
	step := s.along[1].Seconds - s.along[0].Seconds
	for i := 2; i < len(s.along); i++ {
		if d := s.along[i].Seconds - s.along[i-1].Seconds; d != step {
			t.Fatalf("points %d and %d are %.0f s apart, want every %.0f s", i-1, i, d, step)
		}
	}
	if last := s.along[len(s.along)-1].Seconds; last < 9000 {
		t.Errorf("last point at %.0f s of 10,000: the points must span the run", last)
	}
	if m := middle(s.along, 10000*time.Second); m.Seconds < 4000 || m.Seconds > 6000 {
		t.Errorf("middle at %.0f s, want near 5,000", m.Seconds)
	}
}
