package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
	"github.com/flexiq/flexiq/store"
)

// Many nodes (docs/cluster.md), tested as an operator runs them: separate fq-node
// processes on loopback, their embedded NATS servers joined by routes,
// sharing one PostgreSQL or Redis store.

const (
	clusterRoot   = "fq_root_cluster_test"
	clusterSecret = "fq_cluster_cluster_test"
)

// member is one fq-node process of a test cluster.
type member struct {
	t                      testing.TB
	id, dir, store         string
	natsAddr, route, admin string
	grpc                   string
	routes                 []string
	cmd                    *exec.Cmd
	maintenance            bool
	// natsCert and natsKey, when set, put TLS on the embedded server's
	// client and route listeners.
	natsCert, natsKey string
	// env is added to the process's environment.
	env []string
	// later keeps startClusterWith from starting the member: the test
	// starts it (start) when it wants.
	later  bool
	exited chan struct{}
}

func (m *member) start() {
	m.t.Helper()
	bin, err := fqNode()
	if err != nil {
		m.t.Fatal(err)
	}
	args := []string{"--data-dir", m.dir, "--store", m.store, "--nats-listen", m.natsAddr, "--admin-addr", m.admin,
		"--root-token", clusterRoot, "--cluster-secret", clusterSecret, "--node-id", m.id,
		"--cluster-listen", m.route, "--routes", strings.Join(m.routes, ","), "--grpc-addr", m.grpc}
	if m.natsCert != "" {
		args = append(args, "--nats-tls-cert", m.natsCert, "--nats-tls-key", m.natsKey)
	}
	m.cmd = exec.Command(bin, args...)
	m.cmd.Env = append(os.Environ(), "FLEXIQ_MAINTENANCE="+map[bool]string{true: "on", false: "off"}[m.maintenance])
	// Debug: a failure shows the embedded servers' route reports too.
	m.cmd.Env = append(m.cmd.Env, "FLEXIQ_LOG_LEVEL=debug")
	m.cmd.Env = append(m.cmd.Env, m.env...)
	logf, err := os.OpenFile(filepath.Join(m.dir, "node.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		m.t.Fatal(err)
	}
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.exited = make(chan struct{})
	go func() { _ = m.cmd.Wait(); logf.Close(); close(m.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + m.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-m.exited:
			log, _ := os.ReadFile(filepath.Join(m.dir, "node.log"))
			m.t.Fatalf("node %s exited at start:\n%s", m.id, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(m.dir, "node.log"))
			m.t.Fatalf("node %s did not become healthy: %v\n%s", m.id, err, log)
		}
		waitFor(20 * time.Millisecond)
	}
}

func (m *member) signal(sig syscall.Signal) {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Signal(sig)
	select {
	case <-m.exited:
	case <-time.After(20 * time.Second):
		m.t.Errorf("node %s did not exit after %v", m.id, sig)
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

func (m *member) natsURL() string { return "nats://" + m.natsAddr }

// testCluster is n nodes on one store.
type testCluster struct {
	t       testing.TB
	members []*member
	// logsShown: a failure message carried the nodes' logs already.
	logsShown atomic.Bool
}

// startCluster runs n fq-node processes on the test's backend store,
// joined by routes, and waits until they have placed every partition.
func startCluster(t testing.TB, n int) *testCluster {
	t.Helper()
	return startClusterWith(t, n, nil)
}

// startClusterWith is startCluster with setup applied to each member
// before it starts.
func startClusterWith(t testing.TB, n int, setup func(*member)) *testCluster {
	t.Helper()
	storeURL := storeURLFor(t, t.TempDir())
	c := &testCluster{t: t}
	// A failed test shows what the nodes logged (at debug: the embedded
	// servers' route reports too), unless its message did. Registered
	// first, it runs after the nodes are killed.
	t.Cleanup(func() {
		if t.Failed() && !c.logsShown.Load() {
			t.Logf("the nodes' logs:\n%s", c.logs())
		}
	})
	var routes []string
	for i := 0; i < n; i++ {
		m := &member{t: t, id: fmt.Sprintf("n%d", i+1), dir: t.TempDir(), store: storeURL,
			natsAddr: freeAddr(t), route: freeAddr(t), admin: freeAddr(t), grpc: freeAddr(t), maintenance: true}
		routes = append(routes, "nats://"+m.route)
		c.members = append(c.members, m)
	}
	for i, m := range c.members {
		for j, r := range routes {
			if j != i {
				m.routes = append(m.routes, r)
			}
		}
	}
	var started []*member
	for _, m := range c.members {
		if setup != nil {
			setup(m)
		}
		t.Cleanup(func() { m.signal(syscall.SIGKILL) })
		if !m.later {
			m.start()
			started = append(started, m)
		}
	}
	c.settled(started...)
	return c
}

// status is GET /v1/cluster of m.
func (c *testCluster) status(m *member) (clusterStatus, error) {
	req, _ := http.NewRequest("GET", "http://"+m.admin+"/v1/cluster", nil)
	req.Header.Set("Authorization", "Bearer "+clusterRoot)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return clusterStatus{}, err
	}
	defer resp.Body.Close()
	var st clusterStatus
	if resp.StatusCode != 200 {
		return st, fmt.Errorf("GET /v1/cluster: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

type clusterStatus struct {
	Node        string   `json:"node"`
	Leader      string   `json:"leader"`
	Owner       string   `json:"owner"`
	Unreachable []string `json:"unreachable"`
	Members     []struct {
		ID         string `json:"id"`
		Ready      bool   `json:"ready"`
		Owned      int    `json:"owned"`
		Partitions int    `json:"partitions"`
		JobFormat  int    `json:"job_format"`
	} `json:"members"`
}

// settled waits until every live member sees exactly live as members,
// all of them ready (their routes up), every partition held by one of
// them, and one leader among them.
func (c *testCluster) settled(live ...*member) clusterStatus {
	c.t.Helper()
	ids := map[string]bool{}
	for _, m := range live {
		ids[m.id] = true
	}
	deadline := time.Now().Add(30 * time.Second)
	var last clusterStatus
	var lastErr error
	for time.Now().Before(deadline) {
		ok := true
		for _, m := range live {
			st, err := c.status(m)
			last, lastErr = st, err
			if err != nil || len(st.Members) != len(live) || !ids[st.Leader] {
				ok = false
				break
			}
			parts := 0
			for _, mem := range st.Members {
				if !ids[mem.ID] || !mem.Ready {
					ok = false
				}
				parts += mem.Partitions
			}
			if parts != 64 {
				ok = false
			}
		}
		if ok {
			return last
		}
		waitFor(50 * time.Millisecond)
	}
	c.t.Fatalf("the cluster did not settle on %d members: last %+v %v", len(live), last, lastErr)
	return last
}

// do calls the admin door of m; body is JSON text or a value to encode.
func (c *testCluster) do(m *member, method, path, token string, body any, out any) int {
	c.t.Helper()
	var text string
	switch b := body.(type) {
	case nil:
	case string:
		text = b
	default:
		data, _ := json.Marshal(b)
		text = string(data)
	}
	rd := strings.NewReader(text)
	req, _ := http.NewRequest(method, "http://"+m.admin+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s on %s: %v", method, path, m.id, err)
	}
	defer resp.Body.Close()
	if out != nil {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

func (c *testCluster) token(ns, role string) string {
	c.t.Helper()
	var out struct{ Token string }
	if st := c.do(c.members[0], "POST", "/v1/tokens", clusterRoot, map[string]string{"namespace": ns, "role": role}, &out); st != http.StatusCreated {
		c.t.Fatalf("create token: %d", st)
	}
	return out.Token
}

// clients connects one client per member with token.
func (c *testCluster) clients(token string, members ...*member) []*client.Client {
	c.t.Helper()
	var out []*client.Client
	for _, m := range members {
		cl, err := client.Connect(m.natsURL(), token, nats.MaxReconnects(-1))
		if err != nil {
			c.t.Fatalf("connect to %s: %v", m.id, err)
		}
		c.t.Cleanup(cl.Close)
		out = append(out, cl)
	}
	return out
}

func (c *testCluster) usage(m *member, token string) usageReply {
	c.t.Helper()
	var u usageReply
	if st := c.do(m, "GET", "/v1/usage", token, nil, &u); st != 200 {
		c.t.Fatalf("usage: %d", st)
	}
	return u
}

// Three nodes admit what one would: max_pending, max_running and the
// enqueue rate hold cluster-wide, with producers and workers spread over
// the three; and an ack through another node than the claim is honoured.
func TestClusterLimitsHoldClusterWide(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		admin, prod, work := c.token("acme", "admin"), c.token("acme", "producer"), c.token("acme", "worker")
		if st := c.do(c.members[1], "PUT", "/v1/quota", admin, `{"max_pending":100,"max_running":5}`, nil); st != 200 {
			t.Fatalf("put quota: %d", st)
		}
		producers := c.clients(prod, c.members...)
		var admitted, full atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 12; i++ {
			wg.Add(1)
			go func(p *client.Client) {
				defer wg.Done()
				for j := 0; j < 25; j++ {
					_, err := p.Enqueue(context.Background(), job("q", "t"))
					var ae *api.Error
					switch {
					case err == nil:
						admitted.Add(1)
					case errors.As(err, &ae) && ae.Reason == api.ReasonQueueFull:
						full.Add(1)
					default:
						t.Errorf("enqueue: %v", err)
					}
				}
			}(producers[i%3])
		}
		wg.Wait()
		if admitted.Load() != 100 || full.Load() != 200 {
			t.Fatalf("3 nodes admitted %d of 300 with max_pending 100 (%d refused)", admitted.Load(), full.Load())
		}
		for _, m := range c.members {
			if u := c.usage(m, admin); u.Usage.Pending != 100 {
				t.Fatalf("usage on %s: %d pending", m.id, u.Usage.Pending)
			}
		}

		// max_running 5, 15 claimers over three nodes.
		workers := c.clients(work, c.members...)
		var claimed []api.Job
		var mu sync.Mutex
		for i := 0; i < 15; i++ {
			wg.Add(1)
			go func(w *client.Client) {
				defer wg.Done()
				jobs, err := w.Claim(context.Background(), api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				claimed = append(claimed, jobs...)
				mu.Unlock()
			}(workers[i%3])
		}
		wg.Wait()
		if len(claimed) != 5 {
			t.Fatalf("3 nodes handed out %d jobs with max_running 5", len(claimed))
		}
		// Acks through a node other than each claim's.
		for i, j := range claimed {
			if err := workers[(i+1)%3].Ack(ctx(t), j.ID, j.Attempt, nil); err != nil {
				t.Fatalf("ack of %s through another node: %v", j.ID, err)
			}
		}
		if u := c.usage(c.members[2], admin); u.Usage.Running != 0 || u.Usage.Archived != 5 {
			t.Fatalf("after the acks: %+v", u.Usage)
		}

		// Read your writes: once a PUT answered on one node, a call that
		// starts after it through any node is decided under it.
		for i := 0; i < 20; i++ {
			limit := 95 + i%2*10 // alternately below and above the 95 pending
			if st := c.do(c.members[i%3], "PUT", "/v1/quota", admin, fmt.Sprintf(`{"max_pending":%d}`, limit), nil); st != 200 {
				t.Fatalf("put quota: %d", st)
			}
			_, err := producers[(i+1)%3].Enqueue(ctx(t), job("q", "t"))
			if limit == 95 {
				wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "")
				continue
			}
			if err != nil {
				t.Fatalf("enqueue right after raising the limit on another node: %v", err)
			}
			// Back to 95 pending for the next round.
			jobs := claim(t, workers[i%3], 1, "q")
			if err := workers[i%3].Ack(ctx(t), jobs[0].ID, jobs[0].Attempt, nil); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// kill -9 of a node: its namespaces are served by the others once its
// leases run out, the jobs it had claimed come back when their leases
// expire, and no acknowledged enqueue is lost.
func TestClusterSurvivesKill9(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		admin, prod, work := c.token("acme", "admin"), c.token("acme", "producer"), c.token("acme", "worker")
		// Kill the namespace's owner.
		var owner clusterStatus
		c.do(c.members[0], "GET", "/v1/cluster?namespace=acme", clusterRoot, nil, &owner)
		var victim *member
		var survivors []*member
		for _, m := range c.members {
			if m.id == owner.Owner {
				victim = m
			} else {
				survivors = append(survivors, m)
			}
		}
		if victim == nil {
			t.Fatalf("owner of acme: %+v", owner)
		}
		p := c.clients(prod, survivors...)[0]
		w := c.clients(work, survivors...)[1]
		// A call that went to the killed node just before it died is
		// lost with it: fail it fast and retry.
		p.Timeout = time.Second
		var ids []string
		for i := 0; i < 20; i++ {
			r, err := p.Enqueue(ctx(t), job("q", "t"))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.ID)
		}
		claimed, err := w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 5, LeaseMS: 2000})
		if err != nil || len(claimed) != 5 {
			t.Fatalf("claim: %d %v", len(claimed), err)
		}
		victim.signal(syscall.SIGKILL)
		killed := time.Now()
		// Enqueues keep being acknowledged (retrying while the dead
		// node's partitions move).
		var gap time.Duration
		for i := 0; i < 20; i++ {
			// The same id on every retry: a try whose answer was lost
			// may have landed (deduplicated then).
			j := job("q", "t")
			j.ID = fmt.Sprintf("after-kill-%d", i)
			for {
				r, err := p.Enqueue(context.Background(), j)
				if err == nil {
					ids = append(ids, r.ID)
					break
				}
				if time.Since(killed) > 15*time.Second {
					t.Fatalf("no enqueue 15 s after the kill: %v", err)
				}
				gap = time.Since(killed)
				waitFor(20 * time.Millisecond)
			}
		}
		t.Logf("kill -9 of the owner: enqueues refused for %v", gap)
		c.settled(survivors...)
		// The claimed jobs come back when their 2 s leases expire, and
		// every acknowledged job is there to drain.
		seen := map[string]bool{}
		deadline := time.Now().Add(20 * time.Second)
		missing := func() int {
			n := 0
			for _, id := range ids {
				if !seen[id] {
					n++
				}
			}
			return n
		}
		for missing() > 0 && time.Now().Before(deadline) {
			jobs, err := w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 50, WaitMS: 500, LeaseMS: 30000})
			if err != nil {
				continue
			}
			for _, j := range jobs {
				seen[j.ID] = true
				if err := w.Ack(ctx(t), j.ID, j.Attempt, nil); err != nil {
					t.Fatalf("ack: %v", err)
				}
			}
		}
		for _, id := range ids {
			if !seen[id] {
				t.Fatalf("acknowledged job %s never came back (%d of %d drained)", id, len(seen), len(ids))
			}
		}
		if u := c.usage(survivors[0], admin); u.Usage.Running != 0 || u.Usage.Pending != 0 {
			t.Fatalf("after draining: %+v", u.Usage)
		}
		// The new owner's actor took the calls since: its steps are
		// counted there (the 20 enqueues after the kill at least, each
		// answered before the next was sent).
		var now clusterStatus
		c.do(survivors[0], "GET", "/v1/cluster?namespace=acme", clusterRoot, nil, &now)
		i := slices.IndexFunc(survivors, func(m *member) bool { return m.id == now.Owner })
		if i < 0 {
			t.Fatalf("owner of acme after the kill: %q, not a survivor", now.Owner)
		}
		series := `flexiq_actor_messages_total{namespace="acme"}`
		if got, _ := c.metricIf(survivors[i], series); got < 20 {
			t.Errorf("%s on the new owner %s = %v, want at least 20", series, now.Owner, got)
		}
	})
}

// The jobs a killed owner had claimed come back when their leases run out
// even if no call for their namespace ever reaches the new owner: the
// node that takes the partition wakes the namespace's actor itself.
func TestClusterDeadOwnersClaimsComeBackUnasked(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		admin, prod, work := c.token("acme", "admin"), c.token("acme", "producer"), c.token("acme", "worker")
		victim, survivors := c.ownerOf("acme", c.members)
		p, w := c.clients(prod, survivors[0])[0], c.clients(work, survivors[0])[0]
		for i := 0; i < 5; i++ {
			if _, err := p.Enqueue(ctx(t), job("q", "t")); err != nil {
				t.Fatal(err)
			}
		}
		claimed, err := w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 5, LeaseMS: 1000})
		if err != nil || len(claimed) != 5 {
			t.Fatalf("claim: %d %v; the nodes' logs:\n%s", len(claimed), err, c.logs())
		}
		victim.signal(syscall.SIGKILL)
		// From here on, only the admin door's usage (read from the store,
		// not through the namespace's actor) is asked.
		deadline := time.Now().Add(30 * time.Second)
		for {
			u := c.usage(survivors[0], admin)
			if u.Usage.Running == 0 && u.Usage.Pending == 5 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("30 s after the owner died, with no call for its namespace: %+v", u.Usage)
			}
			waitFor(100 * time.Millisecond)
		}
	})
}

