// Package natsconn holds the flags that say how to reach and
// authenticate to an external NATS server, and the connection they give,
// shared by the commands that connect (gated's and gated-bench).
package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Options are the flags that say how to reach and authenticate to an
// external NATS server. Every command that connects registers them and
// connects through Connect, so serve, propose and the commands that read
// verdicts and audit events authenticate alike. Secrets are best given
// through the environment (GATED_NATS_PASSWORD, GATED_NATS_TOKEN): flag
// values show in the process list.
type Options struct {
	// creds is a JWT credentials file (user JWT and nkey seed), for
	// decentralised auth. Conflicts with nkey, user and token.
	creds string
	// nkey is a file holding a user nkey seed. Conflicts with creds, user
	// and token.
	nkey string
	// user and password authenticate by name; password needs user, and
	// user a password. Conflict with creds, nkey and token.
	user     string
	password string
	// token is a bare authentication token. Conflicts with creds, nkey
	// and user.
	token string
	// tlsCA is the CA bundle that verifies the server's certificate;
	// default: the system roots. tlsCert and tlsKey are a client
	// certificate for mutual TLS and go together. Any of the three makes
	// TLS mandatory: the connection fails instead of falling back to
	// plain text.
	tlsCA   string
	tlsCert string
	tlsKey  string
	// inboxPrefix replaces _INBOX as the prefix of reply subjects, for
	// accounts whose permissions give each tenant its own inbox space.
	inboxPrefix string
}

// authFlags are the flags that choose how to authenticate, at most
// one of which may be given.
var authFlags = []string{"--nats-creds", "--nats-nkey", "--nats-user", "--nats-token"}

// Register adds the flags to f.
func (o *Options) Register(f *pflag.FlagSet) {
	f.StringVar(&o.creds, "nats-creds", "", "NATS credentials file: user JWT and nkey seed (decentralised auth)")
	f.StringVar(&o.nkey, "nats-nkey", "", "file holding the NATS user's nkey seed")
	f.StringVar(&o.user, "nats-user", "", "NATS user name; the password comes from GATED_NATS_PASSWORD")
	f.StringVar(&o.password, "nats-password", "", "NATS password (prefer GATED_NATS_PASSWORD: flags show in the process list)")
	f.StringVar(&o.token, "nats-token", "", "NATS authentication token (prefer GATED_NATS_TOKEN: flags show in the process list)")
	f.StringVar(&o.tlsCA, "nats-tls-ca", "", "CA certificate(s) that verify the NATS server; any --nats-tls-* flag makes TLS mandatory")
	f.StringVar(&o.tlsCert, "nats-tls-cert", "", "client certificate for NATS mutual TLS (with --nats-tls-key)")
	f.StringVar(&o.tlsKey, "nats-tls-key", "", "client key for NATS mutual TLS (with --nats-tls-cert)")
	f.StringVar(&o.inboxPrefix, "nats-inbox-prefix", "", "prefix of reply subjects instead of _INBOX, e.g. _INBOX_acme when the account scopes inboxes per tenant")
	// File flags: relative paths in a --config file are relative to it.
	for _, name := range []string{"nats-creds", "nats-nkey", "nats-tls-ca", "nats-tls-cert", "nats-tls-key"} {
		_ = cobra.MarkFlagFilename(f, name)
	}
}

// AuthFlags returns the authentication and TLS flags that are set, by
// name; the inbox prefix is not among them.
func (o *Options) AuthFlags() []string {
	var set []string
	for _, f := range []struct {
		name, value string
	}{
		{"--nats-creds", o.creds}, {"--nats-nkey", o.nkey}, {"--nats-user", o.user},
		{"--nats-password", o.password}, {"--nats-token", o.token},
		{"--nats-tls-ca", o.tlsCA}, {"--nats-tls-cert", o.tlsCert}, {"--nats-tls-key", o.tlsKey},
	} {
		if f.value != "" {
			set = append(set, f.name)
		}
	}
	return set
}

