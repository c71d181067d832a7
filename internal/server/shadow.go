package server

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/policies"
)

// ShadowSource are the flags of the shadow policy: a candidate decided
// beside the live policy on every proposal, which never changes a verdict.
type ShadowSource struct {
	Dir     string
	Replace bool
}

// Check refuses flags that cannot work together.
func (o *ShadowSource) Check() error {
	if o.Replace && o.Dir == "" {
		return usageError("--shadow-policies-replace needs --shadow-policies DIR: there must be a candidate to use instead of the default")
	}
	return nil
}

// loadShadow builds the shadow policy, with --shadow-policies. A candidate
// that does not build is logged and left out until a reload builds it:
// it never stops gated, nor touches a live decision.
func (s *Server) loadShadow(ctx context.Context) error {
	if s.cfg.Shadow.Dir == "" {
		return nil
	}
	src := policies.Sources{Dir: s.cfg.Shadow.Dir, Replace: s.cfg.Shadow.Replace, DataFiles: s.src.DataFiles, Topdown: s.src.Topdown}
	log := s.log.Named("shadow")
	shadow, err := policies.NewCandidate(ctx, src, func(r policies.Reload) { logShadowReload(log, r) })
	if err != nil {
		log.Error("shadow policy refused: live decisions go on without a shadow until its sources build", zap.String("dir", src.Dir), zap.Error(err))
	} else {
		state := shadow.State()
		log.Info("shadow policy loaded", zap.String("revision", state.Revision), zap.Int("tests", state.Tests), zap.Strings("files", state.Files))
	}
	s.shadow = shadow
	s.m.addShadow(shadow)
	return nil
}

// watchShadow reloads the shadow policy when its files change, as
// --policy-watch does the live one.
func (s *Server) watchShadow(context.Context) error {
	if s.shadow == nil || !s.cfg.PolicyWatch {
		return nil
	}
	s.watchers.Go(func() {
		poll := s.cfg.PolicyPoll
		if poll == 0 {
			poll = -1
		}
		if err := s.shadow.Watch(s.watchCtx, policies.WatchOptions{Poll: poll}); err != nil {
			s.log.Error("shadow policy hot reload is off", zap.Error(err))
		}
	})
	return nil
}

// shadowPolicy is the engine's Shadow: nil without --shadow-policies. It
// evaluates on a pool of its own, for the reason the live policy does
// (see policies.Pool): on the deciding goroutine, each evaluation would
// grow a fresh stack, which costs more than the evaluation itself.
func (s *Server) shadowPolicy() engine.Policy {
	if s.shadow == nil {
		return nil
	}
	pool := policies.NewPool(s.shadow, 0)
	s.onStop("the shadow policy evaluators", pool.Close)
	return pool
}

func logShadowReload(log *zap.Logger, r policies.Reload) {
	switch {
	case !r.OK:
		log.Error("shadow policy reload refused: the last good shadow stays (live decisions are untouched)",
			zap.String("shadowing", r.Previous), zap.String("error", r.Error), zap.Duration("took", r.Duration))
	case r.Changed:
		log.Info("shadow policy reloaded", zap.String("revision", r.Revision), zap.String("previous", r.Previous),
			zap.Int("tests", r.Tests), zap.Duration("took", r.Duration))
	}
}

// shadowMetrics count the shadow's comparisons with the live policy.
type shadowMetrics struct {
	decisions   prometheus.Counter
	differences *prometheus.CounterVec
}

// addShadow registers the shadow policy's metrics.
func (m *metrics) addShadow(shadow *policies.Live) {
	m.shadow = &shadowMetrics{
		decisions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gated_policy_shadow_decisions_total",
			Help: "Proposals the shadow policy decided beside the live one.",
		}),
		differences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gated_policy_shadow_differences_total",
			Help: "Proposals the shadow policy decided otherwise than the live one, by kind of difference (error, outcome, denies, route); one proposal may count under several kinds.",
		}, []string{"kind"}),
	}
	for _, k := range []string{gated.ShadowDiffError, gated.ShadowDiffOutcome, gated.ShadowDiffDenies, gated.ShadowDiffRoute} {
		m.shadow.differences.WithLabelValues(k)
	}
	m.reg.MustRegister(m.shadow.decisions, m.shadow.differences, shadowCollector{shadow})
}

// onShadow is the engine's OnShadow: it counts a comparison.
func (m *metrics) onShadow() func(*gated.Proposal, gated.ShadowComparison) {
	if m.shadow == nil {
		return nil
	}
	return func(_ *gated.Proposal, c gated.ShadowComparison) {
		m.shadow.decisions.Inc()
		for _, k := range c.Kinds {
			m.shadow.differences.WithLabelValues(k).Inc()
		}
	}
}

// shadowCollector reports the shadow policy at scrape time.
type shadowCollector struct{ shadow *policies.Live }

var (
	shadowInfoDesc = prometheus.NewDesc("gated_policy_shadow_info",
		"The shadow policy revision being evaluated, empty before its first good build (always 1).", []string{"revision"}, nil)
	shadowStaleDesc = prometheus.NewDesc("gated_policy_shadow_stale",
		"1 when the latest shadow policy build failed.", nil, nil)
)

func (shadowCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- shadowInfoDesc
	ch <- shadowStaleDesc
}

func (c shadowCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.shadow.State()
	stale := 0.0
	if s.Stale {
		stale = 1
	}
	ch <- prometheus.MustNewConstMetric(shadowInfoDesc, prometheus.GaugeValue, 1, s.Revision)
	ch <- prometheus.MustNewConstMetric(shadowStaleDesc, prometheus.GaugeValue, stale)
}
