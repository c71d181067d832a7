package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one bench run measured; `gated-bench --json`
// writes it as is.
type Report struct {
	Mode    string    `json:"mode"` // embedded or external
	Machine Machine   `json:"machine"`
	Config  Config    `json:"config"`
	Gated   []Summary `json:"gated"`
	Probe   *Summary  `json:"probe,omitempty"`
	Floor   []Summary `json:"floor,omitempty"`
	// Ratio is gated's throughput over the floor's, per path and "all".
	Ratio     map[string]float64 `json:"ratio,omitempty"`
	GatedProc *ProcUsage         `json:"gated_process,omitempty"`
	BenchProc *ProcUsage         `json:"bench_process,omitempty"`
	// AuditBytes is the audit stream's growth per proposal, which the
	// floor's log record copies.
	AuditBytes int `json:"audit_bytes_per_proposal,omitempty"`
	// AuditDiskBytes is AuditBytes times the share of its bytes the
	// audit stream takes on disk at the end, measured in the embedded
	// gated's files. The server compresses each full block; the block
	// being written is whole, so the share falls as the stream grows.
	AuditDiskBytes int   `json:"audit_disk_bytes_per_proposal,omitempty"`
	LLMCalls       int64 `json:"llm_calls,omitempty"`
	// LLMArrivalMS is how long the scripted model's calls took to arrive,
	// first to last: how fast gated started its reviews.
	LLMArrivalMS float64 `json:"llm_arrival_ms,omitempty"`
	// Prefill is what was written into the store before the measurement
	// (gated-bench --prefill), and the store's size then.
	Prefill *PrefillReport `json:"prefill,omitempty"`
	Notes   []string       `json:"notes,omitempty"`
}

// PrefillReport is a prefill's result and the store it left.
type PrefillReport struct {
	PrefillResult
	// AuditRecords and AuditBytes are the audit stream's size after the
	// prefill, BucketMessages and BucketBytes the verdict bucket's.
	AuditRecords   uint64 `json:"store_audit_records"`
	AuditBytes     uint64 `json:"store_audit_bytes"`
	BucketMessages uint64 `json:"store_bucket_messages"`
	BucketBytes    uint64 `json:"store_bucket_bytes"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"go_version"`
	Gated     string `json:"gated_version"`
}

// Config is the run's settings.
type Config struct {
	N           int          `json:"n"`
	Mix         map[Path]int `json:"mix"`
	Concurrency map[Path]int `json:"concurrency"`
	Counts      map[Path]int `json:"counts"`
	LLMLatency  string       `json:"llm_latency,omitempty"`
	ProbeRate   float64      `json:"probe_rate,omitempty"`
	Ramp        string       `json:"ramp,omitempty"`
	Warmup      int          `json:"warmup"`
	Started     time.Time    `json:"started"`
}

// Combine sums recorders into one "all" summary: answers over the span
// from the first send of any path to the last answer of any.
func Combine(name string, recs map[Path]*Recorder) Summary {
	all := &Recorder{}
	for _, p := range Paths {
		r := recs[p]
		if r == nil {
			continue
		}
		r.mu.Lock()
		all.lat = append(all.lat, r.lat...)
		all.unexpected += r.unexpected
		all.errors += r.errors
		all.bytes += r.bytes
		all.deciding = append(all.deciding, r.deciding...)
		all.toGated = append(all.toGated, r.toGated...)
		all.after = append(all.after, r.after...)
		if all.firstErr == "" {
			all.firstErr = r.firstErr
		}
		if !r.first.IsZero() && (all.first.IsZero() || r.first.Before(all.first)) {
			all.first = r.first
		}
		if r.last.After(all.last) {
			all.last = r.last
		}
		r.mu.Unlock()
	}
	return all.Summary(name)
}

// Summaries lists each path's summary, in report order, then "all" when
// more than one path ran.
func Summaries(recs map[Path]*Recorder) []Summary {
	var out []Summary
	for _, p := range Paths {
		if r := recs[p]; r != nil {
			out = append(out, r.Summary(string(p)))
		}
	}
	if len(out) > 1 {
		out = append(out, Combine("all", recs))
	}
	return out
}

// Overall is the "all" row of a run's summaries, or its only row.
func Overall(rows []Summary) Summary {
	for _, s := range rows {
		if s.Path == "all" {
			return s
		}
	}
	if len(rows) > 0 {
		return rows[0]
	}
	return Summary{}
}

// Ratios is gated's throughput over the floor's, for each row both have.
func Ratios(gated, floor []Summary) map[string]float64 {
	out := map[string]float64{}
	for _, g := range gated {
		i := slices.IndexFunc(floor, func(f Summary) bool { return f.Path == g.Path })
		if i >= 0 && floor[i].PerSecond > 0 {
			out[g.Path] = math.Round(g.PerSecond/floor[i].PerSecond*1000) / 1000
		}
	}
	return out
}