// SIGTERM hands a node's namespaces over: producers and workers on the
// other nodes see no failed call.
func TestClusterGracefulLeave(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		prod := c.token("acme", "producer")
		survivors := c.members[1:]
		producers := c.clients(prod, survivors...)
		l := startLoad(8, func(i int) error {
			_, err := producers[i%2].Enqueue(context.Background(), job("q", "t"))
			return err
		}, func(_ time.Time, err error) { t.Errorf("enqueue during the hand-over: %v", err) })
		l.waitOK(200)
		c.members[0].signal(syscall.SIGTERM)
		c.settled(survivors...)
		l.waitOK(200)
		l.stop()
		if l.failed.Load() != 0 {
			t.Fatalf("%d calls failed during the hand-over (%d succeeded)", l.failed.Load(), l.ok.Load())
		}
	})
}

// SIGTERM of a namespace's owner, while producers call it through another
// node, fails none of their calls (docs/cluster.md, "SIGTERM"). On NATS,
// 300 producers know the owner and send their calls straight to it, so
// many are on their way through a NATS route when it stops: it keeps
// taking and passing them on until they fall quiet. On gRPC, 100 callers
// of another node's gRPC port, which hands each call to the owner on the
// nodes' internal subject. Twice each: the owner, and the owner again once
// the restarted node took it back (or the node that kept it).
func TestClusterOwnersGracefulLeaveUnderLoad(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		prod := c.token("acme", "producer")
		surfaces := []struct {
			name    string
			callers int
			connect func(via *member) func() error
		}{
			{"nats", 300, func(via *member) func() error {
				p := c.clients(prod, via)[0]
				return func() error {
					_, err := p.Enqueue(context.Background(), job("q", "t"))
					return err
				}
			}},
			{"grpc", 100, func(via *member) func() error {
				conn, err := grpc.NewClient(via.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				p := pb.NewProducerClient(conn)
				return func() error {
					_, err := p.Enqueue(withToken(t, prod), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}})
					return err
				}
			}},
		}
		for _, surface := range surfaces {
			for round := 0; round < 2; round++ {
				owner, rest := c.ownerOf("acme", c.members)
				enqueue := surface.connect(rest[0])
				var began atomic.Int64
				var shown atomic.Int64
				l := startLoad(surface.callers, func(int) error { return enqueue() }, func(sent time.Time, err error) {
					if shown.Add(1) <= 3 {
						t.Errorf("%s: enqueue sent %v after the SIGTERM to %s: %v", surface.name, sent.Sub(time.Unix(0, began.Load())).Round(time.Millisecond), owner.id, err)
					}
				})
				l.waitOK(1000)
				began.Store(time.Now().UnixNano())
				owner.signal(syscall.SIGTERM)
				t.Logf("%s, round %d: %s stopped in %v", surface.name, round, owner.id, time.Since(time.Unix(0, began.Load())).Round(time.Millisecond))
				c.settled(rest...)
				l.waitOK(1000)
				l.stop()
				if l.failed.Load() != 0 {
					t.Fatalf("%s, round %d: %d calls failed while %s stopped (%d succeeded); the nodes' logs:\n%s", surface.name, round, l.failed.Load(), owner.id, l.ok.Load(), c.logs())
				}
				owner.start()
				c.settled(c.members...)
			}
		}
	})
}

