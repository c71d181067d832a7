package grants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine/wire"
)

// outcomeAttempts bounds the deliveries of one outcome report that fail
// for a reason other than the report itself (a bucket that cannot be
// read, an audit that cannot be written). The last one records the
// report as refused, with the reason, rather than dropping it unseen.
const outcomeAttempts = 10

// Outcomes takes in the outcome reports of executors
// (gated.outcomes.<tenant>.<proposal_id>, stream wire.OutcomesStream):
// it checks each against the grant record, stores it on the record and
// on the approval's entry of its target's history, where the policy sees
// it, and audits it (grant.outcome), or audits why it did not
// (grant.outcome_refused). It takes in the batches of local decisions
// of gateways too (gated.outcomes.<tenant>.~local[.<agent>], takeLocal).
// A report that says the executor refused the
// grant is audited as grant.refused with by "executor". Every report is
// acknowledged only once audited. Every gated of a cluster runs one on
// the shared consumer.
type Outcomes struct {
	grants   *Service
	verdicts *store.Verdicts
	cons     jetstream.Consumer
	log      *zap.Logger
	cc       jetstream.ConsumeContext
}

// NewOutcomes returns the intake of outcome reports from res's outcome
// consumer, checked against g's grant records and stored in res's
// verdict bucket.
func NewOutcomes(res *bus.Resources, g *Service) (*Outcomes, error) {
	if res == nil || res.OutcomesConsumer == nil || g == nil {
		return nil, fmt.Errorf("%w: the outcome intake needs the outcome consumer and grants", bus.ErrInvalidConfig)
	}
	return &Outcomes{grants: g, verdicts: store.New(res.Verdicts), cons: res.OutcomesConsumer, log: g.log.Named("outcomes")}, nil
}

// Start begins taking reports in. Call it once.
func (o *Outcomes) Start() error {
	cc, err := o.cons.Consume(o.handle, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		o.log.Warn("consuming outcome reports", zap.Error(err))
	}))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", wire.OutcomesStream, err)
	}
	o.cc = cc
	return nil
}

// Stop stops taking reports in and waits for the one in hand.
func (o *Outcomes) Stop() {
	if o.cc == nil {
		return
	}
	o.cc.Drain()
	select {
	case <-o.cc.Closed():
	case <-time.After(5 * time.Second):
		o.cc.Stop()
		<-o.cc.Closed()
	}
}

// errOutcomeRetry marks a failure that is gated's, not the report's: the
// report is delivered again.
var errOutcomeRetry = errors.New("outcome report not taken in yet")