// Print writes the report as tables.
func (r *Report) Print(w io.Writer) {
	ramp := ""
	if r.Config.Ramp != "" {
		ramp = ", senders started over " + r.Config.Ramp
	}
	fmt.Fprintf(w, "gated bench (%s): %d proposals%s, %d CPUs, %s %s/%s\n", r.Mode, r.Config.N, ramp, r.Machine.CPUs,
		r.Machine.GoVersion, r.Machine.GOOS, r.Machine.GOARCH)
	table := func(title string, rows []Summary, ratio bool) {
		if len(rows) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s\n", title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := "path\tanswered\tunexpected\terrors\tper s\tp50 ms\tp90 ms\tp99 ms\tmax ms\t"
		if ratio {
			head += "× floor\t"
		}
		fmt.Fprintln(tw, head)
		for _, s := range rows {
			line := fmt.Sprintf("%s\t%d\t%d\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t", s.Path, s.Answered, s.Unexpected,
				s.Errors, s.PerSecond, s.P50MS, s.P90MS, s.P99MS, s.MaxMS)
			if ratio {
				if v, ok := r.Ratio[s.Path]; ok {
					line += fmt.Sprintf("%.2f\t", v)
				} else {
					line += "—\t"
				}
			}
			fmt.Fprintln(tw, line)
		}
		_ = tw.Flush()
	}
	if p := r.Prefill; p != nil {
		fmt.Fprintf(w, "\nprefilled: %s\nstore before measuring: %s audit records (%.0f MB), %s bucket messages (%.0f MB)\n", p.PrefillResult,
			Thousands(int(p.AuditRecords)), float64(p.AuditBytes)/(1<<20), Thousands(int(p.BucketMessages)), float64(p.BucketBytes)/(1<<20))
	}
	table("gated (publish → verdict)", r.Gated, len(r.Floor) > 0)
	if r.Probe != nil {
		table(fmt.Sprintf("probe: policy-decided proposals at %.0f/s alongside the load", r.Config.ProbeRate), []Summary{*r.Probe}, false)
	}
	stages(w, append(slices.Clone(r.Gated), probeRows(r.Probe)...))
	table("floor: bare JetStream (publish → durable consume → log append → reply)", r.Floor, false)
	if r.GatedProc != nil {
		fmt.Fprintf(w, "\ngated and its plugin processes: peak RSS %.0f MB%s, CPU %.1f s (%.2f cores)\n",
			r.GatedProc.PeakRSSMB, pssNote(r.GatedProc), r.GatedProc.CPUSeconds, r.GatedProc.Cores)
		if a := r.GatedProc.RSS; a != nil {
			fmt.Fprintf(w, "gated's own RSS along the run: %.0f MB at the start, %.0f MB at the middle, %.0f MB at the end (with its plugins %.0f → %.0f MB)\n",
				a.StartMB, a.MiddleMB, a.EndMB, a.TreeStartMB, a.TreeEndMB)
			if g := a.MiddleGo; g != nil {
				fmt.Fprintf(w, "gated's Go runtime at the middle: %s goroutines, %.0f MB of their stacks, %.0f MB of heap in use\n",
					Thousands(int(g.Goroutines)), mb(g.StackBytes), mb(g.HeapBytes))
			}
		}
	}
	if r.BenchProc != nil {
		fmt.Fprintf(w, "bench process: peak RSS %.0f MB, CPU %.1f s (%.2f cores)\n", r.BenchProc.PeakRSSMB, r.BenchProc.CPUSeconds, r.BenchProc.Cores)
	}
	if r.AuditBytes > 0 {
		fmt.Fprintf(w, "audit stream: %d bytes per proposal", r.AuditBytes)
		if r.AuditDiskBytes > 0 {
			fmt.Fprintf(w, ", %d on disk (full blocks compressed, the last one not)", r.AuditDiskBytes)
		}
		fmt.Fprintln(w)
	}
	if r.LLMCalls > 0 {
		fmt.Fprintf(w, "scripted model: %d calls, %s each, arriving over %.0f ms\n", r.LLMCalls, r.Config.LLMLatency, r.LLMArrivalMS)
	}
	for _, s := range append(slices.Clone(r.Gated), r.Floor...) {
		if s.FirstError != "" {
			fmt.Fprintf(w, "first problem on %s: %s\n", s.Path, oneLine(s.FirstError))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func probeRows(p *Summary) []Summary {
	if p == nil {
		return nil
	}
	return []Summary{*p}
}

// stages writes where the time of each row's answers went (Summary.Stages),
// p50 and p99 of each stage.
func stages(w io.Writer, rows []Summary) {
	rows = slices.DeleteFunc(slices.Clone(rows), func(s Summary) bool { return len(s.Stages) == 0 })
	if len(rows) == 0 {
		return
	}
	names := []string{StageToGated, StageDeciding, StageAfterDeciding}
	heads := map[string]string{StageToGated: "to gated", StageDeciding: "deciding", StageAfterDeciding: "after deciding"}
	fmt.Fprintf(w, "\nwhere the time goes (p50 / p99 ms)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "path\t"
	for _, n := range names {
		head += heads[n] + "\t"
	}
	fmt.Fprintln(tw, head)
	sameClock := false
	for _, s := range rows {
		line := s.Path + "\t"
		for _, n := range names {
			q, ok := s.Stages[n]
			if !ok {
				line += "—\t"
				continue
			}
			line += fmt.Sprintf("%.2f / %.2f\t", q.P50MS, q.P99MS)
		}
		if _, ok := s.Stages[StageToGated]; ok {
			sameClock = true
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
	if sameClock {
		fmt.Fprintln(w, "  to gated: the publish, the stream, the delivery and the hand-over to a decider; deciding: the verdict's")
		fmt.Fprintln(w, "  latency_ms (policy, review); after deciding: the audit trail sealed, the verdict stored, published, received")
	} else {
		fmt.Fprintln(w, "  deciding: the verdict's latency_ms (policy, review); the other stages need gated on this host (--pid)")
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// pssNote gives the proportional set beside the resident set of a
// process tree, when the kernel reports it: shared pages counted once.
func pssNote(u *ProcUsage) string {
	if u.PeakPSSMB <= 0 {
		return ""
	}
	return fmt.Sprintf(" (PSS %.0f MB: pages the processes share counted once)", u.PeakPSSMB)
}
