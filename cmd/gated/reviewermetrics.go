package main

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gated/gated/bus/audit"
)

// maxReviewerSeries bounds the reviewers /metrics names one by one: a
// plugin reports its own version and model, so their values are not
// gated's to bound. Reviewers beyond it are summed under plugin "_other".
const maxReviewerSeries = 64

// reviewerMetricsLimit bounds the proposals serve's reviewer metrics
// keep one by one (see audit.TrackRecord.Limit): a flood of proposals
// must not grow serve without bound.
const reviewerMetricsLimit = 100_000

// otherReviewer is the label value of the reviewers beyond the bound.
const otherReviewer = "_other"

var (
	reviewerLabels        = []string{"plugin", "plugin_version", "persona", "model"}
	reviewerReviewsDesc   = prometheus.NewDesc("gated_reviewer_reviews_total", "Reviews by reviewer (plugin, version, persona, model) and decision (approve, reject, none for a review that failed), as gated report reviewers counts them, over the audit records since serve started.", append(reviewerLabels, "decision"), nil)
	reviewerOutcomesDesc  = prometheus.NewDesc("gated_reviewer_approved_outcomes", "Approved verdicts the reviewer approved, by the grant's last reported outcome (succeeded, failed), since serve started.", append(reviewerLabels, "status"), nil)
	reviewerFailRateDesc  = prometheus.NewDesc("gated_reviewer_approved_then_failed_ratio", "Approved-then-failed rate: failed over succeeded and failed approved outcomes; absent while there is none.", reviewerLabels, nil)
	reviewerOverridesDesc = prometheus.NewDesc("gated_reviewer_operator_overrides_total", "Operator decisions on a held action or run review that differ from the reviewer's, since serve started.", reviewerLabels, nil)
	reviewerLatencyDesc   = prometheus.NewDesc("gated_reviewer_latency_seconds", "Review latency by reviewer, nearest-rank quantiles 0.5 and 0.99 of latency_ms, since serve started.", append(reviewerLabels, "quantile"), nil)
)

// reviewerCollector exposes the reviewers' track record, folded from the
// audit stream as serve reads it.
type reviewerCollector struct {
	mu sync.Mutex
	tr audit.TrackRecord
}

func (c *reviewerCollector) add(r *audit.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tr.Add(r)
}

// Describe sends the descriptors of the reviewer metrics.
func (c *reviewerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{reviewerReviewsDesc, reviewerOutcomesDesc, reviewerFailRateDesc, reviewerOverridesDesc, reviewerLatencyDesc} {
		ch <- d
	}
}

// Collect sends each reviewer's figures, the first maxReviewerSeries
// reviewers in the report's order one by one and the rest summed.
func (c *reviewerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	rows := c.tr.Reviewers()
	c.mu.Unlock()
	if len(rows) > maxReviewerSeries {
		other := audit.ReviewerStats{ReviewerKey: audit.ReviewerKey{Plugin: otherReviewer, PluginVersion: otherReviewer, Persona: otherReviewer, Model: otherReviewer}}
		for _, r := range rows[maxReviewerSeries:] {
			other.Reviews += r.Reviews
			other.Approvals += r.Approvals
			other.Rejections += r.Rejections
			other.ApprovedSucceeded += r.ApprovedSucceeded
			other.ApprovedFailed += r.ApprovedFailed
			other.OperatorOverrides += r.OperatorOverrides
		}
		if n := other.ApprovedSucceeded + other.ApprovedFailed; n > 0 {
			rate := float64(other.ApprovedFailed) / float64(n)
			other.ApprovedThenFailedRate = &rate
		}
		rows = append(rows[:maxReviewerSeries], other)
	}
	for _, r := range rows {
		l := []string{r.Plugin, r.PluginVersion, r.Persona, r.Model}
		with := func(v string) []string { return append(append([]string(nil), l...), v) }
		ch <- prometheus.MustNewConstMetric(reviewerReviewsDesc, prometheus.CounterValue, float64(r.Approvals), with("approve")...)
		ch <- prometheus.MustNewConstMetric(reviewerReviewsDesc, prometheus.CounterValue, float64(r.Rejections), with("reject")...)
		ch <- prometheus.MustNewConstMetric(reviewerReviewsDesc, prometheus.CounterValue, float64(r.Reviews-r.Approvals-r.Rejections), with("none")...)
		ch <- prometheus.MustNewConstMetric(reviewerOutcomesDesc, prometheus.GaugeValue, float64(r.ApprovedSucceeded), with("succeeded")...)
		ch <- prometheus.MustNewConstMetric(reviewerOutcomesDesc, prometheus.GaugeValue, float64(r.ApprovedFailed), with("failed")...)
		ch <- prometheus.MustNewConstMetric(reviewerOverridesDesc, prometheus.CounterValue, float64(r.OperatorOverrides), l...)
		if r.ApprovedThenFailedRate != nil {
			ch <- prometheus.MustNewConstMetric(reviewerFailRateDesc, prometheus.GaugeValue, *r.ApprovedThenFailedRate, l...)
		}
		if r.LatencyP50MS != nil {
			ch <- prometheus.MustNewConstMetric(reviewerLatencyDesc, prometheus.GaugeValue, *r.LatencyP50MS/1e3, with("0.5")...)
			ch <- prometheus.MustNewConstMetric(reviewerLatencyDesc, prometheus.GaugeValue, *r.LatencyP99MS/1e3, with("0.99")...)
		}
	}
}

// startReviewerMetrics follows the audit stream from now on and folds it
// into the reviewer metrics. It reads on its own consumer: no decision
// waits for it. A read that fails is logged and retried.
func (s *gateServer) startReviewerMetrics(ctx context.Context) error {
	c := &reviewerCollector{tr: audit.TrackRecord{Limit: reviewerMetricsLimit}}
	s.m.reg.MustRegister(c)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.onStop(func() { cancel(); <-done })
	since := time.Now()
	go func() {
		defer close(done)
		var last uint64
		for ctx.Err() == nil {
			q := audit.Query{Follow: true, Since: since, Undecoded: true}
			if last > 0 {
				q = audit.Query{Follow: true, StartSeq: last + 1, Undecoded: true}
			}
			err := audit.Read(ctx, s.js, q, func(e audit.Entry) error {
				last = e.Seq
				// Most records are policy decisions, which hold nothing
				// the metrics count: only the others are decoded.
				if audit.MayTrack(e.Data) {
					e.Decode()
					c.add(e.Record)
				}
				return nil
			})
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("reading the audit stream for the reviewer metrics; retrying", zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return nil
}
