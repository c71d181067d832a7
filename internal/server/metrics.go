package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/bus/status"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

// metrics are what /metrics exposes.
type metrics struct {
	reg      *prometheus.Registry
	eval     prometheus.Histogram
	verdicts *prometheus.CounterVec
	// corrupt counts the records the verdict store refused, by kind.
	corrupt *prometheus.CounterVec
	// notify counts the webhook notifications of --notify.
	notify notifyMetrics
	// shadow is nil without a shadow policy.
	shadow *shadowMetrics
	// obs are the review, plugin, audit append, claim wait and dedupe
	// metrics (observe.go).
	obs *observabilityMetrics
	// budgetAdmitted, budgetRefused and budgetTokens are the budgets'
	// counts, per tenant when tenantLabels is set.
	budgetAdmitted *prometheus.CounterVec
	budgetRefused  *prometheus.CounterVec
	budgetTokens   *prometheus.CounterVec
	// budgetRefusalWrites counts the failed writes of the refusals
	// counted, which are kept for the next.
	budgetRefusalWrites prometheus.Counter
	budgetReloads       *prometheus.CounterVec
	// tenantLabels (--metrics-tenant-labels) has the budget metrics carry
	// a tenant label. Without it no metric names a tenant: /metrics
	// answers without credentials.
	tenantLabels bool
}

// newMetrics returns the metrics of serve; tenantLabels adds the tenant
// label to the budget metrics.
func newMetrics(live *policies.Live, tenantLabels bool) *metrics {
	m := &metrics{tenantLabels: tenantLabels}
	// withTenant puts the tenant label first when the operator asked
	// for it.
	withTenant := func(labels ...string) []string {
		if m.namesTenants() {
			return append([]string{"tenant"}, labels...)
		}
		return labels
	}
	*m = metrics{
		tenantLabels: tenantLabels,
		reg:          prometheus.NewRegistry(),
		eval: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gated_policy_eval_seconds",
			Help:    "Time to evaluate the policy for one proposal.",
			Buckets: []float64{10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 5e-3, 20e-3},
		}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_verdicts_total",
			Help: "Verdicts decided by this process, by outcome and stage.",
		}, []string{"outcome", "stage"}),
		corrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_corrupt_records_total",
			Help: "Records read back from the verdict bucket that were not gated's for their key, by kind; each was refused and audited.",
		}, []string{"kind"}),
		budgetAdmitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_budget_admitted_total",
			Help: "Proposals admitted by their budgets, by use (read, review, hold), and by tenant with --metrics-tenant-labels.",
		}, withTenant("use")),
		budgetRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_budget_refused_total",
			Help: "Proposals refused by a budget before any review, by the limit that refused, and by tenant with --metrics-tenant-labels.",
		}, withTenant("limit")),
		budgetTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_budget_tokens_total",
			Help: "Reviewer tokens (prompt and completion) counted against the budgets, by tenant with --metrics-tenant-labels.",
		}, withTenant()),
		budgetRefusalWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gated_budget_refusal_writes_failed_total",
			Help: "Writes of the refusals counted for input.budget that failed; their counts are kept for the next write.",
		}),
		budgetReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_budget_reloads_total",
			Help: "Changes of the --budgets file, by result: applied, or refused (the limits in force stay).",
		}, []string{"result"}),
	}
	m.notify = newNotifyMetrics()
	m.obs = newObservabilityMetrics()
	m.reg.MustRegister(m.obs.collectors()...)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.eval, m.verdicts, m.corrupt, policyCollector{live},
		m.budgetAdmitted, m.budgetRefused, m.budgetTokens, m.budgetRefusalWrites, m.budgetReloads,
		m.notify.notifications, m.notify.results, m.notify.retries, m.notify.verification,
	)
	return m
}

// notifyMetrics are the gated_notify_* counters.
type notifyMetrics struct {
	notifications *prometheus.CounterVec
	results       *prometheus.CounterVec
	retries       *prometheus.CounterVec
	verification  *prometheus.CounterVec
}

