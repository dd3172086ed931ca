package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/internal/testcert"
)

// served is the serial number of the certificate c serves now.
func served(t *testing.T, c *Pair) int64 {
	t.Helper()
	pair, err := c.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

// touch moves both files' modification time on, as a renewal does (a
// rewrite within the file system's time granularity would not show).
func touch(t *testing.T, at time.Time, files ...string) {
	t.Helper()
	for _, f := range files {
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// A renewed certificate is served from the next handshake on; a renewal
// half done (a key that does not match) leaves the last good one served,
// with one warning, until it is complete.
func TestAPairIsReadAgainWhenItsFilesChange(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, 1)
	var logs bytes.Buffer
	c, err := Load(cert, key, "test TLS", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if got := served(t, c); got != 1 {
		t.Fatalf("serves serial %d, want 1", got)
	}
	base := time.Now().Add(time.Hour)

	testcert.Write(t, dir, 2)
	touch(t, base, cert, key)
	if got := served(t, c); got != 2 {
		t.Fatalf("after the renewal serves serial %d, want 2", got)
	}
	if got, want := c.NotAfter(), testcert.Leaf(t, cert).NotAfter; !got.Equal(want) {
		t.Fatalf("NotAfter %v after the renewal, want the new certificate's %v", got, want)
	}

	// The certificate is renewed, its key not yet.
	keep, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	testcert.Write(t, dir, 3)
	if err := os.WriteFile(key, keep, 0o600); err != nil {
		t.Fatal(err)
	}
	touch(t, base.Add(time.Minute), cert, key)
	for range 3 {
		if got := served(t, c); got != 2 {
			t.Fatalf("with a key that does not match, serves serial %d, want the last good 2", got)
		}
	}
	if n := strings.Count(logs.String(), "do not load"); n != 1 {
		t.Fatalf("%d warnings for one half-done renewal, want 1:\n%s", n, logs.String())
	}

	testcert.Write(t, dir, 4)
	touch(t, base.Add(2*time.Minute), cert, key)
	if got := served(t, c); got != 4 {
		t.Fatalf("once the renewal is complete serves serial %d, want 4", got)
	}
}

// A node does not start with a certificate it cannot serve.
func TestAPairMustLoadAtStart(t *testing.T) {
	dir := t.TempDir()
	cert, _ := testcert.Write(t, dir, 1)
	if _, err := Load(cert, cert, "test TLS", nil); err == nil || !strings.Contains(err.Error(), cert) {
		t.Fatalf("a certificate as its own key: %v, want an error naming the file", err)
	}
	if _, err := Load(cert, dir+"/missing.pem", "test TLS", nil); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("a missing key: %v, want an error naming it", err)
	}
}

// serveTLS accepts connections on loopback with cfg and completes their
// handshakes until the test ends; it returns the address.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// dialSerial dials addr with cfg (as serverName, when given) and returns
// the serial number of the leaf the server presented.
func dialSerial(addr, serverName string, cfg *tls.Config) (int64, error) {
	cfg = cfg.Clone()
	cfg.ServerName = serverName
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// A node dialling another (the embedded servers' routes) trusts the
// certificates of its own file as they are now: after both nodes' files
// moved to a new CA, they verify each other without a restart; while only
// one has, they do not; and the name dialled is checked as without
// PeerConfig.
func TestPeerConfigTrustsTheFilesAsTheyAreNow(t *testing.T) {
	ca1, ca2 := testcert.NewCA(t, "ca one"), testcert.NewCA(t, "ca two")
	dirA, dirB := t.TempDir(), t.TempDir()
	certA, keyA := ca1.Write(t, dirA, 1)
	certB, keyB := ca1.Write(t, dirB, 10)
	a, err := Load(certA, keyA, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(certB, keyB, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, a.PeerConfig())
	dialer := b.PeerConfig()
	if got, err := dialSerial(addr, "127.0.0.1", dialer); err != nil || got != 1 {
		t.Fatalf("one CA: serial %d, %v; want 1", got, err)
	}
	var host x509.HostnameError
	if _, err := dialSerial(addr, "other.example", dialer); !errors.As(err, &host) {
		t.Fatalf("a name the certificate does not hold: %v, want a hostname error", err)
	}

	base := time.Now().Add(time.Hour)
	ca2.Write(t, dirB, 11)
	touch(t, base, certB, keyB)
	var unknown x509.UnknownAuthorityError
	if _, err := dialSerial(addr, "127.0.0.1", dialer); !errors.As(err, &unknown) {
		t.Fatalf("b moved to another CA, a not yet: %v, want an unknown authority", err)
	}
	ca2.Write(t, dirA, 2)
	touch(t, base, certA, keyA)
	if got, err := dialSerial(addr, "127.0.0.1", dialer); err != nil || got != 2 {
		t.Fatalf("both moved to the new CA: serial %d, %v; want 2", got, err)
	}
	// A client of the node's own server checks the same way.
	if got, err := dialSerial(addr, "localhost", b.ClientConfig()); err != nil || got != 2 {
		t.Fatalf("ClientConfig: serial %d, %v; want 2", got, err)
	}
}
