package plugins

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins/pluginv1"
)

// FuzzCallTool sends arbitrary tool names and arguments to a live review.
// The host must never panic, must refuse every tool outside the bag, and
// must answer an allowed call only with JSON.
func FuzzCallTool(f *testing.F) {
	f.Add("get_proposal", []byte(`{}`))
	f.Add("get_sop_text", []byte(`{"id":"SOP-001"}`))
	f.Add("get_sop_text", []byte(`{"id":7}`))
	f.Add("run_shell", []byte(`{"cmd":"id"}`))
	f.Add("get.proposal", []byte(`[`))
	f.Add("", []byte(nil))
	f.Fuzz(func(t *testing.T, name string, args []byte) {
		var rs reviews
		th := &toolHost{plugin: "p", reviews: &rs, cfg: &ToolConfig{
			SOP: func(id string) (*gated.SOP, bool) { return &gated.SOP{ID: id}, id != "" },
		}}
		bag := []string{toolGetProposal, toolGetSOPText, toolGetVerdictHistory}
		lr, err := rs.add("p", &engine.ReviewRequest{
			ReviewID: "rv", ProposalJSON: []byte(`{"id":"p1"}`), Tools: bag,
			SOP: &gated.SOP{ID: "SOP-001"}, Deadline: time.Now().Add(time.Minute),
		})
		if err != nil {
			t.Fatal(err)
		}
		defer rs.remove(lr)
		out, err := th.CallTool(context.Background(), &pluginv1.CallToolRequest{ReviewId: "rv", Name: name, ArgsJson: args})
		inBag := name == toolGetProposal || name == toolGetSOPText || name == toolGetVerdictHistory
		if !inBag {
			if err == nil || (status.Code(err) != codes.PermissionDenied && status.Code(err) != codes.InvalidArgument) {
				t.Fatalf("tool %q outside the bag: err = %v", name, err)
			}
			return
		}
		if err == nil && !json.Valid(out.GetResultJson()) {
			t.Fatalf("tool %q answered non-JSON %q", name, out.GetResultJson())
		}
	})
}
