package main

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// decide makes decision i of the workload; worker is the caller's index,
// for per-caller state.
type decide func(ctx context.Context, worker, i int) error

// measurement is one mode at one concurrency.
type measurement struct {
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency"`
	Decisions   int     `json:"decisions"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"decisions_per_second"`
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	MaxUS       float64 `json:"max_us"`
	// DriverCores is the CPU this process used, in cores (CPU time over
	// wall time); OPACores is the OPA server's. Both are left out where
	// /proc cannot tell.
	DriverCores float64 `json:"driver_cores,omitempty"`
	OPACores    float64 `json:"opa_cores,omitempty"`
	// DeciderCPUus is the CPU the deciding side spent per decision, in
	// microseconds: OPA's server process, or for gated in process this
	// process. Unlike the rate, it holds up when other work shares the
	// machine. Left out where /proc cannot tell.
	DeciderCPUus float64 `json:"decider_cpu_us_per_decision,omitempty"`
}

// measure makes decisions 0..n-1 with c callers and times each. The first
// error stops every caller and is returned.
func measure(ctx context.Context, mode string, c, n int, opaPID int, d decide) (measurement, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	lat := make([][]time.Duration, c)
	cpu0 := sampleCPU(opaPID)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range c {
		lat[w] = make([]time.Duration, 0, n/c+1)
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t := time.Now()
				if err := d(ctx, w, i); err != nil {
					cancel(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	cpu1 := sampleCPU(opaPID)
	if err := context.Cause(ctx); err != nil {
		return measurement{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	m := measurement{
		Mode: mode, Concurrency: c, Decisions: n, Seconds: wall.Seconds(),
		PerSecond: float64(n) / wall.Seconds(),
		P50us:     micros(quantile(all, 0.50)), P99us: micros(quantile(all, 0.99)), MaxUS: micros(all[len(all)-1]),
	}
	if cpu0.self >= 0 && cpu1.self >= 0 {
		m.DriverCores = (cpu1.self - cpu0.self).Seconds() / wall.Seconds()
	}
	if cpu0.opa >= 0 && cpu1.opa >= 0 {
		m.OPACores = (cpu1.opa - cpu0.opa).Seconds() / wall.Seconds()
	}
	return m, nil
}

// quantile is the q-quantile of sorted durations, nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// cpuSample is the CPU time used so far by this process and by OPA; -1
// where it is not known.
type cpuSample struct{ self, opa time.Duration }

func sampleCPU(opaPID int) cpuSample {
	s := cpuSample{self: procCPU("self"), opa: -1}
	if opaPID > 0 {
		s.opa = procCPU(strconv.Itoa(opaPID))
	}
	return s
}

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times; it
// is 100 on every common architecture.
const clockTicks = 100

// procCPU reads the user and system time of a process from
// /proc/<pid>/stat, or returns -1 where there is no such file.
func procCPU(pid string) time.Duration {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return -1
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields from after it. utime and stime are fields 14 and 15.
	s := string(raw)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return -1
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}
