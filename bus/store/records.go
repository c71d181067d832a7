package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/digest"
)

// refuse builds the RecordError of a refused record and reports it.
func (s *Verdicts) refuse(ctx context.Context, kind, key string, rev uint64, format string, args ...any) *RecordError {
	tenant, _, _ := strings.Cut(key, ".")
	e := &RecordError{Kind: kind, Tenant: tenant, Key: key, Revision: rev, Problem: fmt.Sprintf(format, args...)}
	if s.corrupt != nil {
		s.corrupt(ctx, e)
	}
	return e
}

// checkVerdict tells what is wrong with a stored verdict for tenant and
// id, or returns "" when it is one.
func checkVerdict(v *gated.Verdict, tenant, id string) string {
	switch {
	case v.Tenant != tenant || v.ProposalID != id:
		return fmt.Sprintf("it names proposal %q of tenant %q", v.ProposalID, v.Tenant)
	case v.V != gated.SchemaVersion:
		return fmt.Sprintf("schema version %d, want %d", v.V, gated.SchemaVersion)
	case !knownOutcome(v.Outcome):
		return fmt.Sprintf("outcome %q is not one of gated's", v.Outcome)
	case v.Approved != (v.Outcome == gated.OutcomeApproved):
		return fmt.Sprintf("approved is %v with outcome %s", v.Approved, v.Outcome)
	case v.ProposalSHA256 != "" && !digest.ValidSHA256(v.ProposalSHA256):
		return fmt.Sprintf("proposal_sha256 %q is not a SHA-256 digest", v.ProposalSHA256)
	case v.Run != nil && v.Run.RunID != "" && !gated.ValidID(v.Run.RunID):
		return fmt.Sprintf("run id %q is not a valid token", v.Run.RunID)
	}
	return ""
}

func knownOutcome(o gated.Outcome) bool {
	switch o {
	case gated.OutcomeApproved, gated.OutcomeRejected, gated.OutcomeBlocked,
		gated.OutcomeError, gated.OutcomeTimeout, gated.OutcomeInvalid:
		return true
	}
	return false
}

// decodeVerdict decodes the verdict stored under tenant.id at revision
// rev, refusing one that is not a verdict for that key.
func (s *Verdicts) decodeVerdict(ctx context.Context, tenant, id string, rev uint64, data []byte) (*gated.Verdict, error) {
	key := tenant + "." + id
	var v gated.Verdict
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, s.refuse(ctx, RecordVerdict, key, rev, "it does not decode: %v", err)
	}
	if problem := checkVerdict(&v, tenant, id); problem != "" {
		return nil, s.refuse(ctx, RecordVerdict, key, rev, "%s", problem)
	}
	return &v, nil
}

// storedClaim is a review claim as the bucket holds it: the claim and
// the proposal it is for.
type storedClaim struct {
	Tenant     string `json:"tenant"`
	ProposalID string `json:"proposal_id"`
	engine.Claim
}

// decodeClaim decodes the claim stored under tenant.claims.id.
func (s *Verdicts) decodeClaim(ctx context.Context, tenant, id string, rev uint64, data []byte) (engine.Claim, error) {
	key := claimKey(tenant, id)
	var c storedClaim
	if err := json.Unmarshal(data, &c); err != nil {
		return engine.Claim{}, s.refuse(ctx, RecordClaim, key, rev, "it does not decode: %v", err)
	}
	switch {
	case c.Tenant != tenant || c.ProposalID != id:
		return engine.Claim{}, s.refuse(ctx, RecordClaim, key, rev, "it names proposal %q of tenant %q", c.ProposalID, c.Tenant)
	case c.Holder == "" || c.Until.IsZero():
		return engine.Claim{}, s.refuse(ctx, RecordClaim, key, rev, "it names no holder or no deadline")
	}
	c.Claim.Revision = rev
	return c.Claim, nil
}

// decodeRunRecord decodes the run record stored under tenant.runs.runID.
func (s *Verdicts) decodeRunRecord(ctx context.Context, tenant, runID string, rev uint64, data []byte) (*gated.RunRecord, error) {
	key := runKey(tenant, runID)
	var rec gated.RunRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, s.refuse(ctx, RecordRun, key, rev, "it does not decode: %v", err)
	}
	if rec.Tenant != tenant || rec.RunID != runID {
		return nil, s.refuse(ctx, RecordRun, key, rev, "it names run %q of tenant %q", rec.RunID, rec.Tenant)
	}
	for _, r := range rec.Rounds {
		if r.Round < 1 || !gated.ValidID(r.ProposalID) || !knownOutcome(r.Outcome) {
			return nil, s.refuse(ctx, RecordRun, key, rev, "round %d (proposal %q, outcome %q) is not a decided round", r.Round, r.ProposalID, r.Outcome)
		}
	}
	switch rec.Closed {
	case "", gated.RunAccepted, gated.RunEscalated:
	default:
		return nil, s.refuse(ctx, RecordRun, key, rev, "closed %q is not a run state", rec.Closed)
	}
	return &rec, nil
}

// decodeHistory decodes the target history stored under
// tenant.targets.target: approvals of tenant's proposals on target only.
func (s *Verdicts) decodeHistory(ctx context.Context, tenant, target string, rev uint64, data []byte) ([]gated.Verdict, error) {
	key := targetKey(tenant, target)
	var list []gated.Verdict
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, s.refuse(ctx, RecordHistory, key, rev, "it does not decode as a list of approvals: %v", err)
	}
	if list == nil {
		return nil, s.refuse(ctx, RecordHistory, key, rev, "it is not a list of approvals")
	}
	for i, v := range list {
		switch {
		case v.Tenant != tenant || v.TargetKey != target:
			return nil, s.refuse(ctx, RecordHistory, key, rev, "entry %d is an approval of tenant %q on target %q", i, v.Tenant, v.TargetKey)
		case !v.Approved || v.Outcome != gated.OutcomeApproved || !gated.ValidID(v.ProposalID) || v.DecidedAt.IsZero():
			return nil, s.refuse(ctx, RecordHistory, key, rev, "entry %d (proposal %q, outcome %q) is not a dated approval", i, v.ProposalID, v.Outcome)
		case v.Execution != nil && !knownExecution(v.Execution):
			return nil, s.refuse(ctx, RecordHistory, key, rev, "entry %d (proposal %q) has execution status %q; want started, succeeded or failed", i, v.ProposalID, v.Execution.Status)
		}
	}
	return list, nil
}

// knownExecution reports whether e is a dated execution of a known status.
func knownExecution(e *gated.Execution) bool {
	switch e.Status {
	case gated.ExecutionStarted, gated.ExecutionSucceeded, gated.ExecutionFailed:
		return !e.At.IsZero()
	}
	return false
}
