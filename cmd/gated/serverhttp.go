package main

import (
	"context"
	"net/http"

	"github.com/gated/gated/console"
)

// startHTTP serves /healthz, /readyz and the console on --http, when
// given, with /metrics when no other listener takes it (metricsListener),
// and marks the gate ready.
func (s *gateServer) startHTTP(context.Context) error {
	s.ready.Store(true)
	if s.o.HTTPAddr == "" {
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
	if s.o.metricsListener() == "--http" {
		metrics = metricsHandler(s.m)
	}
	stopHTTP, err := serveHTTP(s.o.HTTPAddr, s.o.Pprof, s.nc, &s.ready, s.live, s.host, s.defaultPlugin, s.budgets, metrics, root, s.log)
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
func (s *gateServer) console() (*console.Server, error) {
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
func (s *gateServer) systemStatus(context.Context) any {
	doc := map[string]any{"plugins": s.host.Plugins(), "policy": s.live.State()}
	if s.shadow != nil {
		doc["shadow"] = s.shadow.State()
	}
	return doc
}
