package e2e

import (
	"crypto/tls"
	"net/http"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

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
