package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/console"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/policies"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
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
	stopHTTP, addr, err := serveHTTP(s.cfg.HTTPAddr, s.cfg.Pprof, s.nc, &s.ready, s.live, s.host, s.defaultPlugin, s.budgets, metrics, root, s.log)
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
	base := baseURL(addr)
	s.listeners = append(s.listeners, zap.String("http", base))
	if con != nil {
		s.listeners = append(s.listeners, zap.String("console", base+"/"))
	}
	if metrics != nil {
		s.listeners = append(s.listeners, zap.String("metrics", base+"/metrics"))
	}
	return nil
}

// baseURL is the URL of an HTTP listener bound to addr, for the log: a
// listener on every address is reached on this host as localhost.
func baseURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
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

// serveHTTP serves /healthz and /readyz on addr, metrics (when not nil)
// under /metrics, the profiles when asked, and root (the console), when
// not nil, under /.
func serveHTTP(addr string, profiles bool, nc *nats.Conn, ready *atomic.Bool, live *policies.Live, host *plugins.Host, defaultPlugin string, budgets *budget.Store, metrics, root http.Handler, log *zap.Logger) (stop func(ctx context.Context), bound net.Addr, err error) {
	mux := http.NewServeMux()
	if root != nil {
		mux.Handle("/", root)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		policy := live.State()
		body := Readiness{Ready: true, NATS: nc.Status().String(), Policy: policy, Plugins: host.Plugins()}
		defaultUp := false
		for _, p := range body.Plugins {
			defaultUp = defaultUp || (p.Name == defaultPlugin && p.Running)
		}
		switch {
		case !ready.Load():
			body.Ready, body.Reason = false, "shutting down"
		case !nc.IsConnected():
			body.Ready, body.Reason = false, "NATS connection "+nc.Status().String()
		case !defaultUp:
			// Reviews would be blocked until the supervisor relaunches it.
			body.Ready, body.Reason = false, "the default reviewer plugin "+defaultPlugin+" is not running"
		case budgets != nil && budgetsUnreachable(r.Context(), budgets) != "":
			// No review starts while the counters cannot be reached.
			body.Ready, body.Reason = false, budgetsUnreachable(r.Context(), budgets)
		case policy.Stale:
			// The last good policy is still served; the policy on disk is
			// not, and an operator should know.
			body.Ready, body.Reason = false, "the latest policy reload failed; serving the last good revision "+policy.Revision
		}
		w.Header().Set("Content-Type", "application/json")
		if !body.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return listenHTTP("--http", addr, mux, log)
}

// listenHTTP serves h on addr, the address of flag, until stop, and
// returns the address it is bound to. stop waits for the requests under
// way until ctx ends, then closes what is still open.
func listenHTTP(flag, addr string, h http.Handler, log *zap.Logger) (stop func(ctx context.Context), bound net.Addr, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on %s %s: %w", flag, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", zap.String("listener", flag), zap.Error(err))
		}
	}()
	return func(ctx context.Context) {
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, ln.Addr(), nil
}

// budgetsUnreachable says why the budget counters cannot be reached, or
// "" when they can.
func budgetsUnreachable(ctx context.Context, b *budget.Store) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := b.Check(ctx); err != nil {
		return "the budget counters cannot be reached, so no review starts: " + err.Error()
	}
	return ""
}

// Readiness is the /readyz document.
type Readiness struct {
	Ready   bool           `json:"ready"`
	Reason  string         `json:"reason,omitempty"`
	NATS    string         `json:"nats"`
	Policy  policies.State `json:"policy"`
	Plugins []plugins.Info `json:"plugins"`
}
