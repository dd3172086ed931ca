package node

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexiq/flexiq/internal/testcert"
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

// A node whose embedded NATS server listens beyond loopback says so at
// start unless that listener has TLS.
func TestStartWarnsOfAnExposedNATSListener(t *testing.T) {
	cert, key := testcert.Write(t, t.TempDir(), 1)
	for _, tlsOn := range []bool{false, true} {
		var log bytes.Buffer
		cfg := Defaults()
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
		cfg.NATSListen, cfg.AdminAddr, cfg.GRPCAddr = "0.0.0.0:-1", "127.0.0.1:0", "127.0.0.1:0"
		if tlsOn {
			cfg.NATSTLSCert, cfg.NATSTLSKey = cert, key
		}
		cfg.Log = slog.New(slog.NewTextHandler(&log, nil))
		n, err := Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		n.Stop(context.Background())
		warned := strings.Contains(log.String(), "the embedded NATS server listens beyond loopback without TLS") &&
			strings.Contains(log.String(), natsTLSFlags)
		if warned == tlsOn {
			t.Errorf("NATS TLS %v: warned %v\n%s", tlsOn, warned, log.String())
		}
	}
}
