// Command plugin-go is a third-party reviewer plugin: it approves a change
// only when the proposal names an incident and the SOP that covers it,
// read through gated's get_sop_text tool, has a rollback.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gated/gated"
	"github.com/gated/gated/plugins/sdk"
)

type incidentReviewer struct{}

func (incidentReviewer) Describe(context.Context) (sdk.Description, error) {
	return sdk.Description{Name: "incident-reviewer", Version: "0.1.0", MaxConcurrency: 8}, nil
}

func (incidentReviewer) Review(ctx context.Context, req *sdk.Request) (*sdk.Response, error) {
	var sop gated.SOP
	raw, err := req.CallTool(ctx, sdk.ToolGetSOPText, nil)
	if err == nil {
		err = json.Unmarshal(raw, &sop)
	}
	gates := []gated.GateResult{
		{Name: "incident_linked", Passed: req.Proposal.IncidentID != "", Detail: req.Proposal.IncidentID},
		{Name: "rollback_known", Passed: err == nil && sop.Rollback != "", Detail: sop.Rollback},
	}
	decision := gated.DecisionApprove
	for _, g := range gates {
		if !g.Passed {
			decision = gated.DecisionReject
		}
	}
	text := fmt.Sprintf("Decision: %s\nIncident: %q, SOP: %q (lookup error: %v)", decision, req.Proposal.IncidentID, sop.ID, err)
	return &sdk.Response{Text: text, Decision: decision, Gates: gates, SOPID: sop.ID, RollbackPath: sop.Rollback}, nil
}

func main() { sdk.Serve(incidentReviewer{}) }