func newNotifyMetrics() notifyMetrics {
	return notifyMetrics{
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_notify_notifications_total",
			Help: "Audit records that made a notification, by kind (whether or not a sink takes it).",
		}, []string{"kind"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_notify_deliveries_total",
			Help: "Notifications settled at a sink, by sink, kind and result (delivered or failed); each is audited.",
		}, []string{"sink", "kind", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_notify_retries_total",
			Help: "Failed attempts to deliver a notification that were followed by another, by sink.",
		}, []string{"sink"}),
		verification: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_notify_verification_failures_total",
			Help: "Audit stream messages that did not verify as the notifier read them, by kind of problem.",
		}, []string{"kind"}),
	}
}

// notifyObserver feeds the gated_notify_* counters.
func (m *metrics) notifyObserver() notify.Observer {
	n := m.notify
	return notify.Observer{
		Notification: func(k notify.Kind) { n.notifications.WithLabelValues(string(k)).Inc() },
		Result: func(r notify.Result) {
			result := "failed"
			if r.Delivered {
				result = "delivered"
			}
			n.results.WithLabelValues(r.Sink, string(r.Kind), result).Inc()
		},
		Retry:              func(sink string) { n.retries.WithLabelValues(sink).Inc() },
		VerificationFailed: func(p audit.Problem) { n.verification.WithLabelValues(string(p.Kind)).Inc() },
	}
}

// countStatuses exposes how many status events p sent, and how many it
// could not (best effort: a failure is dropped, never retried).
func (m *metrics) countStatuses(p *status.Publisher) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gated_status_events_total",
			Help: "Status events published on gated.status.<tenant>.<id>.",
		}, func() float64 { return float64(p.Published()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gated_status_failures_total",
			Help: "Status events that could not be published (dropped; the decision is not affected).",
		}, func() float64 { return float64(p.Failed()) }),
	)
}

// policyCollector reports the served policy at scrape time.
type policyCollector struct{ live *policies.Live }

var (
	policyInfoDesc = prometheus.NewDesc("gated_policy_info",
		"The policy revision being served and the evaluator that decides it, planned or topdown (always 1).", []string{"revision", "evaluator"}, nil)
	policyStaleDesc = prometheus.NewDesc("gated_policy_stale",
		"1 when the latest policy reload failed and the last good policy is still served.", nil, nil)
	policyReloadsDesc = prometheus.NewDesc("gated_policy_reloads_total",
		"Policy reload attempts, by result.", []string{"result"}, nil)
	policyLoadedDesc = prometheus.NewDesc("gated_policy_loaded_timestamp_seconds",
		"When the served policy was swapped in.", nil, nil)
	policyTestsDesc = prometheus.NewDesc("gated_policy_tests",
		"Rego tests the served policy passed.", nil, nil)
)

func (policyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{policyInfoDesc, policyStaleDesc, policyReloadsDesc, policyLoadedDesc, policyTestsDesc} {
		ch <- d
	}
}

func (c policyCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.live.State()
	stale := 0.0
	if s.Stale {
		stale = 1
	}
	ch <- prometheus.MustNewConstMetric(policyInfoDesc, prometheus.GaugeValue, 1, s.Revision, s.Evaluator.Evaluator)
	ch <- prometheus.MustNewConstMetric(policyStaleDesc, prometheus.GaugeValue, stale)
	ch <- prometheus.MustNewConstMetric(policyReloadsDesc, prometheus.CounterValue, float64(s.Reloads-s.Failures), "ok")
	ch <- prometheus.MustNewConstMetric(policyReloadsDesc, prometheus.CounterValue, float64(s.Failures), "failed")
	ch <- prometheus.MustNewConstMetric(policyLoadedDesc, prometheus.GaugeValue, float64(s.LoadedAt.UnixNano())/1e9)
	ch <- prometheus.MustNewConstMetric(policyTestsDesc, prometheus.GaugeValue, float64(s.Tests))
}

