package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gated/gated"
)

func TestParseMix(t *testing.T) {
	m, err := ParseMix("denied=2, read=1,llm=0")
	if err != nil {
		t.Fatal(err)
	}
	if m[PathDenied] != 2 || m[PathRead] != 1 || m[PathLLM] != 0 || m[PathPlugin] != 0 {
		t.Fatalf("mix = %v", m)
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"denied", "want path=number"},
		{"write=1", `unknown path "write"`},
		{"read=1,read=2", "given twice"},
		{"read=-1", "not a whole number"},
		{"read=x", "not a whole number"},
		{"read=2000000", "not a whole number"},
		{"read=0,denied=0", "weight 0"},
	} {
		if _, err := ParseMix(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseMix(%q) = %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

func TestSplitAddsUp(t *testing.T) {
	for _, tc := range []struct {
		mix  Mix
		n    int
		want map[Path]int
	}{
		{Mix{PathDenied: 1, PathRead: 1, PathPlugin: 1}, 10, map[Path]int{PathDenied: 4, PathRead: 3, PathPlugin: 3}},
		{Mix{PathDenied: 1, PathRead: 1}, 1, map[Path]int{PathDenied: 1, PathRead: 0}},
		{Mix{PathLLM: 3, PathRead: 1}, 8, map[Path]int{PathLLM: 6, PathRead: 2}},
		{Mix{PathPlugin: 1, PathRead: 0}, 5, map[Path]int{PathPlugin: 5}},
	} {
		got := tc.mix.Split(tc.n)
		total := 0
		for p, n := range got {
			total += n
			if n != tc.want[p] {
				t.Errorf("%v.Split(%d)[%s] = %d, want %d", tc.mix, tc.n, p, n, tc.want[p])
			}
		}
		if total != tc.n {
			t.Errorf("%v.Split(%d) gives %d in all", tc.mix, tc.n, total)
		}
	}
}

func TestParseConcurrency(t *testing.T) {
	mix := Mix{PathDenied: 1, PathRead: 1, PathLLM: 2}
	c, err := ParseConcurrency("64", mix)
	if err != nil {
		t.Fatal(err)
	}
	if c[PathDenied] != 16 || c[PathRead] != 16 || c[PathLLM] != 32 || c[PathPlugin] != 0 {
		t.Fatalf("shared 64 = %v", c)
	}
	c, err = ParseConcurrency("llm=2000,read=8", mix)
	if err != nil {
		t.Fatal(err)
	}
	if c[PathLLM] != 2000 || c[PathRead] != 8 || c[PathDenied] != 1 || c.Total() != 2009 {
		t.Fatalf("per path = %v", c)
	}
	if c, _ := ParseConcurrency("1", mix); c[PathDenied] != 1 || c[PathRead] != 1 || c[PathLLM] != 1 {
		t.Fatalf("every path of the mix gets at least 1: %v", c)
	}
	for _, tc := range []struct{ in, want string }{
		{"0", "at least 1"},
		{"-3", "at least 1"},
		{"llm=0", "needs at least 1"},
		{"llm", "want path=number"},
	} {
		if _, err := ParseConcurrency(tc.in, mix); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConcurrency(%q) = %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 90: 90 * time.Millisecond,
		99: 99 * time.Millisecond, 100: 100 * time.Millisecond, 0.5: time.Millisecond} {
		if got := Percentile(lat, q); got != want {
			t.Errorf("p%g = %s, want %s", q, got, want)
		}
	}
	if got := Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one = %s", got)
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("p50 of none = %s", got)
	}
}

func TestRecorderSummary(t *testing.T) {
	r := &Recorder{}
	t0 := time.Unix(1000, 0)
	for i := range 10 {
		r.Done(t0.Add(time.Duration(i)*100*time.Millisecond), time.Duration(i+1)*time.Millisecond, i != 3, 100)
	}
	r.Fail(errors.New("no verdict"))
	s := r.Summary("read")
	if s.Answered != 10 || s.Unexpected != 1 || s.Errors != 1 || s.FirstError != "no verdict" || s.ReplyBytes != 100 {
		t.Fatalf("summary = %+v", s)
	}
	// From the first send (t0) to the last answer (t0+900ms+10ms).
	if s.WallS != 0.91 || s.PerSecond < 10.98 || s.PerSecond > 10.99 {
		t.Errorf("wall %g s, %g/s; want 0.91 s, 10.99/s", s.WallS, s.PerSecond)
	}
	if s.P50MS != 5 || s.P90MS != 9 || s.P99MS != 10 || s.MaxMS != 10 {
		t.Errorf("latency = %+v", s)
	}
}

func TestCombineAndRatios(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a, b := &Recorder{}, &Recorder{}
	a.Done(t0, time.Second, true, 10)
	b.Done(t0.Add(time.Second), time.Second, true, 30)
	rows := Summaries(map[Path]*Recorder{PathDenied: a, PathRead: b})
	if len(rows) != 3 || rows[2].Path != "all" || rows[2].Answered != 2 || rows[2].WallS != 2 || rows[2].ReplyBytes != 20 {
		t.Fatalf("rows = %+v", rows)
	}
	floor := []Summary{{Path: "denied", PerSecond: 4}, {Path: "all", PerSecond: 0}}
	got := Ratios(rows, floor)
	if len(got) != 1 || got["denied"] != 0.25 {
		t.Fatalf("ratios = %v", got)
	}
}

// A verdict's decided_at and latency_ms split the wait into the time
// before gated started deciding, the deciding, and the time after; only
// the deciding is gated's own clock alone.
func TestStageTimes(t *testing.T) {
	sent := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	decided := sent.Add(10 * time.Millisecond)
	r := reply{sent: sent, at: decided.Add(3 * time.Millisecond)}
	st := stageTimes(r, decided, 6.5, true)
	want := StageTimes{ToGated: 3500 * time.Microsecond, Deciding: 6500 * time.Microsecond, AfterDeciding: 3 * time.Millisecond, SameClock: true}
	if st == nil || *st != want {
		t.Fatalf("stages = %+v, want %+v", st, want)
	}
	if st.ToGated+st.Deciding+st.AfterDeciding != r.at.Sub(r.sent) {
		t.Errorf("the stages do not add up to the wait")
	}
	if st := stageTimes(r, decided, 6.5, false); st == nil || *st != (StageTimes{Deciding: 6500 * time.Microsecond}) {
		t.Errorf("on another host's clock: %+v, want the deciding only", st)
	}
	// Clocks that disagree by a little never give a negative stage.
	if st := stageTimes(reply{sent: sent, at: decided.Add(-time.Millisecond)}, decided, 20, true); st.ToGated != 0 || st.AfterDeciding != 0 || st.Deciding != 20*time.Millisecond {
		t.Errorf("skewed clocks: %+v", st)
	}
	// A verdict without the figures has no stages.
	if st := stageTimes(r, time.Time{}, 6.5, true); st != nil {
		t.Errorf("no decided_at: %+v", st)
	}
	if st := stageTimes(r, decided, -1, true); st != nil {
		t.Errorf("negative latency_ms: %+v", st)
	}
}

// Stage times come from answers as expected; the summary gives their
// percentiles per stage, "all" merges them, and the report prints them.
func TestRecorderStages(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a, b := &Recorder{}, &Recorder{}
	for i := range 100 {
		ms := time.Duration(i+1) * time.Millisecond
		record(a, t0, 3*ms, Answer{Size: 1, Stages: &StageTimes{ToGated: ms, Deciding: ms, AfterDeciding: ms, SameClock: true}}, nil)
	}
	// Unexpected answers, and answers without stages, leave them out.
	record(a, t0, time.Hour, Answer{Size: 1, Stages: &StageTimes{Deciding: time.Hour}}, &UnexpectedError{ID: "x"})
	record(a, t0, time.Second, Answer{Size: 1}, nil)
	record(b, t0, time.Second, Answer{Size: 1, Stages: &StageTimes{Deciding: 500 * time.Millisecond}}, nil)

	s := a.Summary("denied")
	for _, name := range []string{StageToGated, StageDeciding, StageAfterDeciding} {
		q := s.Stages[name]
		if q.N != 100 || q.P50MS != 50 || q.P90MS != 90 || q.P99MS != 99 || q.MaxMS != 100 {
			t.Errorf("%s = %+v", name, q)
		}
	}
	rows := Summaries(map[Path]*Recorder{PathDenied: a, PathRead: b})
	if got := rows[1].Stages; len(got) != 1 || got[StageDeciding].N != 1 {
		t.Errorf("read, measured on another clock: %+v", got)
	}
	all := rows[2].Stages
	if all[StageDeciding].N != 101 || all[StageDeciding].MaxMS != 500 || all[StageToGated].N != 100 {
		t.Errorf("all = %+v", all)
	}
	if (&Recorder{}).Summary("floor").Stages != nil {
		t.Error("a path without stage times reports stages")
	}

	var out strings.Builder
	(&Report{Gated: rows}).Print(&out)
	for _, want := range []string{`where the time goes \(p50 / p99 ms\)`, `denied +50\.00 / 99\.00 +50\.00 / 99\.00 +50\.00 / 99\.00\n`,
		`read +— +500\.00 / 500\.00 +—\n`, `after deciding: the audit trail sealed`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("report lacks %s:\n%s", want, out.String())
		}
	}
	out.Reset()
	(&Report{Gated: rows[1:2]}).Print(&out)
	if !strings.Contains(out.String(), "the other stages need gated on this host") {
		t.Errorf("a report without same-clock stages does not say why:\n%s", out.String())
	}
}

