package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/gated/gated"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.uber.org/zap"

	"github.com/gated/gated/internal/telemetry"
	"github.com/gated/gated/plugins"
)

// startTracing installs the OTLP trace exporter when the standard OTEL_*
// variables ask for one (docs/OBSERVABILITY.md); without them nothing is
// traced. The spans still buffered are flushed when serve stops.
func (s *Server) startTracing(ctx context.Context) error {
	shutdown, err := telemetry.Setup(ctx, "gated", os.LookupEnv)
	if err != nil {
		return err
	}
	if telemetry.Enabled() {
		s.log.Info("traces exported over OTLP (OTEL_* variables)")
		// Export failures go to gated's log, not to stderr.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			s.log.Warn("exporting traces", zap.Error(err))
		}))
	}
	s.onStop("the trace exporter", func() {
		fctx, cancel := s.stopContext(5 * time.Second)
		defer cancel()
		if err := shutdown(fctx); err != nil {
			s.log.Warn("flushing traces at shutdown", zap.Error(err))
		}
	})
	return nil
}

// observabilityMetrics are the metrics of reviews, plugins, audit
// appends, claim waits and dedupe hits that the dashboard in
// docs/grafana/gated.json shows.
type observabilityMetrics struct {
	reviews      *prometheus.HistogramVec
	pluginEvents *prometheus.CounterVec
	restarts     *prometheus.CounterVec
	auditAppend  *prometheus.HistogramVec
	claimWait    prometheus.Histogram
	dedupeHits   prometheus.Counter

	mu      sync.Mutex
	started map[string]bool // plugins started at least once
}

// reviewBuckets span a zero-latency plugin (a millisecond) to a slow
// model (the 60 s default deadline and beyond).
var reviewBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120}

func newObservabilityMetrics() *observabilityMetrics {
	return &observabilityMetrics{
		reviews: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gated_review_seconds",
			Help:    "Reviews by plugin and persona (configured names only), from the wait for a free slot on the plugin to its answer, by result: ok (the plugin answered, whatever it decided), timeout or error.",
			Buckets: reviewBuckets,
		}, []string{"plugin", "persona", "result"}),
		pluginEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_plugin_events_total",
			Help: "Plugin lifecycle events, by plugin and event: started, exited, unhealthy (missed its health checks and was killed), refused (checksum mismatch).",
		}, []string{"plugin", "event"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_plugin_restarts_total",
			Help: "Plugin launches after the first, by plugin: relaunches after an exit or a failed health check.",
		}, []string{"plugin"}),
		auditAppend: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gated_audit_append_seconds",
			Help:    "Audit trail appends (Seal: the final record queued until every record of the trail is stored), by result: ok or error.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 10},
		}, []string{"result"}),
		claimWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gated_claim_wait_seconds",
			Help:    "Waits of a delivery for the verdict of another message that holds the same proposal's review claim.",
			Buckets: reviewBuckets,
		}),
		dedupeHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gated_dedupe_hits_total",
			Help: "Proposals answered with an earlier identical rejection (stage dedupe) instead of a new judgement.",
		}),
		started: map[string]bool{},
	}
}

func (o *observabilityMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{o.reviews, o.pluginEvents, o.restarts, o.auditAppend, o.claimWait, o.dedupeHits}
}

// observeReview feeds gated_review_seconds.
func (o *observabilityMetrics) observeReview(r plugins.ReviewObservation) {
	result := "ok"
	switch {
	case r.Err == nil:
	case errors.Is(r.Err, context.DeadlineExceeded):
		result = "timeout"
	default:
		result = "error"
	}
	o.reviews.WithLabelValues(r.Plugin, r.Persona, result).Observe(r.Took.Seconds())
}

// observeClaimWait feeds gated_claim_wait_seconds.
func (o *observabilityMetrics) observeClaimWait(took time.Duration) {
	o.claimWait.Observe(took.Seconds())
}

// observeAppend feeds gated_audit_append_seconds.
func (o *observabilityMetrics) observeAppend(took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	o.auditAppend.WithLabelValues(result).Observe(took.Seconds())
}

// pluginEventNames maps the host's audit events to the event label.
var pluginEventNames = map[string]string{
	plugins.EventPluginStarted:   "started",
	plugins.EventPluginExited:    "exited",
	plugins.EventPluginUnhealthy: "unhealthy",
	plugins.EventPluginRefused:   "refused",
}

// countPluginEvent feeds gated_plugin_events_total and
// gated_plugin_restarts_total from one of the host's events.
func (o *observabilityMetrics) countPluginEvent(ev gated.AuditEvent) {
	name, ok := pluginEventNames[ev.Event]
	if !ok {
		return
	}
	var data struct {
		Plugin string `json:"plugin"`
	}
	if err := json.Unmarshal(ev.Data, &data); err != nil || data.Plugin == "" {
		return
	}
	o.pluginEvents.WithLabelValues(data.Plugin, name).Inc()
	if ev.Event != plugins.EventPluginStarted {
		return
	}
	o.mu.Lock()
	again := o.started[data.Plugin]
	o.started[data.Plugin] = true
	o.mu.Unlock()
	if again {
		o.restarts.WithLabelValues(data.Plugin).Inc()
	}
}

// pluginUpDesc reports each configured plugin's health at scrape time.
var pluginUpDesc = prometheus.NewDesc("gated_plugin_up",
	"1 while the plugin's process runs (launched and not exited), 0 while it is down or being relaunched; a plugin that misses its health checks is killed, and reads 0 until relaunched.", []string{"plugin"}, nil)

// pluginCollector reports gated_plugin_up from the host.
type pluginCollector struct{ host *plugins.Host }

func (pluginCollector) Describe(ch chan<- *prometheus.Desc) { ch <- pluginUpDesc }

func (c pluginCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.host.Plugins() {
		up := 0.0
		if p.Running {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(pluginUpDesc, prometheus.GaugeValue, up, p.Name)
	}
}
