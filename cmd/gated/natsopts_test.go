package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/spf13/pflag"

	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/internal/natsconn"
)

// startAuthServer starts a nats-server on a free loopback port with the
// authentication and TLS settings of opts, shut down when the test ends.
func startAuthServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	return bustest.ServerWithOptions(t, opts)
}

// connFlags parses args as a command registering natsConnOptions would.
func connFlags(t *testing.T, args ...string) *natsConnOptions {
	t.Helper()
	var o natsConnOptions
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &o
}

// roundTrip proves nc is usable: a message it publishes comes back.
func roundTrip(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.SubscribeSync("probe.echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("probe.echo", []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no round trip: %v", err)
	}
}

// authCase is one way to authenticate: a server that wants it, flags
// that satisfy it, and flags that do not.
type authCase struct {
	note   string
	server *server.Options
	good   []string
	// bad are flags the server refuses; wantErr is the error they give
	// (nil: only the message is checked), wantMsg a part of its message.
	bad     []string
	wantErr error
	wantMsg string
	// secret must appear in no error message.
	secret string
	// tls means a good connection must be encrypted.
	tls bool
	// noEcho skips the publish and subscribe round trip, for a user whose
	// permissions allow none.
	noEcho bool
	// check runs on the good connection.
	check func(t *testing.T, nc *nats.Conn)
}

func TestNATSConnectAuthMethods(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	pki := newTestPKI(t, dir)

	userSeed, userPub := newUserNkey(t)
	otherSeed, _ := newUserNkey(t)
	seedFile := writeFile(t, dir, "user.nk", string(userSeed))
	otherSeedFile := writeFile(t, dir, "other.nk", string(otherSeed))

	op := newTestOperator(t)
	goodCreds := writeFile(t, dir, "acme.creds", string(op.creds(t, op.tenantSigner, "acme", "tenant:acme")))
	stranger := newTestOperator(t) // an operator the server does not trust
	badCreds := writeFile(t, dir, "stranger.creds", string(stranger.creds(t, stranger.tenantSigner, "acme", "tenant:acme")))

	cases := []authCase{
		{
			note:    "user and password",
			server:  &server.Options{Users: []*server.User{{Username: "gated", Password: "s3cret-pw"}}},
			good:    []string{"--nats-user", "gated", "--nats-password", "s3cret-pw"},
			bad:     []string{"--nats-user", "gated", "--nats-password", "wrong-pw"},
			wantErr: nats.ErrAuthorization, wantMsg: "GATED_NATS_PASSWORD", secret: "wrong-pw",
		},
		{
			note:    "token",
			server:  &server.Options{Authorization: "tok-0123456789"},
			good:    []string{"--nats-token", "tok-0123456789"},
			bad:     []string{"--nats-token", "tok-guessed"},
			wantErr: nats.ErrAuthorization, wantMsg: "GATED_NATS_TOKEN", secret: "tok-guessed",
		},
		{
			note:    "nkey seed file",
			server:  &server.Options{Nkeys: []*server.NkeyUser{{Nkey: userPub}}},
			good:    []string{"--nats-nkey", seedFile},
			bad:     []string{"--nats-nkey", otherSeedFile},
			wantErr: nats.ErrAuthorization, wantMsg: "--nats-nkey", secret: string(otherSeed),
		},
		{
			note:    "creds file of a tenant signed by a scoped key",
			server:  op.serverOptions(t),
			good:    []string{"--nats-creds", goodCreds, "--nats-inbox-prefix", "_INBOX_acme"},
			bad:     []string{"--nats-creds", badCreds},
			wantErr: nats.ErrAuthorization, wantMsg: "--nats-creds",
			noEcho: true, check: checkTenantTemplate,
		},
		{
			note:   "TLS with a CA",
			server: &server.Options{TLS: true, TLSConfig: pki.serverTLS(false)},
			good:   []string{"--nats-tls-ca", pki.caFile},
			bad:    []string{"--nats-tls-ca", pki.otherCAFile},
			// The CA that signed the server is not the one given.
			wantMsg: "--nats-tls-ca", tls: true,
		},
		{
			note:    "mutual TLS",
			server:  &server.Options{TLS: true, TLSVerify: true, TLSConfig: pki.serverTLS(true)},
			good:    []string{"--nats-tls-ca", pki.caFile, "--nats-tls-cert", pki.clientCert, "--nats-tls-key", pki.clientKey},
			bad:     []string{"--nats-tls-ca", pki.caFile},
			wantMsg: "--nats-tls-cert", tls: true,
		},
		{
			note:    "TLS flags against a server without TLS",
			server:  &server.Options{},
			good:    []string{},
			bad:     []string{"--nats-tls-ca", pki.caFile},
			wantErr: nats.ErrSecureConnWanted, wantMsg: "does not offer",
		},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			s := startAuthServer(t, tc.server)
			nc, err := connFlags(t, tc.good...).connect(s.ClientURL(), "gated-test", nats.MaxReconnects(0))
			if err != nil {
				t.Fatalf("good flags %q: %v", tc.good, err)
			}
			defer nc.Close()
			if tc.noEcho {
				if err := nc.Flush(); err != nil {
					t.Fatal(err)
				}
			} else {
				roundTrip(t, nc)
			}
			if _, err := nc.TLSConnectionState(); (err == nil) != tc.tls {
				t.Errorf("TLS connection state: %v, want TLS %v", err, tc.tls)
			}
			if tc.check != nil {
				tc.check(t, nc)
			}

			_, err = connFlags(t, tc.bad...).connect(s.ClientURL(), "gated-test", nats.MaxReconnects(0))
			switch {
			case err == nil:
				t.Fatalf("bad flags %q connected", tc.bad)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("bad flags: error %v, want %v", err, tc.wantErr)
			case !strings.Contains(err.Error(), tc.wantMsg):
				t.Errorf("bad flags: error %q does not point at %s", err, tc.wantMsg)
			case tc.secret != "" && strings.Contains(err.Error(), tc.secret):
				t.Errorf("error %q shows the secret", err)
			}
			t.Logf("refused: %v", err)
			if code := exitCode(err); code != exitFailure {
				t.Errorf("a refused connection exits %d, want %d", code, exitFailure)
			}
		})
	}
}