func TestProposalsMatchTheirPath(t *testing.T) {
	g := Proposals{Tenant: "acme", Nonce: "n1", Pad: 10}
	seen := map[string]bool{}
	for _, p := range Paths {
		for i := range 3 {
			pr := g.New(p, i)
			if seen[pr.ID] {
				t.Fatalf("id %s twice", pr.ID)
			}
			seen[pr.ID] = true
			if pr.Flags.SkipReview != (p == PathDenied) || (pr.Class == gated.ClassRead) != (p == PathRead) ||
				(pr.Reviewer == LLMPersona) != (p == PathLLM) {
				t.Errorf("%s proposal %d = %+v", p, i, pr)
			}
			if !strings.HasSuffix(pr.Reason, "..........") {
				t.Errorf("pad missing: %q", pr.Reason)
			}
		}
	}
}

// TestProposalsAreValid runs every path's proposal through the engine's
// own decoder: a bench proposal that gated would call invalid measures
// nothing.
func TestProposalsAreValid(t *testing.T) {
	g := Proposals{Tenant: "acme", Nonce: "n1"}
	for _, p := range Paths {
		pr := g.New(p, 7)
		data := mustJSON(t, pr)
		if _, err := gated.DecodeProposal(data, "acme", pr.Action, gated.Limits{}); err != nil {
			t.Errorf("%s: %v\n%s", p, err, data)
		}
	}
}

