package bus

import (
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// EmbeddedConfig configures the nats-server that gated starts when it is
// given no external server.
type EmbeddedConfig struct {
	// Listen is the client listener, host:port. Default 127.0.0.1:4222;
	// port 0 picks a free port.
	Listen string
	// StoreDir is where JetStream keeps its files. Required.
	StoreDir string
	// MaxPayload is the largest message the server accepts. Default 2 MiB,
	// above the proposal limit, so an oversize proposal reaches gated and
	// gets an invalid verdict instead of a bare publish error.
	MaxPayload int32
}

// EmbeddedMemoryLimit is the soft memory limit of a gated that runs the
// embedded server, unless GOMEMLIMIT sets another (SetEmbeddedMemoryLimit).
// The server's state lies in gated's heap then (the subject index of
// every stored key, the duplicate window's ids, block buffers), and Go's
// collector lets the heap grow to twice what was live after a collection:
// a heap profile of a gated holding a million decisions showed 254 MB
// live and 698 MB resident (docs/NATS.md, Memory). Near the limit the
// collector runs more often instead of letting the heap grow; below it
// nothing changes. It cannot bring the heap under the live state: past
// it the collector takes up to half the CPU, so a gated whose embedded
// server holds more (millions of keys: rate × verdict_ttl) is given a
// GOMEMLIMIT above its live state, or an external server.
const EmbeddedMemoryLimit = 448 << 20

// SetEmbeddedMemoryLimit sets Go's soft memory limit to
// EmbeddedMemoryLimit unless the environment's GOMEMLIMIT set one. It
// returns the limit in force and a func that puts back the one before.
func SetEmbeddedMemoryLimit() (limit int64, undo func()) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), func() {}
	}
	prev := debug.SetMemoryLimit(EmbeddedMemoryLimit)
	return EmbeddedMemoryLimit, func() { debug.SetMemoryLimit(prev) }
}

// embeddedStartTimeout bounds the embedded server's start: opening the
// store (JetStream recovers every stream) and the client listener.
const embeddedStartTimeout = 15 * time.Second

// listenAddr is the host and port the embedded server listens on, with
// the defaults applied; port 0 asks for a free port.
func (cfg EmbeddedConfig) listenAddr() (host string, port int, err error) {
	listen := cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("%w: listen address %q: %v", ErrInvalidConfig, listen, err)
	}
	port, err = strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%w: listen port %q must be a number from 0 to 65535", ErrInvalidConfig, portStr)
	}
	if host == "" {
		// nats-server reads an empty host as every interface; gated's
		// embedded server is unauthenticated, so it stays on loopback
		// unless asked otherwise by name (0.0.0.0).
		host = "127.0.0.1"
	}
	return host, port, nil
}

// CheckEmbeddedListen checks, before anything starts, that the embedded
// server could listen where cfg says: the address is valid and, unless
// its port is 0, nobody listens there. The error names the address and
// the system's reason (e.g. address already in use).
func CheckEmbeddedListen(cfg EmbeddedConfig) error {
	host, port, err := cfg.listenAddr()
	if err != nil || port == 0 {
		return err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("the embedded nats-server cannot listen on %s: %w", addr, err)
	}
	return ln.Close()
}

// StartEmbedded starts an in-process nats-server with JetStream and waits
// until it accepts clients. When the server cannot start (its store or
// its port is unusable), the error is the server's own reason, at once.
//
// StartEmbedded does not lock the store: a caller that may share it with
// another process takes LockDataDir first.
func StartEmbedded(cfg EmbeddedConfig, log *zap.Logger) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("%w: the embedded server needs a data directory", ErrInvalidConfig)
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = 2 << 20
	}
	host, port, err := cfg.listenAddr()
	if err != nil {
		return nil, err
	}
	listen := net.JoinHostPort(host, strconv.Itoa(port))
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "gated-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		MaxPayload: cfg.MaxPayload,
		NoSigs:     true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("configuring embedded nats-server: %w", err)
	}
	// The stack of the logging call says nothing about the server's
	// errors, so its lines carry none.
	watch := &startWatch{}
	s.SetLoggerV2(natsLogger{s: log.Named("nats").WithOptions(zap.AddStacktrace(zapcore.FatalLevel)).Sugar(), start: watch}, false, false, false)
	started := make(chan struct{})
	go func() {
		defer close(started)
		// Start returns once the store is open and the listener is up, or
		// at once after the Fatalf that says why it cannot be.
		s.Start()
	}()
	timer := time.NewTimer(embeddedStartTimeout)
	defer timer.Stop()
	failed := func(reason string) (*server.Server, error) {
		s.Shutdown()
		return nil, fmt.Errorf("starting the embedded nats-server (store %s, clients on %s): %s", cfg.StoreDir, listen, reason)
	}
	select {
	case <-started:
	case <-timer.C:
		return failed(fmt.Sprintf("not started after %s", embeddedStartTimeout))
	}
	if reason := watch.end(); reason != "" {
		return failed(reason)
	}
	if !s.ReadyForConnections(embeddedStartTimeout) {
		return failed(fmt.Sprintf("not accepting clients after %s", embeddedStartTimeout))
	}
	return s, nil
}

// natsLogger sends nats-server's log lines to zap. The server's first
// fatal error during its start goes to start instead, for StartEmbedded to
// return; later ones are logged.
type natsLogger struct {
	s     *zap.SugaredLogger
	start *startWatch
}

// startWatch keeps the server's first fatal error until the start is over.
type startWatch struct {
	mu     sync.Mutex
	over   bool
	reason string
}

// fail keeps reason and reports true while the start is not over and no
// reason was kept yet.
func (w *startWatch) fail(reason string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over || w.reason != "" {
		return false
	}
	w.reason = reason
	return true
}

// end ends the start and returns the reason it failed, or "".
func (w *startWatch) end() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.over = true
	return w.reason
}

func (l natsLogger) Noticef(format string, v ...any) { l.s.Debugf(format, v...) }
func (l natsLogger) Warnf(format string, v ...any)   { l.s.Warnf(format, v...) }
func (l natsLogger) Fatalf(format string, v ...any) {
	if !l.start.fail(fmt.Sprintf(format, v...)) {
		l.s.Errorf(format, v...)
	}
}
func (l natsLogger) Errorf(format string, v ...any) { l.s.Errorf(format, v...) }
func (l natsLogger) Debugf(format string, v ...any) { l.s.Debugf(format, v...) }
func (l natsLogger) Tracef(format string, v ...any) { l.s.Debugf(format, v...) }