// load is callers goroutines each calling in a closed loop until stop.
type load struct {
	ok, failed atomic.Int64
	done       chan struct{}
	wg         sync.WaitGroup
}

// startLoad starts callers goroutines calling call(i) (i the goroutine's
// number); fail gets each error and when its call was sent.
func startLoad(callers int, call func(i int) error, fail func(sent time.Time, err error)) *load {
	l := &load{done: make(chan struct{})}
	for i := 0; i < callers; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.done:
					return
				default:
				}
				sent := time.Now()
				if err := call(i); err != nil {
					l.failed.Add(1)
					fail(sent, err)
				} else {
					l.ok.Add(1)
				}
			}
		}()
	}
	return l
}

// waitOK waits until n more calls succeeded, or one failed.
func (l *load) waitOK(n int64) {
	target := l.ok.Load() + n
	for l.ok.Load() < target && l.failed.Load() == 0 {
		waitFor(10 * time.Millisecond)
	}
}

// stop ends the loops and waits for the calls in flight.
func (l *load) stop() {
	close(l.done)
	l.wg.Wait()
}

// One maintenance leader, named by GET /v1/cluster on every node, and a
// new one within 5 s of its death.
func TestClusterLeaderIsUniqueAndReelected(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		st := c.settled(c.members...)
		for _, mem := range st.Members {
			// Each tells the job record format it reads, so a store may
			// write it (a rolling upgrade waits for the last older node).
			if mem.JobFormat != store.JobFormat {
				t.Errorf("%s tells job format %d, want %d", mem.ID, mem.JobFormat, store.JobFormat)
			}
		}
		var leader *member
		for _, m := range c.members {
			s, err := c.status(m)
			if err != nil || s.Leader != st.Leader {
				t.Fatalf("%s names leader %q, want %q (%v)", m.id, s.Leader, st.Leader, err)
			}
			if m.id == st.Leader {
				leader = m
			}
		}
		if leader == nil {
			t.Fatalf("leader %q is not a member", st.Leader)
		}
		leader.signal(syscall.SIGKILL)
		var rest []*member
		for _, m := range c.members {
			if m != leader {
				rest = append(rest, m)
			}
		}
		st2 := c.settled(rest...)
		if st2.Leader == leader.id || st2.Leader == "" {
			t.Fatalf("leader after the kill: %q", st2.Leader)
		}
	})
}

