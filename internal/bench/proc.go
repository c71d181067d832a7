package bench

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of CPU times in /proc/<pid>/stat; it is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcUsage is what a process and the processes it started used over a
// measurement.
type ProcUsage struct {
	PID int `json:"pid"`
	// PeakRSSMB is the largest resident set seen while sampling, summed
	// over the process and its descendants. Pages the processes share, such
	// as the text of one binary that gated runs its plugins from, count
	// once in each.
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// PeakPSSMB is the largest proportional set seen, summed the same way:
	// a page shared by n processes counts 1/n in each, so the sum is the
	// memory the processes take together. It is read every pssEvery
	// samples, and is 0 where the kernel does not report it
	// (/proc/<pid>/smaps_rollup, Linux 4.14 and later).
	PeakPSSMB float64 `json:"peak_pss_mb,omitempty"`
	// CPUSeconds is user plus system time spent over the measurement.
	CPUSeconds float64 `json:"cpu_s"`
	// RSS is the resident set along the measurement: at its start, at
	// its middle (by wall time) and at its end, so a plateau is shown
	// rather than assumed. Along lists more points, evenly spaced in time.
	RSS *RSSAlong `json:"rss,omitempty"`
	// Cores is CPUSeconds over the wall time: 1.0 is one core busy.
	Cores float64 `json:"cores"`
}

// RSSAlong is a process's resident set over a measurement, in MB. The
// Tree figures sum the process and the processes below it (gated's
// plugins); the others are the process alone.
type RSSAlong struct {
	StartMB     float64 `json:"start_mb"`
	MiddleMB    float64 `json:"middle_mb"`
	EndMB       float64 `json:"end_mb"`
	TreeStartMB float64 `json:"tree_start_mb"`
	TreeEndMB   float64 `json:"tree_end_mb"`
	// MiddleGo is the process's Go runtime at the point of the middle,
	// when the sampler could read it (ReadGoRuntime).
	MiddleGo *GoRuntime `json:"middle_go,omitempty"`
	// Along is the process's own resident set at points evenly spaced
	// over the measurement, at most maxRSSPoints of them.
	Along []RSSPoint `json:"along"`
}

// RSSPoint is one reading of a resident set.
type RSSPoint struct {
	// Seconds is the time since the measurement began.
	Seconds float64 `json:"s"`
	MB      float64 `json:"mb"`
	TreeMB  float64 `json:"tree_mb"`
	// Go is what the process's Go runtime said at this point, if read.
	Go *GoRuntime `json:"go,omitempty"`
}

// maxRSSPoints bounds RSSAlong.Along; a longer run keeps every other
// point and samples half as often from then on.
const maxRSSPoints = 64

// procSample reads the CPU time, resident set and proportional set of a
// process from /proc, with tree those of every process below it too
// (gated's plugins). pssBytes is read only withPSS, and is 0 when any of
// them has no smaps_rollup.
func procSample(pid int, tree, withPSS bool) (cpu time.Duration, rssBytes, pssBytes int64, err error) {
	cpu, rssBytes, _, pssBytes, err = procSampleOwn(pid, kidsOf(pid, tree), withPSS)
	return cpu, rssBytes, pssBytes, err
}

// kidsOf is the processes below pid when tree, else none.
func kidsOf(pid int, tree bool) []int {
	if !tree {
		return nil
	}
	return descendants(pid)
}

// procSampleOwn is procSample of pid and the processes kids, found below
// it, that also returns the resident set of pid alone, ownRSS. A kid that
// has ended is left out.
func procSampleOwn(pid int, kids []int, withPSS bool) (cpu time.Duration, rssBytes, ownRSS, pssBytes int64, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	cpu, rssBytes, err = parseProcStat(stat)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	ownRSS = rssBytes
	var pssKnown bool
	if withPSS {
		pssBytes, pssKnown = readPSS(pid)
	}
	for _, child := range kids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		c, r, err := parseProcStat(stat)
		if err != nil {
			continue
		}
		cpu, rssBytes = cpu+c, rssBytes+r
		if withPSS {
			p, ok := readPSS(child)
			pssBytes, pssKnown = pssBytes+p, pssKnown && ok
		}
	}
	if !pssKnown {
		pssBytes = 0
	}
	return cpu, rssBytes, ownRSS, pssBytes, nil
}

