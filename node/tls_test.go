package node

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
)

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
		warnIfExposed(slog.New(slog.NewTextHandler(&logs, nil)), "the admin door", addr, tc.tlsOn, adminTLSFlags)
		if got := strings.Contains(logs.String(), "without TLS"); got != tc.warn {
			t.Errorf("%s with TLS %v: warned %v, want %v (%s)", tc.addr, tc.tlsOn, got, tc.warn, logs.String())
		}
	}
}
