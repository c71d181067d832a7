package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/gated/gated/plugins/sdk"
)

type recordingCaller struct {
	reviewID, name, args string
}

func (r *recordingCaller) CallTool(_ context.Context, reviewID, name string, args json.RawMessage) (json.RawMessage, error) {
	r.reviewID, r.name, r.args = reviewID, name, string(args)
	if name == "run_shell" {
		return nil, sdk.ErrToolDenied
	}
	return json.RawMessage(`{"ok":true}`), nil
}

func TestNewRequestRoutesToolCalls(t *testing.T) {
	tests := []struct {
		note     string
		tool     string
		args     any
		wantArgs string
		wantErr  error
	}{
		{note: "args marshalled", tool: "get_sop_text", args: map[string]string{"id": "SOP-1"}, wantArgs: `{"id":"SOP-1"}`},
		{note: "nil args send an empty object", tool: "get_proposal", wantArgs: `{}`},
		{note: "raw args pass as they are", tool: "get_sop_text", args: json.RawMessage(`{"id":"x"}`), wantArgs: `{"id":"x"}`},
		{note: "the caller's refusal comes back", tool: "run_shell", wantArgs: `{}`, wantErr: sdk.ErrToolDenied},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			c := &recordingCaller{}
			req := sdk.NewRequest(sdk.Request{ReviewID: "rv-9"}, c)
			out, err := req.CallTool(t.Context(), tc.tool, tc.args)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if c.reviewID != "rv-9" || c.name != tc.tool || c.args != tc.wantArgs {
				t.Errorf("caller got %q %q %q", c.reviewID, c.name, c.args)
			}
			if err == nil && string(out) != `{"ok":true}` {
				t.Errorf("result %s", out)
			}
		})
	}
	if _, err := (&sdk.Request{}).CallTool(t.Context(), "get_proposal", nil); !errors.Is(err, sdk.ErrNoTools) {
		t.Errorf("a request without tools: err = %v, want ErrNoTools", err)
	}
}