func TestDriveRunsEveryProposalOnce(t *testing.T) {
	plan := Plan{Counts: map[Path]int{PathDenied: 50, PathRead: 30}, Concurrency: Concurrency{PathDenied: 4, PathRead: 7}}
	var mu = make(chan struct{}, 1)
	sent := map[string]int{}
	var inFlight, peak atomic.Int64
	var done atomic.Int64
	recs := Drive(context.Background(), plan, func(_ context.Context, p Path, i int) (Answer, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		mu <- struct{}{}
		sent[fmt.Sprintf("%s-%d", p, i)]++
		<-mu
		time.Sleep(time.Millisecond)
		switch {
		case p == PathRead && i == 5:
			return Answer{}, errors.New("lost")
		case p == PathRead && i == 6:
			return Answer{Size: 9}, &UnexpectedError{ID: "x", Outcome: gated.OutcomeError, Reason: "boom"}
		}
		return Answer{Size: 9}, nil
	}, &done)
	if len(sent) != 80 || done.Load() != 80 {
		t.Fatalf("sent %d distinct, done %d; want 80", len(sent), done.Load())
	}
	for k, n := range sent {
		if n != 1 {
			t.Errorf("%s sent %d times", k, n)
		}
	}
	if peak.Load() > 11 {
		t.Errorf("peak in flight %d > 4+7", peak.Load())
	}
	d, r := recs[PathDenied].Summary("denied"), recs[PathRead].Summary("read")
	if d.Answered != 50 || d.Errors != 0 || r.Answered != 29 || r.Errors != 1 || r.Unexpected != 1 {
		t.Fatalf("denied %+v\nread %+v", d, r)
	}
}

