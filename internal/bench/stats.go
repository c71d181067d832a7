package bench

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Recorder collects the outcome of every proposal of one path. It is safe
// for concurrent use.
type Recorder struct {
	mu         sync.Mutex
	lat        []time.Duration
	unexpected int
	errors     int
	firstErr   string
	bytes      int64 // verdict bytes received
	first      time.Time
	last       time.Time
	// Stage times of answers as expected that told them (StageTimes);
	// toGated and after only from those measured on one clock.
	deciding []time.Duration
	toGated  []time.Duration
	after    []time.Duration
}

// stages files the stage times of one answer as expected.
func (r *Recorder) stages(st *StageTimes) {
	if st == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deciding = append(r.deciding, st.Deciding)
	if st.SameClock {
		r.toGated = append(r.toGated, st.ToGated)
		r.after = append(r.after, st.AfterDeciding)
	}
}

// Done records a proposal answered as expected (ok) or not, after lat,
// with a verdict of size bytes.
func (r *Recorder) Done(start time.Time, lat time.Duration, ok bool, size int) {
	end := start.Add(lat)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lat = append(r.lat, lat)
	if !ok {
		r.unexpected++
	}
	r.bytes += int64(size)
	if r.first.IsZero() || start.Before(r.first) {
		r.first = start
	}
	if end.After(r.last) {
		r.last = end
	}
}

// Fail records a proposal that got no verdict (or could not be sent).
func (r *Recorder) Fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors++
	if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

// note keeps the first unexpected answer, to show what went wrong.
func (r *Recorder) note(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

// Answered is the number of proposals that got a verdict so far.
func (r *Recorder) Answered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lat)
}

// Summary is what one path measured.
type Summary struct {
	Path       string  `json:"path"`
	Answered   int     `json:"answered"`
	Unexpected int     `json:"unexpected"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	PerSecond  float64 `json:"per_second"`
	P50MS      float64 `json:"p50_ms"`
	P90MS      float64 `json:"p90_ms"`
	P99MS      float64 `json:"p99_ms"`
	MaxMS      float64 `json:"max_ms"`
	// WallS is the time from the first proposal sent to the last answer.
	WallS float64 `json:"wall_s"`
	// ReplyBytes is the mean size of an answer.
	ReplyBytes int `json:"reply_bytes"`
	// Stages splits the latency of the answers as expected at gated's
	// decision (StageTimes): "deciding" always, "to_gated" and
	// "after_deciding" when gated runs on this host. Empty for the floor.
	Stages map[string]Quantiles `json:"stages,omitempty"`
}

// Stage names of Summary.Stages, in the order a proposal meets them.
const (
	StageToGated       = "to_gated"
	StageDeciding      = "deciding"
	StageAfterDeciding = "after_deciding"
)

// Quantiles are the percentiles of one stage's times, in milliseconds.
type Quantiles struct {
	N     int     `json:"n"`
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// quantiles sorts d in place and summarises it.
func quantiles(d []time.Duration) Quantiles {
	slices.Sort(d)
	return Quantiles{N: len(d), P50MS: ms(Percentile(d, 50)), P90MS: ms(Percentile(d, 90)),
		P99MS: ms(Percentile(d, 99)), MaxMS: ms(Percentile(d, 100))}
}

// Summary computes the path's figures. Throughput is answers over the time
// from the first send to the last answer of this path.
func (r *Recorder) Summary(path string) Summary {
	r.mu.Lock()
	lat := slices.Clone(r.lat)
	s := Summary{Path: path, Answered: len(lat), Unexpected: r.unexpected, Errors: r.errors, FirstError: r.firstErr}
	if len(lat) > 0 {
		s.ReplyBytes = int(r.bytes / int64(len(lat)))
		s.WallS = r.last.Sub(r.first).Seconds()
	}
	stages := map[string][]time.Duration{StageToGated: slices.Clone(r.toGated),
		StageDeciding: slices.Clone(r.deciding), StageAfterDeciding: slices.Clone(r.after)}
	r.mu.Unlock()
	for name, d := range stages {
		if len(d) > 0 {
			if s.Stages == nil {
				s.Stages = map[string]Quantiles{}
			}
			s.Stages[name] = quantiles(d)
		}
	}
	if len(lat) == 0 {
		return s
	}
	if s.WallS > 0 {
		s.PerSecond = float64(len(lat)) / s.WallS
	}
	q := quantiles(lat)
	s.P50MS, s.P90MS, s.P99MS, s.MaxMS = q.P50MS, q.P90MS, q.P99MS, q.MaxMS
	return s
}

// Percentile is the nearest-rank percentile q (0 < q <= 100) of sorted.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q/100*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
