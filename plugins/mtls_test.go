package plugins

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/gated/gated/plugins/pluginv1"
	"github.com/gated/gated/plugins/sdk"
)

// The host talks to a plugin over mutual TLS: the connection it holds is
// TLS with the plugin's certificate verified, and the plugin's server
// answers nobody else, neither a plaintext client nor a TLS client
// without the host's certificate. Another process of the machine that
// finds the plugin's socket cannot ask it for reviews.
func TestPluginConnectionIsMutualTLS(t *testing.T) {
	h := startHost(t, helperSpec(t, "sop"))
	p := h.procs["sop"]
	p.mu.Lock()
	rpc, client := p.rpc, p.client
	p.mu.Unlock()

	var host peer.Peer
	if _, err := rpc.Describe(t.Context(), &pluginv1.DescribeRequest{}, grpc.Peer(&host)); err != nil {
		t.Fatalf("describe over the host's connection: %v", err)
	}
	switch info, ok := host.AuthInfo.(credentials.TLSInfo); {
	case !ok:
		t.Errorf("the host's connection to the plugin is not TLS: auth info %T", host.AuthInfo)
	case !info.State.HandshakeComplete || len(info.State.VerifiedChains) == 0:
		t.Errorf("the host's TLS connection: handshake complete %v, %d verified chains; want the plugin's certificate verified",
			info.State.HandshakeComplete, len(info.State.VerifiedChains))
	}

	addr := client.ReattachConfig().Addr
	stranger := selfSignedCert(t)
	// The TLS clients below skip checking the plugin's certificate so that
	// only the plugin's check of the client can refuse them.
	tests := []struct {
		note string
		tls  *tls.Config // nil: plaintext
	}{
		{note: "plaintext"},
		{note: "tls without a client certificate", tls: &tls.Config{InsecureSkipVerify: true}},
		{note: "tls with a certificate the host did not make", tls: &tls.Config{
			InsecureSkipVerify: true,
			// Sent whatever CAs the plugin asks for: a Certificates list
			// would send nothing when the plugin names another CA.
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil },
		}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			creds := insecure.NewCredentials()
			if tc.tls != nil {
				creds = credentials.NewTLS(tc.tls)
				// The refusal is the plugin's: its TLS server reaches the
				// client certificate and turns it down with an alert.
				err := tlsAlert(t, addr, tc.tls)
				if !strings.Contains(err.Error(), "certificate") {
					t.Fatalf("the plugin's TLS server did not refuse the client's certificate: %v", err)
				}
				t.Logf("tls refused: %v", err)
			}
			conn, err := grpc.NewClient("passthrough:///plugin",
				grpc.WithTransportCredentials(creds),
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, addr.Network(), addr.String())
				}))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A bound on a refusal that comes at once, not an assertion on
			// how long it takes.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			desc, err := pluginv1.NewReviewerClient(conn).Describe(ctx, &pluginv1.DescribeRequest{})
			if err == nil {
				t.Fatalf("the plugin answered a %s client: %s %s", tc.note, desc.GetName(), desc.GetVersion())
			}
			t.Logf("refused: %v", err)
		})
	}
}

// tlsAlert completes a TLS handshake with the plugin's server at addr
// and returns the error of the first read: a TLS 1.3 server refuses a
// client's certificate after the client's side of the handshake is done,
// with an alert the read returns. A read that succeeds fails the test.
func tlsAlert(t *testing.T, addr net.Addr, cfg *tls.Config) error {
	t.Helper()
	raw, err := net.Dial(addr.Network(), addr.String())
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, cfg.Clone())
	defer conn.Close()
	// A bound on a refusal that comes at once.
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := conn.Handshake(); err != nil {
		return err
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		return err
	}
	t.Fatal("the plugin's TLS server sent data to a client it should refuse")
	return nil
}

// selfSignedCert makes a client certificate that no plugin trusts.
func selfSignedCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// clientCertReviewer reports, as its version, the curve of the key of
// the client certificate the host handed it (PLUGIN_CLIENT_CERT).
type clientCertReviewer struct{ yesReviewer }

func (clientCertReviewer) Describe(context.Context) (sdk.Description, error) {
	block, _ := pem.Decode([]byte(os.Getenv("PLUGIN_CLIENT_CERT")))
	if block == nil {
		return sdk.Description{Name: "client-cert", Version: "no certificate"}, nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return sdk.Description{Name: "client-cert", Version: err.Error()}, nil
	}
	key, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return sdk.Description{Name: "client-cert", Version: fmt.Sprintf("%T", cert.PublicKey)}, nil
	}
	return sdk.Description{Name: "client-cert", Version: key.Curve.Params().Name}, nil
}

// The host's client certificate has a P-256 key: TLS stacks other than
// Go's (BoringSSL in gRPC for Python, Node and C++; rustls) do not accept
// P-521 signatures, which go-plugin's own automatic mTLS uses, so a
// plugin written with them could not complete the handshake.
func TestHostClientCertificateIsP256(t *testing.T) {
	h := startHost(t, helperSpec(t, "client-cert"))
	got := h.Plugins()
	if len(got) != 1 || got[0].Version != "P-256" {
		t.Fatalf("the plugin saw a client certificate with key %+v, want P-256", got)
	}
}
