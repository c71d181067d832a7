package bench

import (
	"os"
	"os/exec"
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
