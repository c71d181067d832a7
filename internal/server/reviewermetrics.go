package server

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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

// reviewerMetricsEvery is how often serve reads the audit records
// stored since its last read into the reviewer metrics. A scrape of
// /metrics starts a read of its own and waits for it, up to
// reviewerMetricsWait, so between rounds the figures still count every
// record stored before the scrape.
//
// The rounds are what keep serve's memory down: a reader right behind
// the writer makes the NATS server keep the cache of every finished
// block of the stream for its fixed expiry, about 10 s of audit
// records; a reader that comes back after a block is finished reads it
// from the disk once and lets it go (docs/BENCHMARKS.md, "Where the
// llm run's memory went").
const (
	reviewerMetricsEvery = 5 * time.Second
	reviewerMetricsWait  = 2 * time.Second
)

// reviewerCollector exposes the reviewers' track record, folded from the
// audit stream in rounds.
type reviewerCollector struct {
	mu sync.Mutex
	tr audit.TrackRecord
	// catchUp, when set, reads the records stored since the last round
	// before Collect reports; it returns once they are folded or ctx
	// ends.
	catchUp func(ctx context.Context)
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
	if c.catchUp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), reviewerMetricsWait)
		c.catchUp(ctx)
		cancel()
	}
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

// startReviewerMetrics folds the audit records stored from now on into
// the reviewer metrics, in rounds every reviewerMetricsEvery and before
// each scrape. It reads on its own consumer: no decision waits for it. A
// round that fails is logged; the next one starts where it stopped.
func (s *Server) startReviewerMetrics(ctx context.Context) error {
	c, stop := followReviewers(ctx, s.js, reviewerMetricsEvery, s.log)
	s.m.reg.MustRegister(c)
	s.onStop("the reviewer metrics reader", stop)
	return nil
}

// followReviewers returns a collector of the reviewer metrics over the
// audit records stored from now on, read in rounds every every and when
// a scrape asks, and the function that stops the reading.
func followReviewers(ctx context.Context, js jetstream.JetStream, every time.Duration, log *zap.Logger) (*reviewerCollector, func()) {
	c := &reviewerCollector{tr: audit.TrackRecord{Limit: reviewerMetricsLimit}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	asks := make(chan chan struct{})
	c.catchUp = func(wait context.Context) {
		read := make(chan struct{})
		select {
		case asks <- read:
		case <-wait.Done():
			return
		case <-done:
			return
		}
		select {
		case <-read:
		case <-wait.Done():
		}
	}
	since := time.Now()
	go func() {
		defer close(done)
		var last uint64
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			var read chan struct{}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case read = <-asks:
			}
			q := audit.Query{Since: since, Undecoded: true}
			if last > 0 {
				q = audit.Query{StartSeq: last + 1, Undecoded: true}
			}
			err := audit.Read(ctx, js, q, func(e audit.Entry) error {
				last = e.Seq
				// Most records are policy decisions, which hold nothing
				// the metrics count: only the others are decoded.
				if e.DecodeIfTracked() {
					c.add(e.Record)
				}
				return nil
			})
			if read != nil {
				close(read)
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				log.Warn("reading the audit stream for the reviewer metrics; the next round starts where this one stopped", zap.Error(err))
			}
		}
	}()
	return c, func() { cancel(); <-done }
}
