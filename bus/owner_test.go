package bus

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/client"
)

// placement is a Router every node of the test shares: one owner for the
// one partition the test's namespace is on.
type placement struct {
	mu      sync.Mutex
	owner   string
	changed chan struct{}
}

const testPartition = 5

func newPlacement(owner string) *placement {
	return &placement{owner: owner, changed: make(chan struct{})}
}

// move gives the partition to owner and tells every node.
func (p *placement) move(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.owner = owner
	close(p.changed)
	p.changed = make(chan struct{})
}

// view is one node's side of the placement.
type view struct {
	p    *placement
	node string
	// extra are partitions the node listens on besides the test's.
	extra []int
}

func (v view) Owner(string) (string, bool) {
	v.p.mu.Lock()
	defer v.p.mu.Unlock()
	return v.p.owner, v.p.owner == v.node
}

func (v view) Changed() <-chan struct{} {
	v.p.mu.Lock()
	defer v.p.mu.Unlock()
	return v.p.changed
}

func (v view) Kick()                {}
func (v view) Partition(string) int { return testPartition }
func (v view) Partitions() []int {
	if _, mine := v.Owner(""); mine {
		return append([]int{testPartition}, v.extra...)
	}
	return v.extra
}

// countingActors answers every call at once and counts them.
type countingActors struct{ n atomic.Int64 }

func (a *countingActors) Send(_ string, m *actors.Message) {
	a.n.Add(1)
	m.Reply(api.EnqueueReply{Results: []api.EnqueueResult{{ID: "j", Outcome: api.OutcomeEnqueued}}}, nil)
}

type headerAuth struct{}

func (headerAuth) Authenticate(_ context.Context, h string) (auth.Principal, *api.Error) {
	if h != "Bearer "+producerTok {
		return auth.Principal{}, api.Unauthenticated()
	}
	return auth.Principal{TokenID: "tok_p", Namespace: "acme", Role: auth.RoleProducer}, nil
}

type partitionNode struct {
	svc    *Service
	actors *countingActors
	nc     *nats.Conn
}