// A rolling restart (SIGTERM, start again, one node after the other)
// under load loses no acknowledged enqueue.
func TestClusterRollingRestartLosesNoAcknowledgedEnqueue(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		admin, prod := c.token("acme", "admin"), c.token("acme", "producer")
		var urls []string
		for _, m := range c.members {
			urls = append(urls, m.natsURL())
		}
		p, err := client.Connect(strings.Join(urls, ","), prod, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.Timeout = 2 * time.Second
		var (
			acked sync.Map
			n     atomic.Int64
			stop  = make(chan struct{})
			wg    sync.WaitGroup
		)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					j := job("q", "t")
					j.ID = fmt.Sprintf("w%d-%d", w, i)
					for try := 0; ; try++ {
						if _, err := p.Enqueue(context.Background(), j); err == nil {
							acked.Store(j.ID, true)
							n.Add(1)
							waitFor(5 * time.Millisecond) // a steady load, not a flood to check one by one
							break
						}
						if try > 100 {
							t.Errorf("enqueue %s never answered", j.ID)
							return
						}
						waitFor(20 * time.Millisecond)
					}
				}
			}(w)
		}
		for _, m := range c.members {
			before := n.Load()
			m.signal(syscall.SIGTERM)
			m.start()
			c.settled(c.members...)
			for n.Load() < before+50 {
				waitFor(10 * time.Millisecond)
			}
		}
		close(stop)
		wg.Wait()
		missing := 0
		acked.Range(func(k, _ any) bool {
			if st := c.do(c.members[0], "GET", "/v1/jobs/"+k.(string), admin, nil, nil); st != 200 {
				missing++
			}
			return true
		})
		if missing > 0 {
			t.Fatalf("%d of %d acknowledged enqueues are gone after the rolling restart", missing, n.Load())
		}
		t.Logf("%d acknowledged enqueues, all kept", n.Load())
	})
}

