package server

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// What /metrics answers needs no credentials: a Prometheus scraper has
// no console session. So it is served where nothing else asks for one:
// on --metrics-listen, a listener of its own, or else on --http as long
// as no console shares that listener. And it names no tenant unless
// --metrics-tenant-labels says so (docs/OBSERVABILITY.md).

// metricsListener names the flag of the listener that serves /metrics:
// --metrics-listen when given; else --http, unless the web console
// (--operators) is on it; "" when no listener serves it.
func (o *Config) metricsListener() string {
	switch {
	case o.MetricsListen != "":
		return "--metrics-listen"
	case o.HTTPAddr != "" && o.Operators == "":
		return "--http"
	}
	return ""
}

// metricsHandler serves the metrics of m in the Prometheus text format.
func metricsHandler(m *metrics) http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// startMetrics serves /metrics, and nothing else, on --metrics-listen
// when given, and says where /metrics is not served when the console
// keeps it off --http.
func (s *Server) startMetrics(context.Context) error {
	if s.cfg.MetricsListen == "" {
		if s.cfg.HTTPAddr != "" && s.cfg.Operators != "" {
			s.log.Warn("/metrics is not served: the web console is on --http, where metrics would answer without a session; give --metrics-listen to serve them on a listener of their own")
		}
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler(s.m))
	stop, addr, err := listenHTTP("--metrics-listen", s.cfg.MetricsListen, mux, s.log)
	if err != nil {
		return err
	}
	s.onStop("the --metrics-listen listener", func() {
		ctx, cancel := s.stopContext(httpStopWait)
		defer cancel()
		stop(ctx)
	})
	s.listeners = append(s.listeners, zap.String("metrics", baseURL(addr)+"/metrics"))
	s.log.Info("metrics served", zap.String("listen", s.cfg.MetricsListen), zap.Bool("tenant_labels", s.cfg.MetricsTenantLabels))
	return nil
}
