package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeOPA serves OPA's /health and data API on loopback, deciding with
// decide, so the driver's client runs without an opa binary.
func fakeOPA(t *testing.T, decide func(body []byte) (int, []byte)) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "{}") })
	mux.HandleFunc("POST "+decisionPath, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		status, out := decide(body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(out)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// stockServer is a fake OPA that decides as stock OPA does.
func stockServer(t *testing.T) *httptest.Server {
	t.Helper()
	opa := newStockOPA(t)
	return fakeOPA(t, func(body []byte) (int, []byte) {
		out, err := opa.decide(t.Context(), body)
		if err != nil {
			return http.StatusBadRequest, []byte(`{"code": "invalid_parameter", "message": ` + jsonString(err.Error()) + `}`)
		}
		return http.StatusOK, out
	})
}

func jsonString(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

// TestRun runs the whole driver against a stock-deciding server and checks
// the report a user reads.
func TestRun(t *testing.T) {
	srv := stockServer(t)
	out := filepath.Join(t.TempDir(), "report.json")
	var stdout strings.Builder
	err := run(t.Context(), []string{"-opa", srv.URL + "/", "-c", "1,3", "-n", "40", "-warmup", "4", "-check", "10", "-json", out}, &stdout)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stdout.String())
	}
	for _, want := range []string{"checked 10 decisions: OPA and gated agree", "opa-rest", "gated-in-process", "gated/OPA"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Levels) != 2 || rep.Levels[0].Concurrency != 1 || rep.Levels[1].Concurrency != 3 {
		t.Fatalf("levels %+v, want concurrency 1 and 3", rep.Levels)
	}
	for _, l := range rep.Levels {
		for _, m := range []measurement{l.OPA, l.Gated} {
			if m.Decisions != 40 || m.PerSecond <= 0 || m.P50us <= 0 || m.P99us < m.P50us || m.MaxUS < m.P99us {
				t.Errorf("%s at c=%d: implausible %+v", m.Mode, l.Concurrency, m)
			}
		}
		if l.Ratio <= 0 {
			t.Errorf("c=%d: ratio %v", l.Concurrency, l.Ratio)
		}
	}
}

// TestRunFailsLoudly checks that the driver refuses to report figures when
// OPA does not decide as gated does, or not at all.
func TestRunFailsLoudly(t *testing.T) {
	opa := newStockOPA(t)
	for _, tc := range []struct {
		note   string
		decide func(body []byte) (int, []byte)
		want   string
	}{
		{
			note: "another decision",
			decide: func(body []byte) (int, []byte) {
				out, _ := opa.decide(t.Context(), body)
				// Approve everything: the denied path now disagrees.
				var resp map[string]map[string]any
				json.Unmarshal(out, &resp)
				resp["result"]["deny"] = []any{}
				out, _ = json.Marshal(resp)
				return http.StatusOK, out
			},
			want: "decide 5 of 10 inputs differently",
		},
		{
			note:   "undefined decision",
			decide: func([]byte) (int, []byte) { return http.StatusOK, []byte("{}") },
			want:   "undefined on OPA",
		},
		{
			note: "an error status",
			decide: func([]byte) (int, []byte) {
				return http.StatusInternalServerError, []byte(`{"code": "internal_error"}`)
			},
			want: "500 Internal Server Error",
		},
	} {
		t.Run(tc.note, func(t *testing.T) {
			srv := fakeOPA(t, tc.decide)
			var stdout strings.Builder
			err := run(t.Context(), []string{"-opa", srv.URL, "-c", "2", "-n", "10", "-warmup", "0", "-check", "10"}, &stdout)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(stdout.String(), "decisions/s") {
				t.Errorf("figures printed despite the failure:\n%s", stdout.String())
			}
		})
	}
}

// TestMeasureStopsOnError checks that a wrong answer during the load,
// after the comparison passed, fails the measurement.
func TestMeasureStopsOnError(t *testing.T) {
	bad := errors.New("wrong outcome")
	_, err := measure(t.Context(), "x", 4, 1000, 0, func(_ context.Context, _, i int) error {
		if i == 500 {
			return bad
		}
		return nil
	})
	if !errors.Is(err, bad) {
		t.Fatalf("err %v, want %v", err, bad)
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := quantile(d, tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
}

func TestParseOptions(t *testing.T) {
	for _, tc := range []struct {
		note string
		args []string
		want string // "" for valid
	}{
		{note: "defaults", args: nil},
		{note: "a list of levels", args: []string{"-c", "1, 8,32"}},
		{note: "zero concurrency", args: []string{"-c", "0"}, want: "-c \"0\""},
		{note: "not a number", args: []string{"-c", "8,x"}, want: "-c \"x\""},
		{note: "no decisions", args: []string{"-n", "0"}, want: "-n 0"},
		{note: "negative warm-up", args: []string{"-warmup", "-1"}, want: "-warmup -1"},
		{note: "nothing checked", args: []string{"-check", "0"}, want: "-check 0"},
		{note: "not a URL", args: []string{"-opa", "127.0.0.1:8181"}, want: "base URL"},
		{note: "the decision path, not the base", args: []string{"-opa", "http://127.0.0.1:8181/v1/data"}, want: "base URL"},
		{note: "stray arguments", args: []string{"extra"}, want: "unexpected arguments"},
		{note: "unknown flag", args: []string{"-x"}, want: "not defined"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			_, err := parseOptions(tc.args, io.Discard)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			case tc.want != "" && !errors.Is(err, errUsage):
				t.Fatalf("err %v does not wrap errUsage", err)
			}
		})
	}
}
