package main

import (
	"context"
	"net/http"

	"github.com/gated/gated/console"
)

// startHTTP serves /healthz, /readyz and the console on --http, when
// given, with /metrics when no other listener takes it (metricsListener),
// and marks the gate ready.
func (s *Server) startHTTP(context.Context) error {
	s.ready.Store(true)
	if s.cfg.HTTPAddr == "" {
		return nil
	}
	con, err := s.console()
	if err != nil {
		return err
	}
	var root http.Handler
	if con != nil {
		root = con
	}
	var metrics http.Handler
	if s.cfg.metricsListener() == "--http" {
		metrics = metricsHandler(s.m)
	}
	stopHTTP, err := serveHTTP(s.cfg.HTTPAddr, s.cfg.Pprof, s.nc, &s.ready, s.live, s.host, s.defaultPlugin, s.budgets, metrics, root, s.log)
	if err != nil {
		if con != nil {
			con.Close()
		}
		return err
	}
	s.onStop("the --http listener", func() {
		// The console's live feeds end first: the listener's shutdown
		// would otherwise wait on them.
		if con != nil {
			con.Close()
		}
		ctx, cancel := s.stopContext(httpStopWait)
		defer cancel()
		stopHTTP(ctx)
	})
	return nil
}

// console builds the web console served under / on --http: only with
// --operators, since only listed operators sign in to it.
func (s *Server) console() (*console.Server, error) {
	if s.operators == nil {
		s.log.Info("web console off: it needs --operators, the operators who may sign in")
		return nil, nil
	}
	var keys [][]byte
	if len(s.auditKey) > 0 {
		keys = [][]byte{s.auditKey}
	}
	return console.New(console.Config{
		NC: s.nc, JS: s.js, Verdicts: s.res.Verdicts, Operators: s.operators, Trails: s.auditor.Trail,
		AuditKeys: keys, System: s.systemStatus, Budgets: s.budgets, Log: s.log.Named("console"),
	})
}

// systemStatus is the console's system page: the plugins and their
// health, the policy served and the shadow beside it.
func (s *Server) systemStatus(context.Context) any {
	doc := map[string]any{"plugins": s.host.Plugins(), "policy": s.live.State()}
	if s.shadow != nil {
		doc["shadow"] = s.shadow.State()
	}
	return doc
}
