package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/internal/dedupe"
)

// Dedupe defaults, from the reliability semantics of DESIGN.md.
const (
	// DefaultDedupeWindow is how long a rejection answers identical
	// proposals.
	DefaultDedupeWindow = 120 * time.Second
	// DefaultDedupeMax is how many recent rejections an Engine remembers.
	DefaultDedupeMax = 10000
)

// dedupeKey identifies a request independently of its id: two proposals
// with the same key would be judged alike by the same policy.
type dedupeKey = dedupe.Key

// dedupeKeyOf digests what the policy and the reviewer judge: tenant,
// action, class, kind, blast radius, canonical target, reason, flags, the
// reviewer override, the proposing agent, the operator, the incident, a
// run's content, and the policy revision. It leaves out what a retry
// changes without changing the request (id, created_at, the agent's
// session, the context summary), so a retry loop is caught, while a
// resubmission that adds user_confirmed, names an incident or arrives
// after a policy reload is judged afresh.
func dedupeKeyOf(p *gated.Proposal, targetKey, revision string) dedupeKey {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(revision)
	field(p.Tenant)
	field(p.Action)
	field(string(p.Kind))
	field(string(p.Class))
	field(string(p.BlastRadius))
	field(targetKey)
	field(p.Reason)
	field(p.Reviewer)
	field(p.IncidentID)
	for _, b := range []bool{p.Flags.SkipReview, p.Flags.ForceApprove, p.Flags.ForceApproveNoSOP, p.Flags.UserConfirmed} {
		field(strconv.FormatBool(b))
	}
	agent := ""
	if p.RequestedBy != nil {
		agent = p.RequestedBy.Agent
	}
	field(agent)
	field(canonicalJSON(p.Operator))
	// A run review judges the run itself: a new round with another diff is
	// a new request even when the reason reads the same.
	field(canonicalJSON(p.Run))
	field(canonicalJSON(p.Criteria))
	var k dedupeKey
	h.Sum(k[:0])
	return k
}

// canonicalJSON encodes a part of a decoded proposal; maps marshal with
// sorted keys, so equal parts encode alike whatever their key order was.
func canonicalJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Decoded proposals always marshal. Should one not, the error text
		// is no JSON, so it cannot make two proposals look alike by chance.
		return "\x00" + err.Error()
	}
	return string(b)
}

// dedupe answers a proposal identical to one rejected within the window
// with that rejection, read back from the store so that memory holds keys
// and ids only. hit is false when the proposal must be judged; an error
// means the earlier verdict could not be read and the delivery is retried.
func (r *pass) dedupe(ctx context.Context) (v *gated.Verdict, hit bool, err error) {
	c := r.e.rejections
	if c == nil || r.p.Kind == gated.KindRun {
		// A run's rounds are kept apart by its run record: the policy
		// refuses a round reviewed already, and a rejection must send its
		// own continuation or none, never repeat another's.
		return nil, false, nil
	}
	now := r.e.cfg.Clock.Now()
	rej, ok := c.Lookup(r.dedupeKey(r.revision), now)
	if !ok || rej.ID == r.id {
		return nil, false, nil
	}
	earlier, err := r.e.cfg.Store.Get(ctx, r.tenant, rej.ID)
	switch {
	case errors.Is(err, gated.ErrNotFound):
		// The store let the verdict go: judge afresh rather than cite a
		// rejection nobody can look up.
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("looking up verdict %s.%s of an identical rejection: %w", r.tenant, rej.ID, err)
	case earlier.Outcome != gated.OutcomeRejected:
		return nil, false, nil
	}
	age := max(now.Sub(rej.At), 0)
	v = r.verdict(gated.OutcomeRejected, gated.StageDedupe, fmt.Sprintf("identical to proposal %s rejected %ds ago: %s",
		rej.ID, int64(age/time.Second), earlier.Reason))
	v.Policy, v.Reviews, v.DuplicateOf = earlier.Policy, earlier.Reviews, rej.ID
	if err := r.log.record(ctx, gated.EventDeduplicated, map[string]any{
		"duplicate_of": rej.ID, "audit_seq": earlier.AuditSeq, "stage": earlier.Stage, "rejected_at": earlier.DecidedAt,
	}); err != nil {
		return nil, true, err
	}
	v, err = r.finish(ctx, v)
	return v, true, err
}

// rememberRejection remembers a verdict the policy or the reviewers
// rejected, under the revision that decided it. Dedupe verdicts are not
// remembered, so the window runs from the original rejection; failures
// (error, timeout, blocked) are not either, because they say nothing
// about the proposal and a retry may well succeed. Nor is a rejection by
// RuleTargetChanged: it asks for the proposal to be sent again, to be
// decided on the target's history as it now stands.
func (r *pass) rememberRejection(v *gated.Verdict) {
	c := r.e.rejections
	if c == nil || r.p == nil || r.p.Kind == gated.KindRun || v.Outcome != gated.OutcomeRejected || (v.Stage != gated.StagePolicy && v.Stage != gated.StageReview) {
		return
	}
	if v.Policy != nil && slices.Contains(v.Policy.Rules, RuleTargetChanged) {
		return
	}
	revision := r.revision
	if v.Policy != nil {
		revision = v.Policy.Revision
	}
	c.Remember(r.dedupeKey(revision), v.ProposalID, v.DecidedAt, r.e.cfg.Clock.Now())
}

// dedupeKey is dedupeKeyOf for the decision's proposal, computed once per
// policy revision: the look-up and the remembering of a rejection share it.
func (r *pass) dedupeKey(revision string) dedupeKey {
	if !r.dkey.set || r.dkey.revision != revision {
		r.dkey.key, r.dkey.revision, r.dkey.set = dedupeKeyOf(r.p, r.keys.target, revision), revision, true
	}
	return r.dkey.key
}