// readPSS reads a process's proportional set size.
func readPSS(pid int) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, false
	}
	n, err := parsePSS(data)
	return n, err == nil
}

// parsePSS reads the "Pss:" line of /proc/<pid>/smaps_rollup, in kB, and
// returns it in bytes.
func parsePSS(data []byte) (int64, error) {
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(line, []byte("Pss:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("smaps_rollup: Pss line %q, want a number of kB", truncate(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > 1<<40 {
			return 0, fmt.Errorf("smaps_rollup: Pss %q is not a size in kB", f[0])
		}
		return kb << 10, nil
	}
	return 0, errors.New("smaps_rollup: no Pss line")
}

// descendants lists the processes below pid, from every process's parent
// in /proc. A process that ends meanwhile is skipped: its CPU time leaves
// the sum, so a plugin that exits mid-run is under-counted, not over.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(stat); ok {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, children[p]...)
		queue = append(queue, children[p]...)
	}
	return out
}

// parentOf reads field 4, the parent's pid, of a /proc/<pid>/stat line.
func parentOf(stat []byte) (int, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// parseProcStat reads utime, stime (fields 14 and 15) and rss (field 24,
// in pages) from a /proc/<pid>/stat line. The command name, field 2, is
// in parentheses and may hold spaces or parentheses of its own, so the
// fields are counted from the last ')'.
func parseProcStat(stat []byte) (cpu time.Duration, rssBytes int64, err error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("proc stat: no command name in %q", truncate(stat))
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); field n is f[n-3].
	if len(f) < 22 {
		return 0, 0, fmt.Errorf("proc stat: %d fields after the command name, want at least 22", len(f))
	}
	var n [3]int64
	for k, idx := range []int{14, 15, 24} {
		v, err := strconv.ParseInt(f[idx-3], 10, 64)
		if err != nil || v < 0 {
			return 0, 0, fmt.Errorf("proc stat: field %d is %q, want a whole number", idx, f[idx-3])
		}
		n[k] = v
	}
	cpu = time.Duration(n[0]+n[1]) * time.Second / clockTicks
	return cpu, n[2] * int64(os.Getpagesize()), nil
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// pssEvery is how many samples go by between two readings of the
// proportional set: the kernel walks every page of a process to report
// it, which at every 100 ms sample cost the bench process a tenth of a
// core beside a gated of 550 MB, and once a second still 6% of the bench
// process's CPU beside a gated of 1 GB. The peak proportional set is so
// the largest of readings 5 s apart (and at the start and the end).
const pssEvery = 50

// kidsEvery is how many samples go by between two looks for the processes
// below the sampled one: finding them reads the stat of every process on
// the machine. A plugin started in between is counted from the next look.
const kidsEvery = 10

// Sampler follows one process's resource use while a measurement runs.
type Sampler struct {
	pid     int
	tree    bool
	start   time.Time
	cpu0    time.Duration
	mu      sync.Mutex
	peakRSS int64
	peakPSS int64
	// along is the resident set every stride samples; rss0 and tree0
	// the readings at the start.
	along       []RSSPoint
	stride      int
	rss0, tree0 int64
	// goRuntime, when set, reads the process's Go runtime at each point.
	goRuntime func() (GoRuntime, error)
	err       error
	stop      chan struct{}
	done      chan struct{}
}

// StartSampler begins sampling pid, and with tree every process below it,
// every interval. It fails when the process cannot be read (not Linux, or
// not this user's process).
func StartSampler(pid int, tree bool, every time.Duration) (*Sampler, error) {
	kids := kidsOf(pid, tree)
	cpu, rss, own, pss, err := procSampleOwn(pid, kids, true)
	if err != nil {
		return nil, err
	}
	s := &Sampler{pid: pid, tree: tree, start: time.Now(), cpu0: cpu, peakRSS: rss, peakPSS: pss,
		rss0: own, tree0: rss, stride: 10, stop: make(chan struct{}), done: make(chan struct{})}
	s.along = append(s.along, RSSPoint{MB: mb(own), TreeMB: mb(rss)})
	go s.run(every, kids)
	return s, nil
}

func (s *Sampler) run(every time.Duration, kids []int) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if tick%kidsEvery == 0 {
				kids = kidsOf(s.pid, s.tree)
			}
			_, rss, own, pss, err := procSampleOwn(s.pid, kids, tick%pssEvery == 0)
			s.mu.Lock()
			point, readGo := err == nil && tick%s.stride == 0, s.goRuntime
			s.mu.Unlock()
			var rt *GoRuntime
			if point && readGo != nil {
				// Read outside the lock: it asks the process over HTTP. A
				// point it cannot read has no runtime figures.
				if g, gerr := readGo(); gerr == nil {
					rt = &g
				}
			}
			s.mu.Lock()
			if err != nil && s.err == nil {
				s.err = err
			}
			s.peakRSS = max(s.peakRSS, rss)
			s.peakPSS = max(s.peakPSS, pss)
			if point {
				s.addPoint(time.Since(s.start), own, rss, rt)
			}
			s.mu.Unlock()
		}
	}
}

