// Package testcert writes self-signed certificates for tests: TLS on the
// embedded NATS server, the admin door and gRPC.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// Write writes a self-signed certificate for 127.0.0.1 and localhost with
// the given serial number, and a new key, to dir/cert.pem and dir/key.pem
// (replacing them), and returns their paths. The certificate is its own
// CA: a client that trusts it (x509.CertPool.AppendCertsFromPEM of the
// cert file) verifies the server, and nodes sharing it verify each other.
func Write(t testing.TB, dir string, serial int64) (certFile, keyFile string) {
	t.Helper()
	der, key := issue(t, &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: "flexiq test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              notAfter(serial),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}, nil, nil)
	return writePair(t, dir, key, der)
}

// issue makes a key and a certificate of it from tmpl, signed by parent's
// key, or by itself when parent is nil.
func issue(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// writePair writes the certificates chain (leaf first) to dir/cert.pem
// and key to dir/key.pem, replacing them, and returns their paths.
func writePair(t testing.TB, dir string, key *ecdsa.PrivateKey, chain ...[]byte) (certFile, keyFile string) {
	t.Helper()
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	var certs []byte
	for _, der := range chain {
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certs, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// notAfter is when the certificate Write makes with serial expires: an
// hour from now plus serial minutes, so a renewal's expiry differs.
func notAfter(serial int64) time.Time {
	return time.Now().Add(time.Hour + time.Duration(serial)*time.Minute).Truncate(time.Second)
}

// Pool is a pool holding the certificate in certFile.
func Pool(t testing.TB, certFile string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("no certificate in %s", certFile)
	}
	return pool
}

// CA is a certificate authority for tests: leaves it signs verify against
// its certificate, as nodes' certificates of one CA do in production.
type CA struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	der, key := issue(t, &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
	}, nil, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{cert: cert, der: der, key: key}
}

// Write writes a leaf for 127.0.0.1 and localhost with the given serial
// number, signed by ca and followed by ca's certificate (the chain a node's
// file holds), and a new key, to dir/cert.pem and dir/key.pem (replacing
// them), and returns their paths.
func (ca *CA) Write(t testing.TB, dir string, serial int64) (certFile, keyFile string) {
	t.Helper()
	der, key := issue(t, &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "flexiq test node"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter(serial),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}, ca.cert, ca.key)
	return writePair(t, dir, key, der, ca.der)
}

// Pool is a pool holding ca's certificate alone.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// Leaf is the first certificate in the PEM file certFile.
func Leaf(t testing.TB, certFile string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM block in %s", certFile)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
