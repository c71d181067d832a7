// Package natstest starts real NATS servers with JetStream for tests: in
// process, on a free loopback port, with their files in a test temp dir;
// connections to them, an audit writer on them, and free loopback ports.
// bus/bustest, which starts gated on such a server, and internal/server's
// own tests, which bus/bustest cannot serve, both use it.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
)

// Server starts an embedded server that is shut down when the test ends.
func Server(t testing.TB) *server.Server {
	t.Helper()
	log := zaptest.NewLogger(t)
	if _, bench := t.(*testing.B); bench {
		// A benchmark prints what it logs beside its figures, on every
		// run: the server's start-up banner would bury them.
		log = zap.NewNop()
	}
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// ServerWithOptions starts a nats-server configured by opts (accounts,
// users, TLS, JetStream) on a free loopback port, without its own logging
// or signal handling, and shuts it down when the test ends.
func ServerWithOptions(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	// A bound, not a speed check: a clustered server under the race
	// detector, beside other test packages on two cores, has taken over
	// 10 s to open its listeners.
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready for connections within 30s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect opens a connection to s that is closed when the test ends.
func Connect(t testing.TB, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// AuditWriter starts an audit writer on js, logging to the test, and
// drains it when the test ends.
func AuditWriter(tb testing.TB, js jetstream.JetStream, cfg audit.Config) *audit.Writer {
	tb.Helper()
	if cfg.Log == nil {
		cfg.Log = zaptest.NewLogger(tb)
	}
	a, err := audit.NewWriter(tb.Context(), js, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			tb.Errorf("closing the audit writer: %v", err)
		}
	})
	return a
}