// meteredPolicy observes every evaluation's duration.
type meteredPolicy struct {
	engine.Policy
	eval prometheus.Histogram
}

func (p meteredPolicy) Evaluate(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	d, err := p.Policy.Evaluate(ctx, in)
	if err == nil {
		p.eval.Observe(d.Eval.Seconds())
	}
	return d, err
}

// countingDecider counts the verdicts the worker publishes.
type countingDecider struct {
	intake.Decider
	verdicts *prometheus.CounterVec
	// corrupt counts the records the verdict store refused, by kind.
	corrupt *prometheus.CounterVec
	// dedupeHits counts the verdicts answered at stage dedupe; nil: not
	// counted.
	dedupeHits prometheus.Counter
}

func (d countingDecider) Decide(ctx context.Context, dl engine.Delivery) (*gated.Verdict, error) {
	v, err := d.Decider.Decide(ctx, dl)
	if v != nil {
		d.verdicts.WithLabelValues(string(v.Outcome), string(v.Stage)).Inc()
		if v.Stage == gated.StageDedupe && d.dedupeHits != nil {
			d.dedupeHits.Inc()
		}
	}
	return v, err
}

func (d countingDecider) GiveUp(ctx context.Context, dl engine.Delivery, cause error) *gated.Verdict {
	v := d.Decider.GiveUp(ctx, dl, cause)
	if v != nil {
		d.verdicts.WithLabelValues(string(v.Outcome), string(v.Stage)).Inc()
	}
	return v
}

// corruptRecordHook counts and audits every record the verdict store
// refuses, under the tenant of its key, before the store returns the
// refusal. An audit that fails is logged: the record is refused anyway.
func corruptRecordHook(trail func() engine.AuditTrail, counter *prometheus.CounterVec, log *zap.Logger) store.CorruptRecordHook {
	return func(_ context.Context, e *store.RecordError) {
		counter.WithLabelValues(e.Kind).Inc()
		log.Error("refused a stored record that is not gated's", zap.String("kind", e.Kind), zap.String("key", e.Key),
			zap.Uint64("revision", e.Revision), zap.String("problem", e.Problem))
		tenant := e.Tenant
		if !gated.ValidTenant(tenant) {
			tenant = gated.UnknownTenant
		}
		data, err := json.Marshal(e)
		if err != nil {
			log.Error("encoding a refused record's audit event", zap.Error(err))
			return
		}
		// The reader's context may be about to end; the event must not.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ev := gated.AuditEvent{V: gated.SchemaVersion, Event: gated.EventRecordCorrupt, Tenant: tenant, At: time.Now().UTC(), Data: data}
		if _, err := trail().Seal(ctx, ev); err != nil {
			log.Error("auditing a refused stored record", zap.String("key", e.Key), zap.Error(err))
		}
	}
}

// onBudget counts the budgets' admissions, refusals and tokens.
func (m *metrics) onBudget(e budget.Event) {
	switch {
	case e.RefusalsUnwritten != nil:
		m.budgetRefusalWrites.Inc()
	case e.Tokens > 0:
		m.budgetTokens.WithLabelValues(m.budgetLabels(e.Tenant)...).Add(float64(e.Tokens))
	case e.Refused != "":
		m.budgetRefused.WithLabelValues(m.budgetLabels(e.Tenant, e.Refused)...).Inc()
	default:
		m.budgetAdmitted.WithLabelValues(m.budgetLabels(e.Tenant, string(e.Use))...).Inc()
	}
}

// budgetLabels are the label values of a budget metric: tenant first
// when the metrics name tenants, then values.
func (m *metrics) budgetLabels(tenant string, values ...string) []string {
	if !m.namesTenants() {
		return values
	}
	return append([]string{tenant}, values...)
}

// namesTenants reports whether any metric names a tenant: only when the
// operator asked for it with --metrics-tenant-labels, since /metrics
// answers whoever reaches its listener.
func (m *metrics) namesTenants() bool { return m.tenantLabels }
