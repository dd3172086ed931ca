package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/cmd/fq/cli"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
	"github.com/flexiq/flexiq/internal/testcert"
)

// An fq-node process given --tls-cert and --tls-key serves its admin door
// over HTTPS and gRPC over TLS, with that certificate, and neither in the
// clear. A renewed certificate written over the files is served from the
// next connection on, without a restart.
func TestTLSOnTheAdminDoorAndGRPC(t *testing.T) {
	p := newProc(t)
	certDir := t.TempDir()
	p.certFile, p.keyFile = testcert.Write(t, certDir, 1)
	p.natsTLS = true
	p.start()
	defer p.kill()

	// HTTPS: the door answers with the token's view.
	req, err := http.NewRequest("GET", p.adminURL()+"/v1/namespaces", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.root)
	resp, err := p.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("GET /v1/namespaces over HTTPS: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	// Plain HTTP gets no answer from the door.
	if resp, err := http.Get("http://" + p.admin + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the admin door answered plain HTTP")
		}
	}

	// gRPC over TLS: an authenticated call goes through.
	grpcCall := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = pb.NewProducerClient(conn).Enqueue(withToken(t, p.root), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}})
		return err
	}
	pool := testcert.Pool(t, p.certFile)
	if err := grpcCall(credentials.NewTLS(&tls.Config{RootCAs: pool})); err != nil {
		t.Fatalf("enqueue over gRPC with TLS: %v", err)
	}
	if err := grpcCall(insecure.NewCredentials()); err == nil {
		t.Fatal("gRPC answered a call in the clear")
	}

	// /metrics tells when each listener's certificate expires.
	mreq, _ := http.NewRequest("GET", p.adminURL()+"/metrics", nil)
	mreq.Header.Set("Authorization", "Bearer "+p.root)
	mresp, err := p.httpClient().Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, l := range []string{"admin_grpc", "nats"} {
		line := fmt.Sprintf("flexiq_tls_certificate_expiration_timestamp_seconds{listener=%q} %g", l, float64(testcert.Leaf(t, p.certFile).NotAfter.Unix()))
		if !strings.Contains(string(metrics), line) {
			t.Errorf("/metrics has no line %q", line)
		}
	}

	// The certificate is renewed in place: new connections see it.
	testcert.Write(t, certDir, 2)
	later := time.Now().Add(time.Hour)
	for _, f := range []string{p.certFile, p.keyFile} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	serial := func(addr string) int64 {
		t.Helper()
		// The renewed certificate is not the one the client trusted
		// before; what is checked here is which one is served.
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got, want := serial(p.admin), int64(2); got != want {
		t.Fatalf("the admin door serves certificate %d after the renewal, want %d", got, want)
	}
	if got, want := serial(p.grpc), int64(2); got != want {
		t.Fatalf("gRPC serves certificate %d after the renewal, want %d", got, want)
	}
}

// The embedded NATS server of an fq-node reads its certificate files again
// when they change (--nats-tls-cert, --nats-tls-key), as the admin door
// does: after every node's files moved to a new CA, a client trusting only
// that CA connects to a node that was not restarted, and that node's route
// to a node restarted with the new files forms (it trusts the CA its files
// hold now), so a call through either node reaches the namespace's owner.
func TestClusterNATSCertificatesRotateWithoutRestart(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		ca1, ca2 := testcert.NewCA(t, "ca one"), testcert.NewCA(t, "ca two")
		var serial int64
		c := startClusterWith(t, 2, func(m *member) {
			serial++
			m.natsCert, m.natsKey = ca1.Write(t, t.TempDir(), serial)
			if m.id == "n2" {
				// n2 dials nobody: the route is n1's to make, checking
				// n2's certificate against the roots in n1's files.
				m.routes = nil
			}
		})
		prod := c.token("acme", "producer")
		enqueueVia := func(m *member, roots *x509.CertPool) error {
			cl, err := client.Connect(m.natsURL(), prod, nats.MaxReconnects(0),
				nats.Secure(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}))
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = cl.Enqueue(ctx, job("q", "t"))
			return err
		}
		// One of the two owns acme: a call through the other crosses the
		// route.
		for _, m := range c.members {
			if err := enqueueVia(m, ca1.Pool()); err != nil {
				t.Fatalf("enqueue via %s: %v", m.id, err)
			}
		}

		for _, m := range c.members {
			serial++
			ca2.Write(t, filepath.Dir(m.natsCert), serial)
		}
		n2 := c.members[1]
		n2.signal(syscall.SIGTERM)
		n2.start()
		c.settled(c.members...)
		// The route between the two forms a moment after the restart.
		deadline := time.Now().Add(30 * time.Second)
		for _, m := range c.members {
			for {
				err := enqueueVia(m, ca2.Pool())
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("enqueue via %s, trusting only the new CA: %v\n%s", m.id, err, c.logs())
				}
				waitFor(100 * time.Millisecond)
			}
		}
	})
}

// fq trusts the certificates of the file --ca (or FQ_CA) names, for the
// admin door over HTTPS and for NATS over TLS; without it, a node whose
// certificate no system root signed cannot be reached (exit 3).
func TestFQTrustsTheCAFileItIsGiven(t *testing.T) {
	p := newProc(t)
	p.certFile, p.keyFile = testcert.Write(t, t.TempDir(), 1)
	p.natsTLS = true
	p.start()
	defer p.kill()
	fq := func(env map[string]string, args ...string) cliRun {
		vars := map[string]string{"FQ_SERVER": p.adminURL(), "FQ_NATS_URL": "nats://" + p.natsAddr, "FQ_TOKEN": p.root}
		for k, v := range env {
			vars[k] = v
		}
		var out, errb bytes.Buffer
		code := cli.Run(args, func(k string) string { return vars[k] }, &out, &errb)
		return cliRun{code: code, stdout: out.String(), stderr: errb.String()}
	}

	if r := fq(nil, "cluster", "status").want(t, cli.ExitUnreachable); !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("HTTPS without --ca: %s", r.stderr)
	}
	r := fq(nil, "--ca", p.certFile, "token", "create", "--namespace", "acme", "--role", "producer", "--json").want(t, cli.ExitOK)
	var tok struct{ Token string }
	if err := json.Unmarshal([]byte(r.stdout), &tok); err != nil || tok.Token == "" {
		t.Fatalf("token create: %q %v", r.stdout, err)
	}
	producer := map[string]string{"FQ_TOKEN": tok.Token}
	if r := fq(producer, "enqueue", "--queue", "q", "--task", "t").want(t, cli.ExitUnreachable); !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("NATS over TLS without --ca: %s", r.stderr)
	}
	producer["FQ_CA"] = p.certFile
	fq(producer, "enqueue", "--queue", "q", "--task", "t").want(t, cli.ExitOK)

	// A file without a certificate is a usage error naming where it came from.
	if r := fq(map[string]string{"FQ_CA": p.keyFile}, "cluster", "status").want(t, cli.ExitUsage); !strings.Contains(r.stderr, "FQ_CA") {
		t.Fatalf("a key as the CA file: %s", r.stderr)
	}
}
