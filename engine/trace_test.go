package engine_test

import (
	"context"
	"testing"

	"github.com/gated/gated/engine"
)

// TestTraceHearsTheDecodeStage checks Config.Trace: it is told when the
// decode stage begins, with the decision's context, and its end hears
// the decoding error, nil for a proposal that decodes.
func TestTraceHearsTheDecodeStage(t *testing.T) {
	type key struct{}
	type stage struct {
		name  string
		ctxOK bool
		ended bool
		err   error
	}
	for _, tc := range []struct {
		note    string
		data    func(t *testing.T) []byte
		wantErr bool
	}{
		{note: "a valid proposal", data: func(t *testing.T) []byte { return proposalJSON(t, nil) }},
		{note: "an invalid proposal", data: func(t *testing.T) []byte { return proposalJSON(t, map[string]any{"class": "sideways"}) }, wantErr: true},
	} {
		t.Run(tc.note, func(t *testing.T) {
			var seen []*stage
			h := newHarness(t, func(h *harness) {
				h.cfg.Trace = func(ctx context.Context, name string) func(error) {
					s := &stage{name: name, ctxOK: ctx.Value(key{}) == "decision"}
					seen = append(seen, s)
					return func(err error) { s.ended, s.err = true, err }
				}
			})
			ctx := context.WithValue(t.Context(), key{}, "decision")
			if _, err := h.decideOn(ctx, h.stream.trail(), testSubject, tc.data(t), ""); err != nil {
				t.Fatal(err)
			}
			if len(seen) != 1 || seen[0].name != engine.TraceDecode {
				t.Fatalf("stages %+v, want one %q", seen, engine.TraceDecode)
			}
			s := seen[0]
			if !s.ctxOK || !s.ended || (s.err != nil) != tc.wantErr {
				t.Fatalf("decode stage: decision's context %v, ended %v, error %v; want an error: %v", s.ctxOK, s.ended, s.err, tc.wantErr)
			}
		})
	}
}