// checkTenantTemplate checks what the operator's scoped signing key
// grants a user tagged tenant:acme, as docs/NATS.md sketches it: its own
// verdicts and inbox, not another tenant's.
func checkTenantTemplate(t *testing.T, nc *nats.Conn) {
	t.Helper()
	denied := make(chan error, 8)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err })
	own, err := nc.SubscribeSync("gated.verdicts.acme.p1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync("gated.verdicts.globex.>"); err != nil {
		t.Fatal(err)
	}
	ownStatus, err := nc.SubscribeSync("gated.status.acme.p1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync("gated.status.globex.>"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("gated.proposals.acme.host_list_services", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("gated.proposals.globex.host_list_services", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Exactly the three operations on globex's subjects are refused, in
	// order; acme's own publish and subscriptions are not.
	for _, want := range []string{
		`Subscription to "gated.verdicts.globex.>"`,
		`Subscription to "gated.status.globex.>"`,
		`Publish to "gated.proposals.globex.host_list_services"`,
	} {
		select {
		case err := <-denied:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want a permissions violation for %s", err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no permissions violation for %s", want)
		}
	}
	if !own.IsValid() || !ownStatus.IsValid() {
		t.Error("the tenant's own verdict or status subscription was dropped")
	}
	// The reply inbox comes from the template too: a request round trip
	// through a responder on the same connection needs _INBOX_acme.>.
	if got := nc.NewRespInbox(); !strings.HasPrefix(got, "_INBOX_acme.") {
		t.Errorf("inbox %q does not use the prefix from --nats-inbox-prefix", got)
	}
}