// holds waits until the node listens on the test partition's subjects
// (or no longer does) and the server has seen it.
func (n *partitionNode) holds(t *testing.T, want bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.svc.pmu.Lock()
		_, got := n.svc.psubs[testPartition]
		n.svc.pmu.Unlock()
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node's partition subscription: %v, want %v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func startPartitionNode(t *testing.T, b *authBus, id string, p *placement, extra ...int) *partitionNode {
	t.Helper()
	nc, err := Connect(ConnectOptions{Server: b.srv, Name: id, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a := &countingActors{}
	svc, err := NewService(context.Background(), nc, id, a, headerAuth{}, view{p: p, node: id, extra: extra}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	return &partitionNode{svc: svc, actors: a, nc: nc}
}

// waitListening waits until someone takes subject on the server.
func waitListening(t *testing.T, b *authBus, subject string, want bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.srv.GlobalAccount().SubscriptionInterest(subject) != want {
		if time.Now().After(deadline) {
			t.Fatalf("interest in %s never became %v", subject, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Once the owner has named its partition, a client's calls go straight to
// it: no node forwards them. When the partition moves, the next call still
// lands (forwarded by the old owner, or sent again on the plain subject
// when nobody listens) and the calls after it go straight to the new
// owner.
func TestCallsGoStraightToThePartitionOwner(t *testing.T) {
	b := startAuthBus(t)
	// The auth bus's own node answers plain enqueues with "ok"; this test
	// has its own nodes.
	b.node.Close()
	p := newPlacement("n1")
	n1 := startPartitionNode(t, b, "n1", p)
	n2 := startPartitionNode(t, b, "n2", p)
	subject := api.SubjectPartition(testPartition, api.SubjectEnqueue)
	waitListening(t, b, subject, true)

	c, err := client.Connect(b.srv.ClientURL(), producerTok, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	enqueue := func(n int) {
		t.Helper()
		for range n {
			if _, err := c.Enqueue(context.Background(), api.Job{Queue: "q", Task: "t"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(1) // learns the partition, through n2 or not
	before := n2.svc.Forwarded()
	enqueue(50)
	if got := n1.actors.n.Load(); got != 51 {
		t.Fatalf("owner n1 served %d calls, want 51", got)
	}
	if got := n2.svc.Forwarded() - before; got != 0 {
		t.Fatalf("n2 forwarded %d calls after the owner named its partition, want 0", got)
	}

	// The partition moves to n2: n1 stops listening on its subject.
	p.move("n2")
	n1.holds(t, false)
	n2.holds(t, true)
	enqueue(1)
	before = n1.svc.Forwarded()
	enqueue(50)
	if got := n2.actors.n.Load(); got != 51 {
		t.Fatalf("new owner n2 served %d calls, want 51", got)
	}
	if got := n1.svc.Forwarded() - before; got != 0 {
		t.Fatalf("n1 forwarded %d calls after the move, want 0", got)
	}

	// No node holds it: nobody listens on the partition subject, and a
	// call falls back to the plain subject (and waits there for an owner;
	// here it is given one).
	p.move("")
	waitListening(t, b, subject, false)
	done := make(chan error, 1)
	go func() {
		_, err := c.Enqueue(context.Background(), api.Job{Queue: "q", Task: "t"})
		done <- err
	}()
	waitParked(t, n1, n2)
	p.move("n1")
	if err := <-done; err != nil {
		t.Fatalf("a call made while no node held its partition: %v", err)
	}
	if got := n1.actors.n.Load(); got != 52 {
		t.Fatalf("n1 served %d calls, want 52", got)
	}
}

// waitParked waits until one of the nodes holds a call waiting for an
// owner.
func waitParked(t *testing.T, nodes ...*partitionNode) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, n := range nodes {
			if n.svc.Inflight() > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no node parked the call")
		}
		time.Sleep(time.Millisecond)
	}
}

// A partition subject names only where the client expects the owner: a
// node that takes one for a namespace it does not own forwards it.
func TestAPartitionSubjectIsOnlyAHint(t *testing.T) {
	b := startAuthBus(t)
	b.node.Close()
	p := newPlacement("n1")
	n1 := startPartitionNode(t, b, "n1", p)
	// n2 listens on partition 9's subjects, though acme is not there.
	n2 := startPartitionNode(t, b, "n2", p, 9)
	waitListening(t, b, api.SubjectPartition(testPartition, api.SubjectEnqueue), true)
	waitListening(t, b, api.SubjectPartition(9, api.SubjectEnqueue), true)
	nc, _ := b.connect(t, producerTok)
	msg := &nats.Msg{Subject: api.SubjectPartition(9, api.SubjectEnqueue), Data: []byte(`{"jobs":[{"queue":"q","task":"t"}]}`), Header: nats.Header{}}
	msg.Header.Set(api.HeaderAuthorization, "Bearer "+producerTok)
	reply, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := reply.Header.Get(api.HeaderPartition); got != "5" {
		t.Fatalf("reply names partition %q, want 5", got)
	}
	if n1.actors.n.Load() != 1 || n2.actors.n.Load() != 0 || n2.svc.Forwarded() != 1 {
		t.Fatalf("n1 served %d, n2 served %d and forwarded %d; want 1, 0, 1", n1.actors.n.Load(), n2.actors.n.Load(), n2.svc.Forwarded())
	}
}

func TestPartitionSubjects(t *testing.T) {
	for _, subject := range api.RequestSubjects {
		s := api.SubjectPartition(63, subject)
		p, back, ok := api.ParsePartitionSubject(s)
		if !ok || p != 63 || back != subject {
			t.Fatalf("%s: parsed %d %q %v", s, p, back, ok)
		}
	}
	for _, bad := range []string{"fq.v1.enqueue", "fq.v1.p.", "fq.v1.p.x.enqueue", "fq.v1.p.-1.enqueue", "fq.v1.p.1024.enqueue", "fq.v1.p.00001.enqueue", "fq.v1.p.3"} {
		if _, _, ok := api.ParsePartitionSubject(bad); ok {
			t.Fatalf("%s parsed", bad)
		}
	}
}
