package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// certLifetime is how long the certificates NewCA and CA.Issue make are
// valid: a test's run, with room for a slow machine.
const certLifetime = 24 * time.Hour

// CA is a certificate authority made at run time for one test: a self-signed
// ECDSA P-256 certificate and its key, written as PEM files under
// tb.TempDir(). Nothing is read from or written to the machine's trust
// store.
type CA struct {
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	dir      string
	certFile string
}

// NewCA makes a new CA named name (its subject's common name). Two CAs made
// by NewCA never trust each other's certificates.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key, tmpl := keyAndTemplate(tb, "CA", name)
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	tmpl.IsCA = true
	tmpl.MaxPathLenZero = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("redistest: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("redistest: CA certificate: %v", err)
	}
	ca := &CA{cert: cert, key: key, dir: tb.TempDir()}
	ca.certFile = filepath.Join(ca.dir, "ca.crt")
	writePEM(tb, ca.certFile, "CERTIFICATE", der)
	return ca
}

// CertFile is the path of the CA's certificate (PEM).
func (ca *CA) CertFile() string { return ca.certFile }

// Pool returns a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// ClientTLS returns a TLS client configuration that trusts only this CA
// (TLS 1.2 or later). The server name is taken from the address dialled, so
// a certificate issued for 127.0.0.1 verifies against "127.0.0.1:PORT".
func (ca *CA) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
}

// Issue makes a server certificate signed by the CA for the given IP
// addresses and host names, and returns the paths of its certificate and
// key (PEM, the key in PKCS #8).
func (ca *CA) Issue(tb testing.TB, name string, hosts ...string) (certFile, keyFile string) {
	tb.Helper()
	key, tmpl := keyAndTemplate(tb, "server", name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("redistest: server certificate: %v", err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("redistest: server key: %v", err)
	}
	dir, err := os.MkdirTemp(ca.dir, "issued-")
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	writePEM(tb, certFile, "CERTIFICATE", der)
	writePEM(tb, keyFile, "PRIVATE KEY", pk)
	return certFile, keyFile
}

// WithTLS makes the server listen for TLS only (--port 0, --tls-port on its
// free port) with a certificate for 127.0.0.1 issued by ca, and without
// asking clients for a certificate (--tls-auth-clients no). Its probes and
// Client connect over TLS, trusting ca.
func WithTLS(ca *CA) Option {
	return func(c *config) { c.tlsCA = ca }
}

// keyAndTemplate makes a new ECDSA P-256 key and the part of a certificate
// template that the CA's and a server's certificates share: a random
// serial number, the subject named name, valid from an hour ago for
// certLifetime. what names the certificate in a failure ("CA", "server").
func keyAndTemplate(tb testing.TB, what, name string) (*ecdsa.PrivateKey, *x509.Certificate) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("redistest: %s key: %v", what, err)
	}
	now := time.Now()
	return key, &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"redistest"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
	}
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		tb.Fatalf("redistest: serial number: %v", err)
	}
	return n
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatalf("redistest: writing %s: %v", path, err)
	}
}
