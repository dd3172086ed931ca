package node

import (
	"bytes"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/internal/testcert"
)

// served is the serial number of the certificate c serves now.
func served(t *testing.T, c *certFiles) int64 {
	t.Helper()
	pair, err := c.get(nil)
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
func TestTLSCertificateFilesAreReadAgainWhenTheyChange(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, 1)
	var logs bytes.Buffer
	c, err := loadCertFiles(cert, key, slog.New(slog.NewTextHandler(&logs, nil)))
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
func TestTLSCertificateFilesMustLoadAtStart(t *testing.T) {
	dir := t.TempDir()
	cert, _ := testcert.Write(t, dir, 1)
	if _, err := loadCertFiles(cert, cert, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), cert) {
		t.Fatalf("a certificate as its own key: %v, want an error naming the file", err)
	}
	if _, err := loadCertFiles(cert, dir+"/missing.pem", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("a missing key: %v, want an error naming it", err)
	}
}

// A listener that takes bearer tokens beyond loopback without TLS is
// logged; on loopback, or with TLS, it is not.
func TestWarnIfExposed(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		tlsOn bool
		warn  bool
	}{
		{"127.0.0.1:7070", false, false},
		{"[::1]:7070", false, false},
		{"0.0.0.0:7070", false, true},
		{"10.1.2.3:7071", false, true},
		{"0.0.0.0:7070", true, false},
	} {
		var logs bytes.Buffer
		addr, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		warnIfExposed(slog.New(slog.NewTextHandler(&logs, nil)), "the admin door", addr, tc.tlsOn)
		if got := strings.Contains(logs.String(), "without TLS"); got != tc.warn {
			t.Errorf("%s with TLS %v: warned %v, want %v (%s)", tc.addr, tc.tlsOn, got, tc.warn, logs.String())
		}
	}
}
