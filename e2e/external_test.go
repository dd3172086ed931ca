package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/bus"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/node"
)

// extNATS is a NATS server that is not a node's (the --nats-url case),
// configured as README says: bus.ExternalServerConfig.
type extNATS struct {
	*server.Server
	secret string
}

const externalSecret = "fq_cluster_external_test"

// externalConfig writes the README's server configuration for
// externalSecret to a file.
func externalConfig(t *testing.T, listen string) string {
	t.Helper()
	conf, err := bus.ExternalServerConfig(externalSecret, listen)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// externalNATS starts, in this process, a NATS server with the README's
// configuration; it outlives the nodes of a test (it is stopped after the
// nodes' own cleanup).
func externalNATS(t *testing.T) *extNATS {
	t.Helper()
	t.Setenv("FLEXIQ_CLUSTER_SECRET", externalSecret)
	opts, err := server.ProcessConfigFile(externalConfig(t, "127.0.0.1:-1"))
	if err != nil {
		t.Fatalf("the README's NATS configuration: %v", err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("external NATS server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return &extNATS{Server: srv, secret: externalSecret}
}

// natsServerBin builds the nats-server of go.mod once per test binary,
// into binDir.
var natsServerBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "nats-server")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build nats-server: %v\n%s", err, out)
	}
	return bin, nil
})

// The README's configuration, served by a real nats-server process: a
// node joins it with --nats-url and the cluster secret, and clients get
// the same service and the same closed bus as on the embedded server.
func TestExternalNATSServerProcess(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		bin, err := natsServerBin()
		if err != nil {
			t.Fatal(err)
		}
		addr := freeAddr(t)
		cmd := exec.Command(bin, "-c", externalConfig(t, addr))
		cmd.Env = append(os.Environ(), "FLEXIQ_CLUSTER_SECRET="+externalSecret)
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		ready := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "Server is ready") {
					close(ready)
				}
			}
		}()
		select {
		case <-ready:
		case <-time.After(20 * time.Second):
			t.Fatal("nats-server did not start")
		}
		url := "nats://" + addr
		e := start(t, func(c *nodeConfig) { c.NATSURL = url; c.ClusterSecret = externalSecret })
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_pending":2}`)
		core := coreCases(t, e, tn, url)
		if core != 4 {
			t.Fatalf("%d core cases ran", core)
		}
	})
}

// The embedded server gives the same.
func TestEmbeddedNATSServerCoreCases(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	e.setQuota(tn.admin, `{"max_pending":2}`)
	if n := coreCases(t, e, tn, e.node.NATSURL()); n != 4 {
		t.Fatalf("%d core cases ran", n)
	}
}

// The same with the configuration loaded in-process, so the revocation
// kick through the system account is checked too.
func TestExternalNATSServerClosesARevokedTokensConnection(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		ns := externalNATS(t)
		e := start(t, func(c *nodeConfig) { c.NATSURL = ns.ClientURL(); c.ClusterSecret = ns.secret })
		var tok struct{ ID, Token string }
		e.mustDo(http.StatusCreated, "POST", "/v1/tokens", e.root, map[string]string{"namespace": "acme", "role": "producer"}, &tok)
		c, err := client.Connect(ns.ClientURL(), tok.Token, nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		closed := make(chan struct{})
		c.Conn().SetClosedHandler(func(*nats.Conn) { close(closed) })
		if _, err := c.Enqueue(ctx(t), job("q", "t")); err != nil {
			t.Fatal(err)
		}
		e.mustDo(http.StatusOK, "DELETE", "/v1/tokens/"+tok.ID, e.root, nil, nil)
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("the revoked token's connection is still open")
		}
		_, err = client.Connect(ns.ClientURL(), tok.Token)
		wantAPIError(t, err, api.CodeUnauthenticated, "", api.Unauthenticated().Message)
	})
}

// coreCases drives what every deployment must do through url: enqueue and
// a quota refusal, claim and ack, an unknown token refused at connect, and
// a client's attempt to read others' traffic refused. It returns how many
// ran.
func coreCases(t *testing.T, e *env, tn *tenant, url string) int {
	t.Helper()
	n := 0
	p, err := client.Connect(url, tn.producer)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res := enqueue(t, p, job("q", "t"), job("q", "t"))
	if len(res) != 2 || res[0].Outcome != api.OutcomeEnqueued {
		t.Fatalf("enqueue: %+v", res)
	}
	_, err = p.Enqueue(ctx(t), job("q", "t"))
	wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 2 pending >= max_pending 2")
	n++

	w, err := client.Connect(url, tn.worker)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	jobs := claim(t, w, 2, "q")
	if len(jobs) != 2 {
		t.Fatalf("claimed %d jobs", len(jobs))
	}
	for _, j := range jobs {
		if err := w.Ack(ctx(t), j.ID, j.Attempt, nil); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	n++

	_, err = client.Connect(url, "fq_nonsense")
	wantAPIError(t, err, api.CodeUnauthenticated, "", api.Unauthenticated().Message)
	n++

	violated := make(chan error, 1)
	spy, err := nats.Connect(url, nats.Token(tn.producer), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case violated <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	if _, err := spy.Subscribe(">", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violated:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("subscribe >: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("subscribe > was not refused")
	}
	n++
	return n
}

// A SQLite node refuses to serve on a bus where another node serves: its
// store cannot be shared.
func TestSQLiteNodeRefusesASharedBus(t *testing.T) {
	ns := externalNATS(t)
	start(t, func(c *nodeConfig) { c.NATSURL = ns.ClientURL(); c.ClusterSecret = ns.secret; c.NodeID = "first" })
	cfg := node.Defaults()
	cfg.DataDir = t.TempDir()
	cfg.NATSURL, cfg.ClusterSecret = ns.ClientURL(), ns.secret
	cfg.AdminAddr, cfg.NodeID = "127.0.0.1:0", "second"
	n, err := node.Start(context.Background(), cfg)
	if err == nil {
		n.Stop(context.Background())
		t.Fatal("a second SQLite node started on the bus")
	}
	if !strings.Contains(err.Error(), "another FlexiQ node (first)") {
		t.Fatalf("error %q does not name the other node", err)
	}
}