func TestNATSConnectUsageErrors(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	file := writeFile(t, dir, "x.pem", "x")
	missing := filepath.Join(dir, "missing.creds")
	for _, tc := range []struct {
		note string
		args []string
		url  string
		want string
	}{
		{note: "token and user", args: []string{"--nats-token", "t", "--nats-user", "u", "--nats-password", "p"}, want: "--nats-user and --nats-token are alternatives"},
		{note: "creds and nkey", args: []string{"--nats-creds", file, "--nats-nkey", file}, want: "--nats-creds and --nats-nkey are alternatives"},
		{note: "creds and user", args: []string{"--nats-creds", file, "--nats-user", "u", "--nats-password", "p"}, want: "--nats-creds and --nats-user are alternatives"},
		{note: "password without user", args: []string{"--nats-password", "p"}, want: "--nats-password (GATED_NATS_PASSWORD) needs --nats-user"},
		{note: "user without password", args: []string{"--nats-user", "u"}, want: "needs a password: set GATED_NATS_PASSWORD"},
		{note: "cert without key", args: []string{"--nats-tls-cert", file}, want: "--nats-tls-cert needs --nats-tls-key"},
		{note: "key without cert", args: []string{"--nats-tls-key", file}, want: "--nats-tls-key needs --nats-tls-cert"},
		{note: "missing creds file", args: []string{"--nats-creds", missing}, want: "--nats-creds: stat " + missing},
		{note: "directory as CA", args: []string{"--nats-tls-ca", dir}, want: "is a directory"},
		{note: "not a seed", args: []string{"--nats-nkey", file}, want: "--nats-nkey " + file},
		{note: "wildcard inbox prefix", args: []string{"--nats-inbox-prefix", "_INBOX_*"}, want: "--nats-inbox-prefix"},
		{note: "inbox prefix with a trailing dot", args: []string{"--nats-inbox-prefix", "_INBOX_acme."}, want: "--nats-inbox-prefix"},
		{note: "credentials twice", args: []string{"--nats-token", "t"}, url: "nats://other-token@127.0.0.1:1", want: "carries credentials"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			url := tc.url
			if url == "" {
				url = "nats://127.0.0.1:1"
			}
			_, err := connFlags(t, tc.args...).connect(url, "gated-test")
			if err == nil {
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if code := exitCode(err); code != exitUsage {
				t.Errorf("exit %d, want %d (usage)", code, exitUsage)
			}
			if strings.Contains(err.Error(), "other-token") {
				t.Errorf("error %q shows the URL's token", err)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://s3cret@a:4222", "nats://REDACTED@a:4222"},
		{"nats://u:p@a:4222, tls://b:4222", "nats://REDACTED@a:4222,tls://b:4222"},
		{"a:4222,b:4222", "a:4222,b:4222"},
	} {
		if got := natsconn.RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Every command that connects takes the connection flags, and the
// environment supplies the secrets: GATED_NATS_TOKEN reaches propose
// (here the server has no JetStream, so a connected propose fails on
// publishing, not on connecting).
func TestCommandsTakeConnectionFlags(t *testing.T) {
	clearGatedEnv(t)
	s := startAuthServer(t, &server.Options{Authorization: "env-token-42"})
	proposal := writeFile(t, t.TempDir(), "p.json", `{"v":1,"id":"p1","tenant":"acme","action":"host_list_services","class":"read"}`)

	t.Setenv("GATED_NATS_TOKEN", "env-token-42")
	code, _, err := runGated(t, "propose", "-f", proposal, "--nats-url", s.ClientURL(), "--wait", "2s")
	if err == nil || errors.Is(err, nats.ErrAuthorization) || strings.Contains(err.Error(), "connecting to NATS") {
		t.Fatalf("propose with GATED_NATS_TOKEN: exit %d, %v; want connected, then no stream", code, err)
	}
	t.Setenv("GATED_NATS_TOKEN", "env-token-41")
	code, _, err = runGated(t, "propose", "-f", proposal, "--nats-url", s.ClientURL(), "--wait", "2s")
	if code != exitFailure || !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("propose with a wrong GATED_NATS_TOKEN: exit %d, %v; want 1 and an authorization error", code, err)
	}
	if strings.Contains(err.Error(), "env-token-41") {
		t.Errorf("error %q shows the token", err)
	}

	// Every command that connects has the whole set of connection flags.
	for _, path := range [][]string{{"serve"}, {"propose"}, {"verdict", "get"}, {"audit", "tail"}, {"audit", "query"}, {"audit", "verify"}} {
		_, help, err := runGated(t, append(path, "--help")...)
		if err != nil {
			t.Fatalf("%s --help: %v", strings.Join(path, " "), err)
		}
		for _, f := range []string{"--nats-url", "--nats-creds", "--nats-nkey", "--nats-user", "--nats-password",
			"--nats-token", "--nats-tls-ca", "--nats-tls-cert", "--nats-tls-key", "--nats-inbox-prefix"} {
			if !strings.Contains(help, f+" ") {
				t.Errorf("gated %s has no %s", strings.Join(path, " "), f)
			}
		}
	}
}

func TestServeConnectionFlagUsage(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		note string
		args []string
		want string
	}{
		{note: "auth without an external server", args: []string{"--nats-user", "gated", "--nats-password", "p"}, want: "--nats-user, --nats-password apply to an external server"},
		{note: "replicas on the embedded server", args: []string{"--replicas", "3"}, want: "--replicas 3 needs a NATS cluster"},
		{note: "conflicting auth", args: []string{"--nats-url", "nats://127.0.0.1:1", "--nats-token", "t", "--nats-creds", "x"}, want: "are alternatives"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			args := append([]string{"serve", "--data-dir", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:0", "--log-level", "error"}, tc.args...)
			code, _, err := runGated(t, args...)
			if code != exitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exit %d, %v; want %d and %q", code, err, exitUsage, tc.want)
			}
		})
	}
}

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, plus an unrelated CA, as PEM files.
type testPKI struct {
	caFile, otherCAFile   string
	serverCert, serverKey string
	clientCert, clientKey string
	caPool                *x509.CertPool
	serverPair            tls.Certificate
}

func newTestPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	p := &testPKI{}
	caKey, caCert, caPEM := newCA(t, "gated test CA")
	_, _, otherPEM := newCA(t, "somebody else's CA")
	p.caFile = writeFile(t, dir, "ca.pem", string(caPEM))
	p.otherCAFile = writeFile(t, dir, "other-ca.pem", string(otherPEM))
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(caCert)

	issue := func(name string, usage x509.ExtKeyUsage, ips []net.IP) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile = writeFile(t, dir, name+".pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
		keyFile = writeFile(t, dir, name+"-key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
		return certFile, keyFile
	}
	p.serverCert, p.serverKey = issue("server", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.clientCert, p.clientKey = issue("client", x509.ExtKeyUsageClientAuth, nil)
	pair, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	p.serverPair = pair
	return p
}

// serverTLS is the server's TLS configuration; with clientAuth it
// requires a client certificate signed by the CA.
func (p *testPKI) serverTLS(clientAuth bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.serverPair}, MinVersion: tls.VersionTLS12}
	if clientAuth {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = p.caPool
	}
	return c
}

func newCA(t *testing.T, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func newUserNkey(t *testing.T) (seed []byte, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err = kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	pub, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return seed, pub
}

// testOperator is decentralised auth in miniature: an operator, one
// account GATED, and a scoped signing key "tenant" whose template grants
// a user tagged tenant:<name> that tenant's subjects, as docs/NATS.md
// sketches with nsc.
type testOperator struct {
	operator     nkeys.KeyPair
	account      nkeys.KeyPair
	tenantSigner nkeys.KeyPair
	accountJWT   string
}

func newTestOperator(t *testing.T) *testOperator {
	t.Helper()
	o := &testOperator{}
	var err error
	if o.operator, err = nkeys.CreateOperator(); err != nil {
		t.Fatal(err)
	}
	if o.account, err = nkeys.CreateAccount(); err != nil {
		t.Fatal(err)
	}
	if o.tenantSigner, err = nkeys.CreateAccount(); err != nil {
		t.Fatal(err)
	}
	apub, _ := o.account.PublicKey()
	spub, _ := o.tenantSigner.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "GATED"
	scope := jwt.NewUserScope()
	scope.Key, scope.Role = spub, "tenant"
	scope.Template.Pub.Allow.Add(
		"gated.proposals.{{tag(tenant)}}.>",
		"gated.review.{{tag(tenant)}}", "gated.watch.{{tag(tenant)}}.*",
		"gated.grants.keys", "gated.grants.{{tag(tenant)}}.use", "gated.outcomes.{{tag(tenant)}}.>",
		"$JS.API.DIRECT.GET.KV_GATED_VERDICTS.$KV.GATED_VERDICTS.{{tag(tenant)}}.>")
	scope.Template.Sub.Allow.Add("gated.verdicts.{{tag(tenant)}}.>", "gated.status.{{tag(tenant)}}.>", "_INBOX_{{tag(tenant)}}.>")
	ac.SigningKeys.AddScopedSigner(scope)
	if o.accountJWT, err = ac.Encode(o.operator); err != nil {
		t.Fatal(err)
	}
	return o
}

// serverOptions trust the operator and resolve its account from memory.
func (o *testOperator) serverOptions(t *testing.T) *server.Options {
	t.Helper()
	opub, _ := o.operator.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "gated-test"
	ojwt, err := oc.Encode(o.operator)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	apub, _ := o.account.PublicKey()
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(apub, o.accountJWT); err != nil {
		t.Fatal(err)
	}
	return &server.Options{TrustedOperators: []*jwt.OperatorClaims{claims}, AccountResolver: resolver}
}

// creds issues a user named name with tags, signed by signer, as a
// credentials file's content.
func (o *testOperator) creds(t *testing.T, signer nkeys.KeyPair, name string, tags ...string) []byte {
	t.Helper()
	seed, pub := newUserNkey(t)
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.IssuerAccount, _ = o.account.PublicKey()
	uc.Tags.Add(tags...)
	// A user of a scoped signing key carries no permissions or limits of
	// its own: the key's template is all it gets.
	uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	ujwt, err := uc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}