// With a ramp, the k-th of C senders sends its first proposal no sooner
// than k/C of the ramp after the start, and every proposal still goes
// once. A cancelled run stops senders still waiting to start.
func TestDriveRamps(t *testing.T) {
	const senders, ramp = 4, 200 * time.Millisecond
	plan := Plan{Counts: map[Path]int{PathDenied: senders}, Concurrency: Concurrency{PathDenied: senders}, Ramp: ramp}
	start := time.Now()
	var mu sync.Mutex
	var offsets []time.Duration
	recs := Drive(context.Background(), plan, func(context.Context, Path, int) (Answer, error) {
		mu.Lock()
		offsets = append(offsets, time.Since(start))
		mu.Unlock()
		time.Sleep(ramp) // each sender sends once: the first send is its only one
		return Answer{Size: 1}, nil
	}, nil)
	if got := recs[PathDenied].Answered(); got != senders {
		t.Fatalf("answered %d, want %d", got, senders)
	}
	slices.Sort(offsets)
	for k, off := range offsets {
		if due := ramp * time.Duration(k) / senders; off < due {
			t.Errorf("send %d went at %s, before its start %s", k, off, due)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var sent atomic.Int64
	Drive(ctx, Plan{Counts: map[Path]int{PathRead: 10}, Concurrency: Concurrency{PathRead: 10}, Ramp: time.Hour},
		func(context.Context, Path, int) (Answer, error) { sent.Add(1); return Answer{Size: 1}, nil }, nil)
	if n := sent.Load(); n != 0 {
		t.Errorf("a cancelled run sent %d proposals", n)
	}
}

func TestProbeIsOpenLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var paths [2]atomic.Int64
	rec := Probe(ctx, 100, func(_ context.Context, p Path, _ int) (Answer, error) {
		if p == PathDenied {
			paths[0].Add(1)
		} else {
			paths[1].Add(1)
		}
		// Far slower than the rate: an open loop keeps sending anyway.
		time.Sleep(100 * time.Millisecond)
		return Answer{Size: 1}, nil
	})
	s := rec.Summary("probe")
	if s.Answered < 20 || s.Answered > 40 {
		t.Fatalf("answered %d in 300ms at 100/s with 100ms answers; want about 30", s.Answered)
	}
	if d, r := paths[0].Load(), paths[1].Load(); d-r > 1 || r-d > 1 {
		t.Errorf("denied %d, read %d: want them in turn", d, r)
	}
	if s.P50MS < 100 {
		t.Errorf("p50 %g ms is below the answer time", s.P50MS)
	}
}

func FuzzParseMix(f *testing.F) {
	for _, s := range []string{"denied=1,read=1", "llm=2000", "read=0,denied=0", "=,", "plugin=1,plugin=1", "read= 3 "} {
		f.Add(s, "64")
		f.Add(s, "llm=3,read=1")
	}
	f.Fuzz(func(t *testing.T, mix, conc string) {
		m, err := ParseMix(mix)
		if err != nil {
			if m != nil {
				t.Fatal("a mix with an error")
			}
			return
		}
		n := 1 + len(mix)%1000
		total := 0
		for p, c := range m.Split(n) {
			if c < 0 || m[p] == 0 && c > 0 {
				t.Fatalf("split gives %d to %s of weight %d", c, p, m[p])
			}
			total += c
		}
		if total != n {
			t.Fatalf("split of %d adds up to %d", n, total)
		}
		c, err := ParseConcurrency(conc, m)
		if err != nil {
			return
		}
		for _, p := range Paths {
			if m[p] > 0 && c[p] < 1 {
				t.Fatalf("path %s of the mix has concurrency %d", p, c[p])
			}
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestBenchEnvDropsGatedSettings(t *testing.T) {
	got := benchEnv([]string{"PATH=/bin", "GATED_NATS_URL=nats://elsewhere:4222", "GATED_CONFIG=x.yaml", "HOME=/h", "NOT_GATED_X=1"})
	if !slices.Equal(got, []string{"PATH=/bin", "HOME=/h", "NOT_GATED_X=1"}) {
		t.Fatalf("env = %v", got)
	}
}

func TestServeEnvPutsExtraSettingsLast(t *testing.T) {
	got := serveEnv([]string{"GOGC=50", "GATED_NATS_URL=nats://elsewhere:4222", "HOME=/h"}, "http://127.0.0.1:9/v1",
		[]string{"GOGC=200", "GOMEMLIMIT=256MiB"})
	want := []string{"GOGC=50", "HOME=/h", "GATED_OPENAI_COMPATIBLE_BASE_URL=http://127.0.0.1:9/v1", "GOGC=200", "GOMEMLIMIT=256MiB"}
	if !slices.Equal(got, want) {
		t.Fatalf("env = %v\nwant  %v", got, want)
	}
	// exec takes the last value of a repeated variable.
	cmd := exec.Command("/bin/sh", "-c", "echo $GOGC")
	cmd.Env = got
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != "200" {
		t.Fatalf("GOGC in the child = %q, want 200", out)
	}
}

func TestCheckEnv(t *testing.T) {
	for _, kv := range []string{"GOGC=200", "GOMEMLIMIT=256MiB", "GATED_AUDIT_PUBLISH=batches", "X_1=", "_A=b=c"} {
		if err := CheckEnv(kv); err != nil {
			t.Errorf("CheckEnv(%q) = %v", kv, err)
		}
	}
	for _, kv := range []string{"GOGC", "=1", "A B=1", "1A=1", "A-B=1", ""} {
		if err := CheckEnv(kv); err == nil {
			t.Errorf("CheckEnv(%q) accepted", kv)
		}
	}
}

// A --serve-arg --http moves serve's listener; readiness is asked there.
func TestHTTPFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--max-in-flight=4096"}, ""},
		{[]string{"--http=127.0.0.1:7777", "--pprof"}, "127.0.0.1:7777"},
		{[]string{"--http", "127.0.0.1:7000", "--http=127.0.0.1:7001"}, "127.0.0.1:7001"},
		{[]string{"--pprof", "--http"}, ""},
	}
	for _, tc := range tests {
		if got := httpFlag(tc.args); got != tc.want {
			t.Errorf("httpFlag(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gated.log")
	if err := os.WriteFile(path, []byte("one\ntwo\nthree\nfour\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := logTail(path, 2); got != "three\nfour" {
		t.Fatalf("logTail = %q", got)
	}
	if got := logTail(path, 10); got != "one\ntwo\nthree\nfour" {
		t.Fatalf("logTail of a short file = %q", got)
	}
	if got := logTail(filepath.Join(t.TempDir(), "missing"), 2); !strings.Contains(got, "no such file") {
		t.Fatalf("logTail of a missing file = %q", got)
	}
}

// TestCheckVerdict: a path's verdict must have its outcome and stage and
// be reviewed by the path's reviewer plugins alone, so that a policy that
// adds a reviewer (a quorum of two) does not pass for the path measured.
func TestCheckVerdict(t *testing.T) {
	for _, tc := range []struct {
		note, data string
		path       Path
		wrong      string
	}{
		{"llm alone", `{"proposal_id":"p","outcome":"approved","stage":"review","reviews":[{"plugin":"llm"}]}`, PathLLM, ""},
		{"llm beside sop", `{"proposal_id":"p","outcome":"approved","stage":"review","reviews":[{"plugin":"sop"},{"plugin":"llm"}]}`, PathLLM, `reviewed by plugins ["sop" "llm"]`},
		{"sop on the llm path", `{"proposal_id":"p","outcome":"approved","stage":"review","reviews":[{"plugin":"sop"}]}`, PathLLM, `reviewed by plugins ["sop"]`},
		{"sop alone", `{"proposal_id":"p","outcome":"approved","stage":"review","reviews":[{"plugin":"sop"}]}`, PathPlugin, ""},
		{"read, no review", `{"proposal_id":"p","outcome":"approved","stage":"policy"}`, PathRead, ""},
		{"read, reviewed", `{"proposal_id":"p","outcome":"approved","stage":"policy","reviews":[{"plugin":"sop"}]}`, PathRead, "reviewed by plugins"},
		{"blocked", `{"proposal_id":"p","outcome":"blocked","stage":"review","reason":"no persona"}`, PathLLM, "no persona"},
		{"another proposal", `{"proposal_id":"q","outcome":"approved","stage":"review","reviews":[{"plugin":"llm"}]}`, PathLLM, "got approved"},
		{"not JSON", `{`, PathLLM, "not JSON"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			_, err := checkVerdict(tc.path, "p", []byte(tc.data))
			switch {
			case tc.wrong == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wrong != "" && (!unexpected(err) || !strings.Contains(err.Error(), tc.wrong)):
				t.Fatalf("got %v, want an unexpected verdict saying %q", err, tc.wrong)
			}
		})
	}
}
