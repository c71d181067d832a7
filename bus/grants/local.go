package grants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// parseLocalSubject reads tenant and, when there is one, the agent from
// gated.outcomes.<tenant>.~local or gated.outcomes.<tenant>.~local.<agent>;
// ok is false for any other subject.
func parseLocalSubject(subject string) (tenant, agent string, ok bool) {
	rest, found := strings.CutPrefix(subject, wire.OutcomeSubjectPrefix)
	if !found {
		return "", "", false
	}
	tenant, rest, found = strings.Cut(rest, ".")
	if !found || !gated.ValidTenant(tenant) {
		return "", "", false
	}
	token, agent, found := strings.Cut(rest, ".")
	if token != wire.LocalDecisionToken || found && !gated.ValidID(agent) {
		return "", "", false
	}
	return tenant, agent, true
}

// takeLocal records a batch of local decisions of tenant that came on
// subject (the subject of agent as, when as is not empty): one
// local.decided event per call, under the call's id, or, for a batch it
// refuses whole (malformed, naming another tenant, or, on an agent's
// subject, another agent), one local.refused event saying why. A
// batch of which some event could not be recorded is delivered again,
// unless last, when it is refused; events of a batch delivered again may
// be recorded twice, never none.
func (o *Outcomes) takeLocal(ctx context.Context, subject, tenant, as string, data []byte, last bool) error {
	b, err := gated.DecodeLocalBatch(data)
	if err != nil {
		return o.refuseLocal(ctx, subject, tenant, as, data, err.Error())
	}
	if b.Tenant != tenant {
		return o.refuseLocal(ctx, subject, tenant, as, data, fmt.Sprintf("the batch names tenant %s, not the subject's %s", b.Tenant, tenant))
	}
	for _, d := range b.Decisions {
		if as != "" && d.Agent != as {
			return o.refuseLocal(ctx, subject, tenant, as, data, fmt.Sprintf("decision %s names agent %q, not the subject's %q", d.ID, d.Agent, as))
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(b.Decisions))
	for i, d := range b.Decisions {
		d.As = as
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = o.sealLocal(ctx, tenant, d)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !last {
			return fmt.Errorf("%w: recording a local decision: %w", errOutcomeRetry, err)
		}
		return o.refuseLocal(ctx, subject, tenant, as, data, fmt.Sprintf("gated could not record it after %d attempts: %v", outcomeAttempts, err))
	}
	return nil
}

func (o *Outcomes) sealLocal(ctx context.Context, tenant string, d gated.LocalDecision) error {
	body, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = o.grants.cfg.Trails().Seal(ctx, gated.AuditEvent{
		V: gated.SchemaVersion, Event: gated.EventLocalDecided, Tenant: tenant, ProposalID: d.ID,
		At: o.grants.cfg.Now().UTC(), PolicyRevision: d.PolicyRevision, Data: body,
	})
	return err
}

// refuseLocal audits a refused batch; when even that fails the batch is
// delivered again.
func (o *Outcomes) refuseLocal(ctx context.Context, subject, tenant, as string, data []byte, reason string) error {
	sum := sha256.Sum256(data)
	if err := o.grants.audit(ctx, tenant, "", gated.EventLocalRefused, gated.LocalRefusedData{
		As: as, Reason: reason, SHA256: hex.EncodeToString(sum[:]), Subject: subject,
	}); err != nil {
		return fmt.Errorf("%w: auditing a refused batch of local decisions: %w", errOutcomeRetry, err)
	}
	return nil
}
