package sdk

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/plugins/pluginv1"
)

func TestRunFromWire(t *testing.T) {
	tests := []struct {
		note string
		raw  string
		want *gated.RunContext
		bad  bool
	}{
		{note: "empty is an action review", raw: ""},
		{note: "a run context", raw: `{"round":2,"max_rounds":5,"ai_review":["style"],"prior_findings":[{"id":"r1-f1","body":"b","line":null},{"id":"r1-f2","body":"c","line":7}],"limits":{"max_items":20,"max_item_bytes":2048,"max_guidance_bytes":8192}}`,
			want: &gated.RunContext{Round: 2, MaxRounds: 5, AIReview: []string{"style"},
				PriorFindings: []gated.Finding{{ID: "r1-f1", Body: "b"}, {ID: "r1-f2", Body: "c", Line: ptr(7)}},
				Limits:        gated.RunLimits{MaxItems: 20, MaxItemBytes: 2048, MaxGuidanceBytes: 8192}}},
		// A newer gated may send more: unknown fields are not an error.
		{note: "an unknown field", raw: ` {"round":1,"later":true} `, want: &gated.RunContext{Round: 1}},
		{note: "truncated", raw: `{"round":`, bad: true},
		{note: "null", raw: `null`, bad: true},
		{note: "blank", raw: "  \n", bad: true},
		{note: "an array", raw: `[{"round":1}]`, bad: true},
		{note: "a wrong type", raw: `{"round":"2"}`, bad: true},
		{note: "two objects", raw: `{"round":1}{"round":2}`, bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			got, err := RunFromWire([]byte(tc.raw))
			if tc.bad {
				if !errors.Is(err, ErrMalformedRun) || got != nil {
					t.Fatalf("got %+v, %v; want nil and ErrMalformedRun", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRequestFromWireCarriesTheRun(t *testing.T) {
	in := &pluginv1.ReviewRequest{ProposalJson: []byte(`{"v":1,"id":"p","kind":"run"}`),
		Policy: &pluginv1.PolicyContext{RunJson: []byte(`{"round":3,"max_rounds":4}`)}}
	req, err := requestFromWire(in)
	if err != nil {
		t.Fatal(err)
	}
	if req.Run == nil || req.Run.Round != 3 || req.Run.MaxRounds != 4 {
		t.Fatalf("run %+v", req.Run)
	}
	in.Policy.RunJson = []byte(`{"round":`)
	if req, err := requestFromWire(in); !errors.Is(err, ErrMalformedRun) || req != nil {
		t.Fatalf("a malformed run context gave %+v, %v", req, err)
	}
	in.Policy.RunJson = nil
	if req, err := requestFromWire(in); err != nil || req.Run != nil {
		t.Fatalf("an action review gave run %+v, %v", req.Run, err)
	}
}

func TestResponseToWireLinesAndWarnings(t *testing.T) {
	comments := []gated.Comment{{Path: "a", Line: ptr(1)}, {Path: "b"}, {Path: "c", Line: ptr(0)}, {Path: "d", Line: ptr(-1)}}
	want := []*uint32{ptr(uint32(1)), nil, nil, nil}
	if strconv.IntSize == 64 {
		largest := uint64(math.MaxUint32)
		comments = append(comments, gated.Comment{Path: "e", Line: ptr(int(largest))}, gated.Comment{Path: "f", Line: ptr(int(largest + 1))})
		want = append(want, ptr(uint32(math.MaxUint32)), nil)
	}
	out := responseToWire(&Response{Warnings: []string{"ok", "bad \xff byte"}, Comments: comments})
	if want := []string{"ok", "bad \uFFFD byte"}; !reflect.DeepEqual(out.GetWarnings(), want) {
		t.Errorf("warnings %q, want %q", out.GetWarnings(), want)
	}
	if len(out.GetComments()) != len(want) {
		t.Fatalf("%d comments, want %d", len(out.GetComments()), len(want))
	}
	for i, c := range out.GetComments() {
		if (c.Line == nil) != (want[i] == nil) || (c.Line != nil && *c.Line != *want[i]) {
			t.Errorf("comment %s: line %v, want %v", c.GetPath(), c.Line, want[i])
		}
	}
}

// FuzzRunFromWire: whatever the bytes, RunFromWire returns a run context
// or an error wrapping ErrMalformedRun (nil and no error only for empty
// input), and never panics.
func FuzzRunFromWire(f *testing.F) {
	for _, s := range []string{"", `{}`, `{"round":1}`, `{"round":`, `null`, `[]`, `{"prior_findings":[{"line":-1}]}`, `{"limits":{"max_items":1e99}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		run, err := RunFromWire(raw)
		switch {
		case err != nil && !errors.Is(err, ErrMalformedRun):
			t.Fatalf("error %v does not wrap ErrMalformedRun", err)
		case err != nil && run != nil:
			t.Fatal("a run context with an error")
		case err == nil && run == nil && len(raw) != 0:
			t.Fatal("no run context and no error for non-empty input")
		}
	})
}

func ptr[T any](v T) *T { return &v }

// procs and gcPercent set the runtime's defaults for a plugin unless its
// environment chose.
func TestRuntimeDefaults(t *testing.T) {
	settings := []struct {
		env   string
		fn    func(func(string) (string, bool)) (int, bool)
		def   int
		chose string
	}{
		{env: "GOMAXPROCS", fn: procs, def: defaultProcs, chose: "4"},
		{env: "GOGC", fn: gcPercent, def: defaultGCPercent, chose: "off"},
	}
	for _, st := range settings {
		tests := []struct {
			note string
			env  map[string]string
			want int
			set  bool
		}{
			{note: "unset", env: map[string]string{}, want: st.def, set: true},
			{note: "empty counts as unset", env: map[string]string{st.env: ""}, want: st.def, set: true},
			{note: "the environment's choice stands", env: map[string]string{st.env: st.chose}},
		}
		for _, tc := range tests {
			t.Run(st.env+"/"+tc.note, func(t *testing.T) {
				lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
				n, set := st.fn(lookup)
				if n != tc.want || set != tc.set {
					t.Fatalf("%s: %d, %v; want %d, %v", st.env, n, set, tc.want, tc.set)
				}
			})
		}
	}
}

func TestHelpAsked(t *testing.T) {
	byHand := func(string) (string, bool) { return "", false }
	byGated := func(k string) (string, bool) {
		if k == "GATED_PLUGIN" {
			return "reviewer", true
		}
		return "", false
	}
	otherCookie := func(k string) (string, bool) { return "something-else", k == "GATED_PLUGIN" }
	tests := []struct {
		note string
		args []string
		env  func(string) (string, bool)
		want bool
	}{
		{note: "-h by hand", args: []string{"-h"}, env: byHand, want: true},
		{note: "--help by hand", args: []string{"--help"}, env: byHand, want: true},
		{note: "-help by hand", args: []string{"-help"}, env: byHand, want: true},
		{note: "--help with a wrong cookie", args: []string{"--help"}, env: otherCookie, want: true},
		{note: "--help from gated serves", args: []string{"--help"}, env: byGated},
		{note: "no arguments", env: byHand},
		{note: "help among other arguments", args: []string{"--help", "x"}, env: byHand},
		{note: "another argument", args: []string{"--version"}, env: byHand},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if got := helpAsked(tc.args, tc.env); got != tc.want {
				t.Errorf("helpAsked(%q) = %v, want %v", tc.args, got, tc.want)
			}
		})
	}
}
