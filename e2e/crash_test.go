package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/internal/testcert"
)

// fqNode builds the node binary once per test binary, into binDir.
var fqNode = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "fq-node")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/flexiq/flexiq/cmd/node").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// freeAddr is a loopback address with a port no one listens on, for a
// node to listen on later.
func freeAddr(t testing.TB) string {
	t.Helper()
	ports.Lock()
	defer ports.Unlock()
	for range 1000 {
		// Below Linux's ephemeral range (32768-60999): a port the kernel
		// hands out at random, as to an outgoing connection to the test's
		// PostgreSQL, can be taken between this check and the node's
		// listen (a CI failure: "not ready to accept connections").
		port := 20000 + rand.IntN(12000)
		if ports.given[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		ports.given[port] = true
		return l.Addr().String()
	}
	t.Fatal("no free loopback port in 20000-31999")
	return ""
}

// ports are those freeAddr has given in this test binary, not given twice.
var ports = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// proc is a node running as its own process.
type proc struct {
	t                     *testing.T
	bin, dir, storeURL    string
	natsAddr, admin, root string
	grpc                  string
	// certFile and keyFile, when set, put TLS on the admin door and gRPC
	// (--tls-cert, --tls-key).
	certFile, keyFile string
	// natsTLS puts the same certificate on the embedded NATS server
	// (--nats-tls-cert, --nats-tls-key).
	natsTLS bool
	cmd     *exec.Cmd
	httpc   *http.Client
}

// adminURL is the admin door's URL.
func (p *proc) adminURL() string {
	if p.certFile != "" {
		return "https://" + p.admin
	}
	return "http://" + p.admin
}

// httpClient talks to the admin door, trusting its certificate if any.
func (p *proc) httpClient() *http.Client {
	switch {
	case p.certFile == "":
		return http.DefaultClient
	case p.httpc == nil:
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: testcert.Pool(p.t, p.certFile)}}
		p.t.Cleanup(tr.CloseIdleConnections)
		p.httpc = &http.Client{Transport: tr}
	}
	return p.httpc
}

// newProc is a node process of t's backend on free loopback ports, not
// started yet.
func newProc(t *testing.T) *proc {
	t.Helper()
	bin, err := fqNode()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return &proc{t: t, bin: bin, dir: dir, storeURL: storeURLFor(t, dir), natsAddr: freeAddr(t), admin: freeAddr(t), grpc: freeAddr(t), root: "fq_root_crash_test"}
}

func (p *proc) start() {
	p.t.Helper()
	args := []string{"--data-dir", p.dir, "--store", p.storeURL, "--nats-listen", p.natsAddr,
		"--admin-addr", p.admin, "--grpc-addr", p.grpc, "--root-token", p.root, "--node-id", "crash"}
	if p.certFile != "" {
		args = append(args, "--tls-cert", p.certFile, "--tls-key", p.keyFile)
	}
	if p.natsTLS {
		args = append(args, "--nats-tls-cert", p.certFile, "--nats-tls-key", p.keyFile)
	}
	p.cmd = exec.Command(p.bin, args...)
	p.cmd.Env = append(os.Environ(), "FLEXIQ_MAINTENANCE=off")
	logf, err := os.OpenFile(filepath.Join(p.dir, "node.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := p.httpClient().Get(p.adminURL() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.dir, "node.log"))
			p.t.Fatalf("node did not become healthy: %v\n%s", err, log)
		}
		waitFor(20 * time.Millisecond)
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// After a SIGKILL in the middle of a stream of enqueues with client-chosen
// ids and retries, every acknowledged enqueue exists, exactly once, and
// nothing else does.
func TestCrashLosesNoAcknowledgedEnqueue(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		p := newProc(t)
		p.start()
		defer p.kill()

		c, err := client.Connect("nats://"+p.natsAddr, p.root)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Timeout = 2 * time.Second

		const producers, perProducer = 8, 150
		var (
			acked   sync.Map // id → outcome
			nAcked  atomic.Int64
			wg      sync.WaitGroup
			crashed = make(chan struct{})
		)
		for pr := 0; pr < producers; pr++ {
			wg.Add(1)
			go func(pr int) {
				defer wg.Done()
				for i := 0; i < perProducer; i++ {
					j := api.Job{ID: fmt.Sprintf("p%d-%04d", pr, i), Queue: "q", Task: "t"}
					// Retry the same id until the node answers: a
					// retry after a crash may find the first attempt
					// landed (deduplicated) or not (enqueued).
					for attempt := 0; ; attempt++ {
						r, err := c.Enqueue(context.Background(), j)
						if err == nil {
							acked.Store(j.ID, r.Outcome)
							nAcked.Add(1)
							break
						}
						var ae *api.Error
						if errors.As(err, &ae) && ae.Code != api.CodeUnavailable {
							t.Errorf("enqueue %s: %v", j.ID, err)
							return
						}
						if attempt > 200 {
							t.Errorf("enqueue %s: node never came back: %v", j.ID, err)
							return
						}
						select {
						case <-crashed:
						default:
						}
						waitFor(50 * time.Millisecond)
					}
				}
			}(pr)
		}
		for nAcked.Load() < producers*perProducer/3 {
			waitFor(5 * time.Millisecond)
		}
		p.kill()
		close(crashed)
		p.start()
		wg.Wait()
		if t.Failed() {
			return
		}

		// Every id was acknowledged and exists once; no other job exists.
		var u usageReply
		status, body := httpGet(t, "http://"+p.admin+"/v1/usage", p.root)
		if status != 200 {
			t.Fatalf("usage: %d %s", status, body)
		}
		decode(t, body, &u)
		if u.Usage.Pending != producers*perProducer {
			t.Fatalf("pending after the crash = %d, want exactly %d (one per acknowledged id)", u.Usage.Pending, producers*perProducer)
		}
		dedup := 0
		acked.Range(func(k, v any) bool {
			if v.(api.Outcome) == api.OutcomeDeduplicated {
				dedup++ // a retry whose first try had landed before the kill
			}
			st, b := httpGet(t, "http://"+p.admin+"/v1/jobs/"+k.(string), p.root)
			if st != 200 {
				t.Errorf("acknowledged job %s missing after the crash: %d %s", k, st, b)
			}
			return true
		})
		t.Logf("%d enqueues acknowledged, %d of them on retry after the crash found landed", producers*perProducer, dedup)
	})
}

// A node that restarts after a crash gives back the jobs it had handed out
// once their leases run out, even if no call for their namespace comes:
// it wakes the namespaces that have running jobs when it starts.
func TestRestartAfterCrashBringsClaimsBackUnasked(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		p := newProc(t)
		p.start()
		c, err := client.Connect("nats://"+p.natsAddr, p.root)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if _, err := c.Enqueue(ctx(t), job("q", "t")); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := c.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 3, LeaseMS: 1000}); err != nil || len(got) != 3 {
			t.Fatalf("claim: %d %v", len(got), err)
		}
		c.Close()
		p.kill()
		p.start()
		defer p.kill()
		// Only the admin door's usage, read from the store, is asked.
		deadline := time.Now().Add(30 * time.Second)
		for {
			req, _ := http.NewRequest("GET", "http://"+p.admin+"/v1/usage", nil)
			req.Header.Set("Authorization", "Bearer "+p.root)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var u usageReply
			err = json.NewDecoder(resp.Body).Decode(&u)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if u.Usage.Running == 0 && u.Usage.Pending == 3 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("30 s after the restart, with no call: %+v", u.Usage)
			}
			waitFor(100 * time.Millisecond)
		}
	})
}