// ReadGoRuntime has the sampler read the process's Go runtime with read
// at each point along the measurement, beside its resident set.
func (s *Sampler) ReadGoRuntime(read func() (GoRuntime, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.goRuntime = read
}

// addPoint appends a reading to along, halving the points and doubling
// the stride when they reach maxRSSPoints, so a run of any length keeps
// evenly spaced points in bounded memory.
func (s *Sampler) addPoint(at time.Duration, own, tree int64, rt *GoRuntime) {
	s.along = append(s.along, RSSPoint{Seconds: math.Round(at.Seconds()*10) / 10, MB: mb(own), TreeMB: mb(tree), Go: rt})
	if len(s.along) < maxRSSPoints {
		return
	}
	kept := s.along[:0]
	for i, p := range s.along {
		if i%2 == 0 {
			kept = append(kept, p)
		}
	}
	s.along = kept
	s.stride *= 2
}

// middle is the point of along nearest half of wall.
func middle(along []RSSPoint, wall time.Duration) RSSPoint {
	half := wall.Seconds() / 2
	best := along[0]
	for _, p := range along[1:] {
		if math.Abs(p.Seconds-half) < math.Abs(best.Seconds-half) {
			best = p
		}
	}
	return best
}

// strideNow is how many samples go by between two readings now.
func (s *Sampler) strideNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stride
}

func mb(b int64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }

// Stop ends sampling and returns what the process used since the start.
func (s *Sampler) Stop() (ProcUsage, error) {
	close(s.stop)
	<-s.done
	cpu, rss, own, pss, err := procSampleOwn(s.pid, kidsOf(s.pid, s.tree), true)
	wall := time.Since(s.start)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		return ProcUsage{}, err
	}
	if s.err != nil {
		return ProcUsage{}, s.err
	}
	s.peakRSS = max(s.peakRSS, rss)
	s.peakPSS = max(s.peakPSS, pss)
	u := ProcUsage{PID: s.pid, PeakRSSMB: float64(s.peakRSS) / (1 << 20), PeakPSSMB: float64(s.peakPSS) / (1 << 20),
		CPUSeconds: (cpu - s.cpu0).Seconds()}
	s.addPoint(wall, own, rss, nil)
	mid := middle(s.along, wall)
	u.RSS = &RSSAlong{StartMB: mb(s.rss0), MiddleMB: mid.MB, EndMB: mb(own),
		TreeStartMB: mb(s.tree0), TreeEndMB: mb(rss), MiddleGo: mid.Go, Along: slices.Clone(s.along)}
	if wall > 0 {
		u.Cores = u.CPUSeconds / wall.Seconds()
	}
	return u, nil
}