// Validate checks the flags without connecting: one way to authenticate,
// complete pairs, readable files, a usable inbox prefix. Its errors are
// *UsageError.
func (o *Options) Validate() error {
	var methods []string
	for i, v := range []string{o.creds, o.nkey, o.user, o.token} {
		if v != "" {
			methods = append(methods, authFlags[i])
		}
	}
	switch {
	case len(methods) > 1:
		return usageError("%s are alternatives: give one way to authenticate to NATS", strings.Join(methods, " and "))
	case o.password != "" && o.user == "":
		return usageError("--nats-password (GATED_NATS_PASSWORD) needs --nats-user")
	case o.user != "" && o.password == "":
		return usageError("--nats-user %q needs a password: set GATED_NATS_PASSWORD (or --nats-password)", o.user)
	case o.tlsCert != "" && o.tlsKey == "":
		return usageError("--nats-tls-cert needs --nats-tls-key: a client certificate goes with its private key")
	case o.tlsKey != "" && o.tlsCert == "":
		return usageError("--nats-tls-key needs --nats-tls-cert: a private key goes with its client certificate")
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-creds", o.creds}, {"--nats-nkey", o.nkey},
		{"--nats-tls-ca", o.tlsCA}, {"--nats-tls-cert", o.tlsCert}, {"--nats-tls-key", o.tlsKey},
	} {
		if f.path == "" {
			continue
		}
		if st, err := os.Stat(f.path); err != nil {
			return usageError("%s: %v", f.flag, err)
		} else if st.IsDir() {
			return usageError("%s %s is a directory, not a file", f.flag, f.path)
		}
	}
	if p := o.inboxPrefix; p != "" {
		if strings.ContainsAny(p, "*> \t\r\n") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
			return usageError("--nats-inbox-prefix %q must be a subject without wildcards, spaces or a trailing dot, e.g. _INBOX_acme", p)
		}
	}
	return nil
}

// NATSOptions returns the nats.go options the flags give, for a
// connection named name. Errors are *UsageError naming the flag.
func (o *Options) NATSOptions(name string) ([]nats.Option, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
	}
	switch {
	case o.creds != "":
		opts = append(opts, nats.UserCredentials(o.creds))
	case o.nkey != "":
		opt, err := nats.NkeyOptionFromSeed(o.nkey)
		if err != nil {
			return nil, usageError("--nats-nkey %s: %v", o.nkey, err)
		}
		opts = append(opts, opt)
	case o.user != "":
		opts = append(opts, nats.UserInfo(o.user, o.password))
	case o.token != "":
		opts = append(opts, nats.Token(o.token))
	}
	if o.tlsCA != "" || o.tlsCert != "" {
		// Secure first: it keeps the CA and certificate set below, and it
		// refuses a server that offers no TLS instead of sending the
		// credentials in plain text.
		opts = append(opts, nats.Secure())
	}
	if o.tlsCA != "" {
		opts = append(opts, nats.RootCAs(o.tlsCA))
	}
	if o.tlsCert != "" {
		opts = append(opts, nats.ClientCert(o.tlsCert, o.tlsKey))
	}
	if o.inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.inboxPrefix))
	}
	return opts, nil
}

// Connect connects to servers (one URL or a comma-separated list) with
// the options the flags give, then extra, which may override them. Bad
// flags are *UsageError; a refused connection is an error that names the
// servers without their credentials and says which flag to look at.
func (o *Options) Connect(servers, name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := o.NATSOptions(name)
	if err != nil {
		return nil, err
	}
	if err := CheckURL(servers); err != nil {
		return nil, err
	}
	if HasURLCredentials(servers) && o.creds+o.nkey+o.user+o.token != "" {
		return nil, usageError("--nats-url %s carries credentials and a --nats-* flag gives others: use one", RedactURL(servers))
	}
	nc, err := nats.Connect(servers, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w%s", RedactURL(servers), err, o.connectHint(err))
	}
	return nc, nil
}

