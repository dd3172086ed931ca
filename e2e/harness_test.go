// Package e2e runs whole FlexiQ nodes in-process (embedded NATS, a real
// store) and talks to them the way users do: the Go client over NATS and
// HTTP to the admin door.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/node"
)

// env is one running node and what a test needs to talk to it.
type env struct {
	t    testing.TB
	node *node.Node
	cfg  node.Config
	root string
}

type option func(*node.Config)

// start runs a node on free loopback ports with a fresh SQLite store.
func start(t testing.TB, opts ...option) *env {
	t.Helper()
	dir := t.TempDir()
	cfg := node.Defaults()
	cfg.DataDir = dir
	cfg.Store = storeURLFor(t, dir)
	cfg.NATSListen = "127.0.0.1:-1"
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.NodeID = "test"
	cfg.Maintenance = false
	for _, o := range opts {
		o(&cfg)
	}
	e := &env{t: t, cfg: cfg}
	e.boot()
	t.Cleanup(func() { e.stop() })
	return e
}

func (e *env) boot() {
	e.t.Helper()
	n, err := node.Start(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatalf("start node: %v", err)
	}
	e.node, e.root = n, n.RootToken()
	// Later boots of the same env reuse the same NATS port, so clients
	// reconnect to the restarted node.
	e.cfg.NATSListen = n.NATSURL()[len("nats://"):]
	e.cfg.AdminAddr = n.AdminURL()[len("http://"):]
}

func (e *env) stop() {
	if e.node == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.node.Stop(ctx); err != nil {
		e.t.Errorf("stop node: %v", err)
	}
	e.node = nil
}

// client connects a Go client with token.
func (e *env) client(token string) *client.Client {
	e.t.Helper()
	c, err := client.Connect(e.node.NATSURL(), token)
	if err != nil {
		e.t.Fatalf("connect client: %v", err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// do sends an HTTP request to the admin door and returns status and body.
func (e *env) do(method, path, token string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewBuffer(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewBuffer(data)
	}
	req, err := http.NewRequest(method, e.node.AdminURL()+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, data
}

// mustDo is do that fails the test unless the status is want; it decodes
// the body into out when out is not nil.
func (e *env) mustDo(want int, method, path, token string, body, out any) {
	e.t.Helper()
	status, data := e.do(method, path, token, body)
	if status != want {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}

// token creates a token of role in namespace ns.
func (e *env) token(ns, role string) string {
	e.t.Helper()
	var out struct{ Token string }
	e.mustDo(http.StatusCreated, "POST", "/v1/tokens", e.root, map[string]string{"namespace": ns, "role": role}, &out)
	if out.Token == "" {
		e.t.Fatal("token creation returned no token")
	}
	return out.Token
}

// tenant is one namespace's tokens and clients.
type tenant struct {
	ns                      string
	admin, producer, worker string
	p, w, a                 *client.Client
}

func (e *env) tenant(ns string) *tenant {
	e.t.Helper()
	tn := &tenant{ns: ns, admin: e.token(ns, "admin"), producer: e.token(ns, "producer"), worker: e.token(ns, "worker")}
	tn.p, tn.w, tn.a = e.client(tn.producer), e.client(tn.worker), e.client(tn.admin)
	return tn
}

// setQuota replaces ns's quota document.
func (e *env) setQuota(token string, doc string) {
	e.t.Helper()
	e.mustDo(http.StatusOK, "PUT", "/v1/quota", token, doc, nil)
}

// usage reads GET /v1/usage.
func (e *env) usage(token string) usageReply {
	e.t.Helper()
	var u usageReply
	e.mustDo(http.StatusOK, "GET", "/v1/usage", token, nil, &u)
	return u
}

type usageReply struct {
	Namespace string          `json:"namespace"`
	Quota     json.RawMessage `json:"quota"`
	Revision  int64           `json:"revision"`
	Usage     struct {
		Pending, Running, Archived, Dead int64
	} `json:"usage"`
}

// job reads one job through the admin door.
func (e *env) job(token, id string) api.Job {
	e.t.Helper()
	var j api.Job
	e.mustDo(http.StatusOK, "GET", "/v1/jobs/"+id, token, nil, &j)
	return j
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func job(queue, task string) api.Job {
	return api.Job{Queue: queue, Task: task, Payload: json.RawMessage(`{"n":1}`)}
}

// wantAPIError checks err is an *api.Error with code, reason and message.
func wantAPIError(t testing.TB, err error, code api.Code, reason api.Reason, message string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *api.Error %s/%s %q", err, err, code, reason, message)
	}
	if e.Code != code || e.Reason != reason || (message != "" && e.Message != message) {
		t.Fatalf("error %s/%s %q, want %s/%s %q", e.Code, e.Reason, e.Message, code, reason, message)
	}
}

func enqueue(t testing.TB, c *client.Client, jobs ...api.Job) []api.EnqueueResult {
	t.Helper()
	res, err := c.EnqueueMany(ctx(t), jobs)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res
}

func claim(t testing.TB, c *client.Client, max int, queues ...string) []api.Job {
	t.Helper()
	jobs, err := c.Claim(ctx(t), api.ClaimRequest{Queues: queues, Max: max})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return jobs
}

// newMsg builds a raw NATS request with a token, for tests of the wire.
func newMsg(subject, token, body string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(api.HeaderAuthorization, "Bearer "+token)
	m.Data = []byte(body)
	return m
}

type nodeConfig = node.Config
