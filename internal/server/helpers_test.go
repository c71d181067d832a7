package server

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
)

// The package's tests start what they need themselves: bus/bustest runs
// this package's server, so they cannot use it.

// natsServer starts an embedded server, shut down when the test ends.
func natsServer(t testing.TB) *natsserver.Server {
	t.Helper()
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: t.TempDir()}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// connect opens a connection to s, closed when the test ends.
func connect(t testing.TB, s *natsserver.Server) (*nats.Conn, jetstream.JetStream) {
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

// auditWriter starts an audit writer on js, closed when the test ends.
func auditWriter(t testing.TB, js jetstream.JetStream) *audit.Writer {
	t.Helper()
	a, err := audit.NewWriter(t.Context(), js, audit.Config{Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("closing the audit writer: %v", err)
		}
	})
	return a
}

// freeTCPAddr is a loopback address no listener holds now.

// freeTCPAddr is a loopback address no listener holds now.
func freeTCPAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// allStacks is the stack of every goroutine.
func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
