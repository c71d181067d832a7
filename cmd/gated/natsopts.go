package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/internal/natsconn"
)

// natsConnOptions are the connection flags every command that connects
// registers (natsconn.Options), with their refusals turned into usage
// errors, so a bad flag exits 2 whichever command was given it.
type natsConnOptions struct {
	natsconn.Options
}

func (o *natsConnOptions) register(f *pflag.FlagSet) { o.Register(f) }

// connect connects to servers, where gated serve's NATS is expected:
// when no NATS server answers there (nothing listens, or what listens
// says nothing or hangs up), the error asks whether it runs.
func (o *natsConnOptions) connect(servers, name string, extra ...nats.Option) (*nats.Conn, error) {
	nc, err := o.Connect(servers, name, extra...)
	var ne net.Error
	if errors.Is(err, nats.ErrNoServers) || errors.Is(err, io.EOF) || errors.As(err, &ne) && ne.Timeout() {
		return nil, fmt.Errorf("%w (is gated serve running?)", err)
	}
	return nc, asUsage(err)
}

// asUsage makes a refused flag a usage error; other errors stay as they
// are.
func asUsage(err error) error {
	var ue *natsconn.UsageError
	if errors.As(err, &ue) {
		return usageError("%s", ue.Error())
	}
	return err
}

// client connects once, without reconnecting (a command makes a few
// requests and exits), and wraps the connection in a fleet client. The
// caller closes the connection.
func (o *natsConnOptions) client(servers, name string) (*nats.Conn, *fleet.Client, error) {
	nc, err := o.connect(servers, name, nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		return nil, nil, err
	}
	client, err := fleet.NewClient(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, client, nil
}