// logs are the members' node logs, for a failure's message.
func (c *testCluster) logs() string {
	c.logsShown.Store(true)
	var b strings.Builder
	for _, m := range c.members {
		data, _ := os.ReadFile(filepath.Join(m.dir, "node.log"))
		fmt.Fprintf(&b, "--- %s\n%s", m.id, data)
	}
	return b.String()
}

// ownerOf is the member holding ns's actor, and the others.
func (c *testCluster) ownerOf(ns string, among []*member) (*member, []*member) {
	c.t.Helper()
	var st clusterStatus
	c.do(among[0], "GET", "/v1/cluster?namespace="+ns, clusterRoot, nil, &st)
	var owner *member
	var rest []*member
	for _, m := range among {
		if m.id == st.Owner {
			owner = m
		} else {
			rest = append(rest, m)
		}
	}
	if owner == nil {
		c.t.Fatalf("owner of %s: %+v", ns, st)
	}
	return owner, rest
}

// BenchmarkClusterFailover kills (-9) the owner of a namespace under load,
// five times, and reports how long enqueues through the other nodes were
// refused: p50 and max, in seconds. The node is started again between
// kills.
//
//	go test -run '^$' -bench ClusterFailover -benchtime 1x ./e2e
func BenchmarkClusterFailover(b *testing.B) {
	for _, backend := range []string{"postgres", "redis"} {
		b.Run(backend, func(b *testing.B) {
			c := startCluster(b, 3)
			prod := c.token("acme", "producer")
			var gaps []time.Duration
			for kill := 0; kill < 5; kill++ {
				victim, rest := c.ownerOf("acme", c.members)
				p := c.clients(prod, rest[0])[0]
				p.Timeout = 500 * time.Millisecond
				if _, err := p.Enqueue(context.Background(), job("q", "t")); err != nil {
					b.Fatal(err)
				}
				victim.signal(syscall.SIGKILL)
				killed := time.Now()
				for {
					if _, err := p.Enqueue(context.Background(), job("q", "t")); err == nil {
						break
					}
					if time.Since(killed) > 30*time.Second {
						b.Fatal("no enqueue 30 s after the kill")
					}
				}
				gaps = append(gaps, time.Since(killed))
				victim.start()
				c.settled(c.members...)
			}
			sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
			b.ReportMetric(gaps[len(gaps)/2].Seconds(), "p50-gap-s")
			b.ReportMetric(gaps[len(gaps)-1].Seconds(), "max-gap-s")
			b.Logf("gaps after kill -9 of the owner: %v", gaps)
		})
	}
}