func (o *Outcomes) handle(msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last := false
	if md, err := msg.Metadata(); err == nil && md.NumDelivered >= outcomeAttempts {
		last = true
	}
	err := o.Take(ctx, msg.Subject(), msg.Data(), last)
	if errors.Is(err, errOutcomeRetry) {
		o.log.Warn("taking in an outcome report", zap.String("subject", msg.Subject()), zap.Error(err))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if err := msg.Ack(); err != nil {
		o.log.Warn("acknowledging an outcome report", zap.String("subject", msg.Subject()), zap.Error(err))
	}
}

// Take checks, stores and audits one report published on subject. It
// returns an error wrapping errOutcomeRetry when gated could not finish
// (the report is to be delivered again) unless last is set, when it
// audits the report as refused with the reason instead. A nil error
// means the report was audited: as taken in, or as refused.
func (o *Outcomes) Take(ctx context.Context, subject string, data []byte, last bool) error {
	if tenant, as, ok := parseLocalSubject(subject); ok {
		return o.takeLocal(ctx, subject, tenant, as, data, last)
	}
	tenant, id, as, ok := parseOutcomeSubject(subject)
	if !ok {
		return o.refuse(ctx, gated.UnknownTenant, "", "", "", fmt.Sprintf("subject %q is not %s<tenant>.<proposal_id>[.<agent>]", subject, wire.OutcomeSubjectPrefix))
	}
	r, err := gated.DecodeExecutionReport(data)
	if err != nil {
		return o.refuse(ctx, tenant, id, as, "", err.Error())
	}
	if r.Tenant != tenant || r.ProposalID != id {
		return o.refuse(ctx, tenant, id, as, r.GID, fmt.Sprintf("the report names %s.%s, not the subject's %s.%s", r.Tenant, r.ProposalID, tenant, id))
	}
	if r.Status == gated.ExecutionRefused {
		// A refusal changes nothing but the audit trail, which says whose
		// subject it came on.
		at := r.At.UTC()
		data := gated.GrantRefusedData{Reason: r.Error, By: "executor", ProposalID: id, At: &at, GID: r.GID, As: as}
		if err := o.grants.audit(ctx, tenant, id, gated.EventGrantRefused, data); err != nil {
			return o.retry(ctx, last, tenant, id, r.GID, fmt.Errorf("auditing an executor's refusal: %w", err))
		}
		return nil
	}
	key := tenant + "." + id
	rec, rev, err := o.grants.record(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// A grant has a record once it is used.
		return o.refuse(ctx, tenant, id, as, r.GID, "unknown grant, or a grant not used: an outcome is reported only for a grant that was used")
	case err != nil:
		return o.retry(ctx, last, tenant, id, r.GID, err)
	case rec.GID != r.GID:
		return o.refuse(ctx, tenant, id, as, r.GID, "unknown grant: gated's grant of this proposal has another gid")
	case !mayReport(rec, as):
		return o.refuse(ctx, tenant, id, as, r.GID, reportRefusal(as))
	case rec.State != StateUsed:
		return o.refuse(ctx, tenant, id, as, r.GID, fmt.Sprintf("the grant is %s, not used: an outcome is reported only for a grant that was used", rec.State))
	}
	v, err := o.verdicts.Get(ctx, tenant, id)
	if err != nil {
		return o.retry(ctx, last, tenant, id, r.GID, fmt.Errorf("reading the verdict: %w", err))
	}
	ex := r.Execution()
	if err := o.storeOnRecord(ctx, key, rec, rev, ex); err != nil {
		return o.retry(ctx, last, tenant, id, r.GID, err)
	}
	inHistory, err := o.verdicts.RecordExecution(ctx, tenant, v.TargetKey, id, ex)
	if err != nil {
		return o.retry(ctx, last, tenant, id, r.GID, fmt.Errorf("recording the outcome in the target's history: %w", err))
	}
	reviewers := make([]map[string]string, 0, len(v.Reviews))
	for _, rv := range v.Reviews {
		if rv.Decision != gated.DecisionApprove {
			continue
		}
		reviewers = append(reviewers, map[string]string{"plugin": rv.Plugin, "plugin_version": rv.PluginVersion, "persona": rv.Persona, "model": rv.Model})
	}
	if v.Operator != nil {
		reviewers = append(reviewers, map[string]string{"plugin": "operator", "plugin_version": "", "persona": v.Operator.ID, "model": ""})
	}
	taken := gated.GrantOutcomeData{
		GID: r.GID, Tenant: tenant, ProposalID: id, Action: v.Action, TargetKey: v.TargetKey,
		Status: r.Status, Error: r.Error, At: ex.At, Reviewers: reviewers, InHistory: inHistory, As: as,
	}
	if err := o.grants.audit(ctx, tenant, id, gated.EventGrantOutcome, taken); err != nil {
		return o.retry(ctx, last, tenant, id, r.GID, fmt.Errorf("auditing the outcome: %w", err))
	}
	return nil
}

// mayReport says whether a report that came on the subject of agent as
// (empty: the tenant's subject) may speak for the grant of rec: one from
// the identity that used the grant (the agent whose subject the use came
// on, or the tenant's subject for a use there), or from the agent the
// grant was issued to. So where each agent's NATS user may publish on
// its own subjects alone, an agent cannot report the outcome of another
// agent's grant, and the policy's recent_failure cannot be set off
// against another agent's target by a report it made up.
func mayReport(rec Record, as string) bool {
	return as == rec.UsedAs || as != "" && as == rec.Agent
}

// reportRefusal is why a report from as may not speak for a grant.
func reportRefusal(as string) string {
	if as == "" {
		return "the grant was used on an agent's subject: its outcome is reported on the subject of the agent that used it, or of the agent it was issued to"
	}
	return fmt.Sprintf("the grant was not issued to agent %q, nor used by it", as)
}

// storeOnRecord sets the grant record's outcome by compare-and-set; a
// final outcome is not replaced by a started reported after it.
func (o *Outcomes) storeOnRecord(ctx context.Context, key string, rec Record, rev uint64, ex gated.Execution) error {
	for range 5 {
		var prev gated.Execution
		if len(rec.Outcome) > 0 && json.Unmarshal(rec.Outcome, &prev) == nil && prev.Final() && !ex.Final() {
			return nil
		}
		out, err := json.Marshal(ex)
		if err != nil {
			return err
		}
		rec.Outcome = out
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = o.grants.records.Update(ctx, key, data, rev)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("storing the outcome on grant record %s: %w", key, err)
		}
		if rec, rev, err = o.grants.record(ctx, key); err != nil {
			return fmt.Errorf("storing the outcome on grant record %s: %w", key, err)
		}
	}
	return fmt.Errorf("storing the outcome on grant record %s: the record kept changing", key)
}

// retry returns err for another delivery, or, on the last, audits the
// report as refused with err as the reason.
func (o *Outcomes) retry(ctx context.Context, last bool, tenant, id, gid string, err error) error {
	if !last {
		return fmt.Errorf("%w: %w", errOutcomeRetry, err)
	}
	return o.refuse(ctx, tenant, id, "", gid, fmt.Sprintf("gated could not take it in after %d attempts: %v", outcomeAttempts, err))
}

// refuse audits a refused report, which came on the subject of agent as
// when as is not empty. When even that fails the report is delivered
// again.
func (o *Outcomes) refuse(ctx context.Context, tenant, id, as, gid, reason string) error {
	data := gated.GrantRefusedData{Reason: reason, GID: gid, As: as, ProposalID: id}
	if err := o.grants.audit(ctx, tenant, id, gated.EventGrantOutcomeRefused, data); err != nil {
		return fmt.Errorf("%w: auditing a refused outcome report: %w", errOutcomeRetry, err)
	}
	return nil
}

// parseOutcomeSubject reads tenant, proposal id and, when there is one,
// the agent from gated.outcomes.<tenant>.<proposal_id> or
// gated.outcomes.<tenant>.<proposal_id>.<agent>.
func parseOutcomeSubject(subject string) (tenant, id, agent string, ok bool) {
	rest, found := strings.CutPrefix(subject, wire.OutcomeSubjectPrefix)
	if !found {
		return "", "", "", false
	}
	tenant, rest, found = strings.Cut(rest, ".")
	if !found || !gated.ValidTenant(tenant) {
		return "", "", "", false
	}
	id, agent, found = strings.Cut(rest, ".")
	if !gated.ValidID(id) || found && !gated.ValidID(agent) {
		return "", "", "", false
	}
	return tenant, id, agent, true
}