// connectHint says what to check after a refused connection.
func (o *Options) connectHint(err error) string {
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		verifyErr  *tls.CertificateVerificationError
		alertError tls.AlertError
	)
	switch {
	case errors.Is(err, nats.ErrAuthorization):
		switch {
		case o.creds != "":
			return " (the server refused the user in --nats-creds: is its account known to the server?)"
		case o.nkey != "":
			return " (the server refused the nkey whose seed is in --nats-nkey)"
		case o.user != "":
			return " (the server refused the user and password: check --nats-user and GATED_NATS_PASSWORD)"
		case o.token != "":
			return " (the server refused the token: check GATED_NATS_TOKEN)"
		}
		return " (the server wants credentials: give --nats-creds, --nats-nkey, --nats-user or --nats-token)"
	case errors.Is(err, nats.ErrAuthExpired):
		return " (the user JWT in --nats-creds has expired: issue a new one)"
	case errors.Is(err, nats.ErrAuthRevoked):
		return " (the user in --nats-creds was revoked)"
	case errors.Is(err, nats.ErrSecureConnWanted):
		return " (a --nats-tls-* flag asks for TLS, which this server does not offer)"
	case errors.As(err, &unknownCA), strings.Contains(err.Error(), "certificate signed by unknown authority"):
		return " (the server's certificate is signed by an unknown authority: give its CA with --nats-tls-ca)"
	case errors.As(err, &hostname):
		return " (the server's certificate does not name the host in --nats-url)"
	case errors.As(err, &invalid), errors.As(err, &verifyErr):
		return " (the server's certificate did not verify against --nats-tls-ca)"
	case errors.As(err, &alertError) && (alertError == 116 || alertError == 42):
		// certificate_required (TLS 1.3) and bad_certificate.
		return " (the server wants a client certificate it trusts: --nats-tls-cert and --nats-tls-key)"
	case strings.Contains(err.Error(), "certificate required"), strings.Contains(err.Error(), "bad certificate"):
		return " (the server wants a client certificate it trusts: --nats-tls-cert and --nats-tls-key)"
	case strings.Contains(err.Error(), "tls") && o.tlsCert == "":
		// The server may close the connection before its alert is read.
		return " (TLS failed without a client certificate: if the server requires one, give --nats-tls-cert and --nats-tls-key)"
	}
	return ""
}

// CheckURL refuses servers (one URL or a comma-separated list) unless
// each is a URL nats.go speaks NATS to: nats:// (or no scheme), tls://,
// ws:// or wss://. nats.go would open a plain TCP connection to any other
// scheme's address, and an HTTP server there answers nothing it reads.
// Its error is a *UsageError.
func CheckURL(servers string) error {
	for _, s := range strings.Split(servers, ",") {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "://") {
			continue
		}
		u, err := url.Parse(s)
		if err != nil {
			// url.Parse's error quotes the URL, credentials and all.
			return usageError("--nats-url %s: not a URL", RedactURL(s))
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return usageError("--nats-url %s: %s:// is not a NATS URL; give nats://HOST:PORT (or tls://, ws://, wss://): gated serve's NATS listens on nats://127.0.0.1:4222 by default, and --http is its web listener",
				RedactURL(s), u.Scheme)
		}
	}
	return nil
}

// HasURLCredentials reports whether any of the comma-separated URLs
// carries a user, password or token.
func HasURLCredentials(servers string) bool {
	for _, s := range strings.Split(servers, ",") {
		if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.User != nil {
			return true
		}
	}
	return false
}

// RedactURL returns the comma-separated servers with any user, password
// or token replaced, for logs and error messages.
func RedactURL(servers string) string {
	parts := strings.Split(servers, ",")
	for i, s := range parts {
		s = strings.TrimSpace(s)
		u, err := url.Parse(s)
		switch {
		case err != nil:
			if strings.Contains(s, "@") {
				s = "[unparsable URL with credentials]"
			}
		case u.User != nil:
			u.User = url.User("REDACTED")
			s = u.String()
		}
		parts[i] = s
	}
	return strings.Join(parts, ",")
}

// UsageError is a flag value Connect refuses before it connects: flags
// that conflict, a pair given half, a file that cannot be read. Its
// message names the flag.
type UsageError struct {
	msg string
}

func (e *UsageError) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...)}
}
