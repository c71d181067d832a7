package plugins

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// clientCertEnv is where go-plugin's plugins look for the certificate of
// the host, the only client their server accepts.
const clientCertEnv = "PLUGIN_CLIENT_CERT"

// clientTLS makes the host's certificate for one launch of a plugin and
// the TLS configuration of its connection, as go-plugin's automatic mutual
// TLS does, and returns the certificate as PEM for the plugin's
// environment. go-plugin completes the configuration with the plugin's
// certificate from the handshake line, the only server certificate it
// then trusts; the broker serves the host's ToolHost with it too.
//
// The key is ECDSA P-256, where go-plugin's own uses P-521: TLS stacks
// other than Go's (BoringSSL, which gRPC for Python, Node and C++ use,
// and rustls) do not sign or verify with P-521, so a plugin written with
// them could not complete the handshake. Go plugins accept either.
func clientTLS() (*tls.Config, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("generating the host's key: %w", err)
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, "", fmt.Errorf("generating a serial number: %w", err)
	}
	const host = "localhost"
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: host, Organization: []string{"gated"}},
		DNSNames:              []string{host},
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyAgreement | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		SerialNumber:          sn,
		NotBefore:             now.Add(-30 * time.Second),
		NotAfter:              now.Add(365 * 24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, "", fmt.Errorf("creating the host's certificate: %w", err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
		ServerName:   host,
	}
	return cfg, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), nil
}
