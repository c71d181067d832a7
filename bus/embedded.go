package bus

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
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

// StartEmbedded starts an in-process nats-server with JetStream and waits
// until it accepts clients.
func StartEmbedded(cfg EmbeddedConfig, log *zap.Logger) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("%w: the embedded server needs a data directory", ErrInvalidConfig)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:4222"
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = 2 << 20
	}
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("%w: listen address %q: %v", ErrInvalidConfig, cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("%w: listen port %q must be a number from 0 to 65535", ErrInvalidConfig, portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if host == "" {
		// nats-server reads an empty host as every interface; gated's
		// embedded server is unauthenticated, so it stays on loopback
		// unless asked otherwise by name (0.0.0.0).
		host = "127.0.0.1"
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
	s.SetLoggerV2(natsLogger{log.Named("nats").Sugar()}, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server did not accept clients on %s within 15s (is the port in use?)", cfg.Listen)
	}
	return s, nil
}

// natsLogger sends nats-server's log lines to zap.
type natsLogger struct{ s *zap.SugaredLogger }

func (l natsLogger) Noticef(format string, v ...any) { l.s.Debugf(format, v...) }
func (l natsLogger) Warnf(format string, v ...any)   { l.s.Warnf(format, v...) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.s.Errorf(format, v...) }
func (l natsLogger) Errorf(format string, v ...any)  { l.s.Errorf(format, v...) }
func (l natsLogger) Debugf(format string, v ...any)  { l.s.Debugf(format, v...) }
func (l natsLogger) Tracef(format string, v ...any)  { l.s.Debugf(format, v...) }