// BenchmarkClusterThroughput measures single-job enqueue (32 producers)
// and claim+ack (32 loops of max=1) on 1 and on 3 nodes of the same
// store, the clients spread over the nodes: jobs/s of each. A third run,
// the control, puts every client on the owner's own server: the
// difference between it and the spread run is what NATS's relaying of
// two thirds of the calls through the other servers costs on this
// machine's two cores.
//
//	go test -run '^$' -bench ClusterThroughput -benchtime 1x ./e2e
func BenchmarkClusterThroughput(b *testing.B) {
	const jobs = 20000
	for _, backend := range []string{"postgres", "redis"} {
		for _, run := range []struct {
			name    string
			nodes   int
			onOwner bool
		}{{"nodes=1", 1, false}, {"nodes=3", 3, false}, {"nodes=3-clients-on-owner", 3, true}} {
			nodes := run.nodes
			b.Run(backend+"/"+run.name, func(b *testing.B) {
				c := startCluster(b, nodes)
				prod, work := c.token("bench", "producer"), c.token("bench", "worker")
				at := c.members
				if run.onOwner {
					owner, _ := c.ownerOf("bench", c.members)
					at = []*member{owner, owner, owner}
				}
				ps, ws := c.clients(prod, at...), c.clients(work, at...)
				var left atomic.Int64
				left.Store(jobs)
				var wg sync.WaitGroup
				t0 := time.Now()
				for i := 0; i < 32; i++ {
					wg.Add(1)
					go func(p *client.Client) {
						defer wg.Done()
						for left.Add(-1) >= 0 {
							if _, err := p.Enqueue(context.Background(), job("q", "t")); err != nil {
								b.Error(err)
								return
							}
						}
					}(ps[i%nodes])
				}
				wg.Wait()
				enq := float64(jobs) / time.Since(t0).Seconds()
				left.Store(jobs)
				t0 = time.Now()
				for i := 0; i < 32; i++ {
					wg.Add(1)
					go func(w *client.Client) {
						defer wg.Done()
						for left.Load() > 0 {
							got, err := w.Claim(context.Background(), api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 100})
							if err != nil {
								b.Error(err)
								return
							}
							for _, j := range got {
								if err := w.Ack(context.Background(), j.ID, j.Attempt, nil); err != nil {
									b.Error(err)
									return
								}
								left.Add(-1)
							}
						}
					}(ws[i%nodes])
				}
				wg.Wait()
				drain := float64(jobs) / time.Since(t0).Seconds()
				b.ReportMetric(enq, "enqueue-jobs/s")
				b.ReportMetric(drain, "claim+ack-jobs/s")
			})
		}
	}
}

// metric is the value of a counter or gauge without labels on m's
// /metrics.
func (c *testCluster) metric(m *member, name string) float64 {
	c.t.Helper()
	v, ok := c.metricIf(m, name)
	if !ok {
		c.t.Fatalf("no %s on %s", name, m.id)
	}
	return v
}

// metricIf is the value of series name (with its labels, as printed) on
// m's /metrics; ok is false when m has no such series.
func (c *testCluster) metricIf(m *member, name string) (float64, bool) {
	c.t.Helper()
	req, _ := http.NewRequest("GET", "http://"+m.admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+clusterRoot)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return seriesValue(c.t, data, name)
}

// A client's calls go straight to its namespace's owner once the owner has
// named itself: a client connected through another node's server makes
// that node forward nothing. Claims and acks too.
func TestClusterCallsGoStraightToTheOwner(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		prod, work := c.token("acme", "producer"), c.token("acme", "worker")
		ownerNode, rest := c.ownerOf("acme", c.members)
		via := rest[0]

		// Wait until the owner's subject is known to via's server.
		nc, err := nats.Connect(via.natsURL(), client.ConnectOptions(prod)...)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		req := func(subject string) (*nats.Msg, error) {
			m := &nats.Msg{Subject: subject, Data: []byte(`{"jobs":[{"queue":"q","task":"t"}]}`), Header: nats.Header{}}
			m.Header.Set(api.HeaderAuthorization, "Bearer "+prod)
			return nc.RequestMsg(m, 10*time.Second)
		}
		first, err := req(api.SubjectEnqueue)
		if err != nil {
			t.Fatal(err)
		}
		owner := first.Header.Get(api.HeaderOwner)
		if !api.ValidOwnerToken(owner) {
			t.Fatalf("the reply names no owner: %v", first.Header)
		}
		for {
			_, err := req(api.SubjectOwner(owner, api.SubjectEnqueue))
			if err == nil {
				break
			}
			if !errors.Is(err, nats.ErrNoResponders) {
				t.Fatal(err)
			}
			waitFor(10 * time.Millisecond)
		}

		p, w := c.clients(prod, via)[0], c.clients(work, via)[0]
		// The first enqueue learns the owner. One CI run saw it get no
		// answer at all within 30 s, right after the cluster formed, with
		// no trace in the nodes; NATS carries a message at most once, and
		// one in flight on a route that is being replaced is lost. It is
		// tried once more after 10 s (and said so) rather than failing a
		// test about which node the later calls reach.
		for try := 1; ; try++ {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := p.Enqueue(cctx, job("q", "t"))
			cancel()
			if err == nil {
				break
			}
			if try == 2 {
				t.Fatalf("the first enqueue through %s, twice: %v; the nodes' logs:\n%s", via.id, err, c.logs())
			}
			t.Logf("the first enqueue through %s got no answer (%v); trying again", via.id, err)
		}
		before := c.metric(via, "flexiq_calls_forwarded_total")
		for i := 0; i < 50; i++ {
			if _, err := p.Enqueue(ctx(t), job("q", "t")); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 20; i++ {
			jobs := claim(t, w, 1, "q")
			if err := w.Ack(ctx(t), jobs[0].ID, jobs[0].Attempt, nil); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.metric(via, "flexiq_calls_forwarded_total") - before; got > 1 {
			// The worker's first claim may go through via: it has not
			// learnt the owner yet.
			t.Fatalf("%s forwarded %v calls of clients that knew their owner, want at most the worker's first", via.id, got)
		}
		// The owner's actor counts what it decided, whichever node the
		// calls came through: the acks, answered, are counted there.
		for series, want := range map[string]float64{
			`flexiq_job_attempts_total{namespace="acme",outcome="completed"}`: 20,
			`flexiq_job_wait_seconds_count{namespace="acme"}`:                 20,
		} {
			if got, _ := c.metricIf(ownerNode, series); got != want {
				t.Errorf("%s on the owner %s = %v, want %v", series, ownerNode.id, got, want)
			}
			if got, ok := c.metricIf(via, series); ok {
				t.Errorf("%s on %s, which owns nothing of acme, = %v", series, via.id, got)
			}
		}
		// So are its actor's steps: only the owner's actor took the calls
		// (51 enqueues and 20 claims at least: a step is counted before
		// the next one begins, and each call waited for the one before).
		steps := `flexiq_actor_messages_total{namespace="acme"}`
		if got, _ := c.metricIf(ownerNode, steps); got < 71 {
			t.Errorf("%s on the owner %s = %v, want at least 71", steps, ownerNode.id, got)
		}
		if got, ok := c.metricIf(via, steps); ok {
			t.Errorf("%s on %s, which owns nothing of acme, = %v", steps, via.id, got)
		}
	})
}

