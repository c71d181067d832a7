package main

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
)

// natsConnOptions are the flags for reaching an external NATS server.
type natsConnOptions struct {
	creds    string
	nkey     string
	user     string
	password string
	tlsCA    string
	tlsCert  string
	tlsKey   string
}

func (o *natsConnOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.creds, "nats-creds", "", "NATS credentials file (JWT and nkey seed)")
	f.StringVar(&o.nkey, "nats-nkey", "", "NATS nkey seed file")
	f.StringVar(&o.user, "nats-user", "", "NATS user name")
	f.StringVar(&o.password, "nats-password", "", "NATS password (prefer GATED_NATS_PASSWORD)")
	f.StringVar(&o.tlsCA, "nats-tls-ca", "", "CA certificate to verify the NATS server")
	f.StringVar(&o.tlsCert, "nats-tls-cert", "", "client certificate for NATS mutual TLS")
	f.StringVar(&o.tlsKey, "nats-tls-key", "", "client key for NATS mutual TLS")
}

func (o *natsConnOptions) options(name string) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
	}
	if o.creds != "" {
		opts = append(opts, nats.UserCredentials(o.creds))
	}
	if o.nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(o.nkey)
		if err != nil {
			return nil, usageError("--nats-nkey %s: %v", o.nkey, err)
		}
		opts = append(opts, opt)
	}
	if o.user != "" {
		opts = append(opts, nats.UserInfo(o.user, o.password))
	}
	if o.tlsCA != "" {
		opts = append(opts, nats.RootCAs(o.tlsCA))
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, usageError("--nats-tls-cert and --nats-tls-key go together")
	}
	if o.tlsCert != "" {
		opts = append(opts, nats.ClientCert(o.tlsCert, o.tlsKey))
	}
	return opts, nil
}