// gRPC calls through a node that does not own the namespace reach its
// owner too: enqueue, claim, ack.
func TestClusterGRPCThroughAnotherNode(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		prod, work := c.token("acme", "producer"), c.token("acme", "worker")
		_, rest := c.ownerOf("acme", c.members)
		conn, err := grpc.NewClient(rest[0].grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		p, w := pb.NewProducerClient(conn), pb.NewWorkerClient(conn)
		if _, err := p.Enqueue(withToken(t, prod), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}}); err != nil {
			t.Fatalf("enqueue through %s: %v", rest[0].id, err)
		}
		got, err := w.Claim(withToken(t, work), &pb.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMs: 1000})
		if err != nil || len(got.GetJobs()) != 1 {
			t.Fatalf("claim through %s: %v %v", rest[0].id, got, err)
		}
		j := got.GetJobs()[0]
		if _, err := w.Ack(withToken(t, work), &pb.AckRequest{Id: j.GetId(), Attempt: j.GetAttempt()}); err != nil {
			t.Fatalf("ack through %s: %v", rest[0].id, err)
		}
	})
}

// BenchmarkClusterPropagation writes a quota 300 times on one node of three
// and reads, from the other two nodes' /metrics, how many broadcasts
// arrived within 0.25, 0.5 and 1 ms (flexiq_quota_propagation_seconds,
// measured on each receiver's clock; the nodes share this machine's).
//
//	go test -run '^$' -bench ClusterPropagation -benchtime 1x ./e2e
func BenchmarkClusterPropagation(b *testing.B) {
	b.Run("redis", func(b *testing.B) {
		c := startCluster(b, 3)
		admin := c.token("acme", "admin")
		for i := 0; i < 300; i++ {
			if st := c.do(c.members[0], "PUT", "/v1/quota", admin, fmt.Sprintf(`{"max_pending":%d}`, i+1), nil); st != 200 {
				b.Fatalf("put: %d", st)
			}
		}
		var within025, within05, within1, count float64
		for _, m := range c.members[1:] {
			req, _ := http.NewRequest("GET", "http://"+m.admin+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+clusterRoot)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(data), "\n") {
				var v float64
				switch {
				case strings.HasPrefix(line, `flexiq_quota_propagation_seconds_bucket{le="0.00025"}`):
					fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
					within025 += v
				case strings.HasPrefix(line, `flexiq_quota_propagation_seconds_bucket{le="0.0005"}`):
					fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
					within05 += v
				case strings.HasPrefix(line, `flexiq_quota_propagation_seconds_bucket{le="0.001"}`):
					fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
					within1 += v
				case strings.HasPrefix(line, `flexiq_quota_propagation_seconds_count`):
					fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
					count += v
				}
			}
		}
		if count == 0 {
			b.Fatal("no propagation observed")
		}
		b.ReportMetric(100*within025/count, "%<=0.25ms")
		b.ReportMetric(100*within05/count, "%<=0.5ms")
		b.ReportMetric(100*within1/count, "%<=1ms")
		b.ReportMetric(count, "broadcasts")
	})
}

// A gRPC worker on a node that does not own its namespace long-polls
// through it: that node asks the owner for the poll a second at a time
// (docs/protocol.md, fq.v1.claim). A poll the worker cancels takes no job,
// and the job goes to the next claim at its first attempt; a poll in
// flight when that node stops with SIGTERM is answered, with no job,
// rather than cut when the stop runs out of time.
func TestClusterForwardedGRPCLongPolls(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		prod, work := c.token("acme", "producer"), c.token("acme", "worker")
		_, others := c.ownerOf("acme", c.members)
		via := others[0]

		conn, sig := signalledConn(t, via.grpc)
		defer conn.Close()
		worker := pb.NewWorkerClient(conn)
		// seen returns once via has read every frame sent before it on
		// conn (a connection's frames are read in order).
		seen := func() {
			t.Helper()
			if _, err := healthgrpc.NewHealthClient(conn).Check(ctx(t), &healthgrpc.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		pollCtx, cancel := context.WithCancel(withToken(t, work))
		done := make(chan error, 1)
		go func() {
			_, err := worker.Claim(pollCtx, &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 30_000, LeaseMs: 60_000})
			done <- err
		}()
		<-sig.sent
		seen()
		cancel()
		if err := <-done; status.Code(err) != codes.Canceled {
			t.Fatalf("cancelled poll: %v", err)
		}
		seen()
		if _, err := pb.NewProducerClient(conn).Enqueue(withToken(t, prod), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}}); err != nil {
			t.Fatal(err)
		}
		resp, err := worker.Claim(withToken(t, work), &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 10_000, LeaseMs: 60_000})
		if err != nil || len(resp.GetJobs()) != 1 || resp.GetJobs()[0].GetAttempt() != 1 {
			t.Fatalf("the claim after a cancelled one: %v, %v; want the job at its first attempt; the nodes' logs:\n%s", resp, err, c.logs())
		}

		conn2, sig2 := signalledConn(t, via.grpc)
		defer conn2.Close()
		answered := make(chan error, 1)
		go func() {
			resp, err := pb.NewWorkerClient(conn2).Claim(withToken(t, work), &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 30_000, LeaseMs: 60_000})
			if err == nil && len(resp.GetJobs()) != 0 {
				err = fmt.Errorf("got jobs %v", resp.GetJobs())
			}
			answered <- err
		}()
		<-sig2.sent
		// via has read the poll by the time it answers this.
		if _, err := healthgrpc.NewHealthClient(conn2).Check(ctx(t), &healthgrpc.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		via.signal(syscall.SIGTERM)
		if err := <-answered; err != nil {
			t.Fatalf("a poll in flight when its node stopped: %v, want an answer with no job", err)
		}
	})
}

// A Go client on a node that does not own its namespace leaves a long
// poll (its context ends): the job the owner then hands to that poll comes
// back through the forwarding node to a client that has gone, which
// releases it, so the next claim gets it at its first attempt rather than
// after its lease.
func TestClusterNATSClaimLeftByItsCallerTakesNoJob(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		prod, work := c.token("acme", "producer"), c.token("acme", "worker")
		owner, others := c.ownerOf("acme", c.members)
		via := others[0]
		w, p := c.clients(work, via)[0], c.clients(prod, via)[0]

		pollCtx, cancel := context.WithCancel(context.Background())
		sent := w.Conn().Stats().OutMsgs
		done := make(chan error, 1)
		go func() {
			_, err := w.Claim(pollCtx, api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 60_000, LeaseMS: 60_000})
			done <- err
		}()
		for w.Conn().Stats().OutMsgs == sent {
			waitFor(time.Millisecond)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("the claim left: %v", err)
		}
		if _, err := p.Enqueue(ctx(t), job("q", "t")); err != nil {
			t.Fatal(err)
		}
		// The claim left behind takes the job: the owner counts it.
		claimed := `flexiq_jobs_claimed_total{namespace="acme"}`
		waitUntil(t, "the left claim takes the job", func() bool { v, _ := c.metricIf(owner, claimed); return v == 1 })
		jobs, err := w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 10_000, LeaseMS: 60_000})
		if err != nil || len(jobs) != 1 || jobs[0].Attempt != 1 {
			t.Fatalf("the next claim: %+v, %v; want the job at its first attempt; the nodes' logs:\n%s", jobs, err, c.logs())
		}
	})
}

// A long poll whose client's connection closes while it waits (its
// process exited) takes no job, though nothing told the owner: before
// trying it again the owner asks its server whether anybody still listens
// on the claim's reply subject, and the routes carry that from the node
// the client was on. The job goes to the next claim at its first attempt.
func TestClusterNATSClaimOfAClosedConnectionTakesNoJob(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		prod, work := c.token("acme", "producer"), c.token("acme", "worker")
		owner, others := c.ownerOf("acme", c.members)
		via := others[0]

		gone, err := nats.Connect(via.natsURL(), client.ConnectOptions(work)...)
		if err != nil {
			t.Fatal(err)
		}
		defer gone.Close()
		claim := func(waitMS int) (*nats.Subscription, string) {
			t.Helper()
			inbox := gone.NewInbox()
			sub, err := gone.SubscribeSync(inbox)
			if err != nil {
				t.Fatal(err)
			}
			m := &nats.Msg{Subject: api.SubjectClaim, Reply: inbox, Header: nats.Header{},
				Data: fmt.Appendf(nil, `{"queues":["q"],"max":1,"wait_ms":%d,"lease_ms":60000}`, waitMS)}
			m.Header.Set(api.HeaderAuthorization, "Bearer "+work)
			if err := gone.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
			return sub, inbox
		}
		_, parked := claim(60_000)
		// A claim sent after it on the same connection takes the same
		// path to the owner's actor: once it is answered, the first is
		// parked there.
		answer, _ := claim(0)
		if m, err := answer.NextMsg(20 * time.Second); err != nil || string(m.Data) != `{"jobs":[]}` {
			t.Fatalf("the claim behind the parked one: %v, %v", m, err)
		}
		gone.Close()
		// Wait until the owner's server has heard, through the routes,
		// that nobody listens on the parked claim's reply subject: a
		// request there then gets "no responders".
		spy, err := nats.Connect(owner.natsURL(), nats.Token(clusterSecret))
		if err != nil {
			t.Fatal(err)
		}
		defer spy.Close()
		waitUntil(t, "the owner's server forgets the closed connection's inbox", func() bool {
			_, err := spy.Request(parked, nil, time.Second)
			return errors.Is(err, nats.ErrNoResponders)
		})

		p, w := c.clients(prod, via)[0], c.clients(work, via)[0]
		// The worker's connection is new: until the owner's server has
		// heard of its inbox through the routes, a reply to it would be
		// lost there. The node holds its claim until then
		// (docs/protocol.md, fq.v1.claim), so nothing waits for it here.
		if _, err := p.Enqueue(ctx(t), job("q", "t")); err != nil {
			t.Fatal(err)
		}
		jobs, err := w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 10_000, LeaseMS: 60_000})
		if err != nil || len(jobs) != 1 || jobs[0].Attempt != 1 {
			t.Fatalf("the next claim: %+v, %v; want the job at its first attempt; the nodes' logs:\n%s", jobs, err, c.logs())
		}
		if n := c.metric(owner, `flexiq_jobs_claimed_total{namespace="acme"}`); n != 1 {
			t.Fatalf("the owner handed out %v jobs, want 1: the closed connection's claim took one", n)
		}
	})
}
