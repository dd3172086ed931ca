package bus

import (
	"context"
	"fmt"
	"strings"
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
// test's namespace.
type placement struct {
	mu      sync.Mutex
	owner   string
	changed chan struct{}
}

func newPlacement(owner string) *placement {
	return &placement{owner: owner, changed: make(chan struct{})}
}

// move gives the namespace to owner and tells every node.
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
	// left is closed when the node leaves (nil: it never does).
	left chan struct{}
}

func newView(p *placement, node string) view {
	return view{p: p, node: node, left: make(chan struct{})}
}

// leave marks the node leaving the cluster, as cluster.Cluster.Leave does.
func (v view) leave() { close(v.left) }

func (v view) Leaving() <-chan struct{} { return v.left }

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

func (v view) Kick() {}

// countingActors answers every call at once, counts them and keeps the
// last.
type countingActors struct {
	n    atomic.Int64
	mu   sync.Mutex
	last *actors.Message
}

func (a *countingActors) Send(_ string, m *actors.Message) {
	a.n.Add(1)
	a.mu.Lock()
	a.last = m
	a.mu.Unlock()
	m.Reply(api.EnqueueReply{Results: []api.EnqueueResult{{ID: "j", Outcome: api.OutcomeEnqueued}}}, nil)
}

// lastMessage is the last call it took.
func (a *countingActors) lastMessage() *actors.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

type headerAuth struct{}

func (headerAuth) Authenticate(_ context.Context, h string) (auth.Principal, *api.Error) {
	if h != "Bearer "+producerTok {
		return auth.Principal{}, api.Unauthenticated()
	}
	return auth.Principal{TokenID: "tok_p", Namespace: "acme", Role: auth.RoleProducer}, nil
}

type ownerNode struct {
	id     string
	svc    *Service
	actors *countingActors
	nc     *nats.Conn
	view   view
}

// subject is the node's owner subject for enqueue.
func (n *ownerNode) subject() string {
	return api.SubjectOwner(api.OwnerToken(n.id), api.SubjectEnqueue)
}

func startOwnerNode(t *testing.T, b *authBus, id string, p *placement) *ownerNode {
	t.Helper()
	nc, err := Connect(ConnectOptions{Server: b.srv, Name: id, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a := &countingActors{}
	v := newView(p, id)
	svc, err := NewService(context.Background(), nc, id, a, headerAuth{}, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = svc.Stop(context.Background())
		_ = svc.StopDirect(context.Background())
	})
	n := &ownerNode{id: id, svc: svc, actors: a, nc: nc, view: v}
	// Other nodes forward to it only once their server knows it listens.
	waitListening(t, b, api.SubjectForward(id), true)
	waitListening(t, b, n.subject(), true)
	return n
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

// enqueuer makes calls through a client.
func enqueuer(t *testing.T, c *client.Client) func(n int) {
	return func(n int) {
		t.Helper()
		for range n {
			if _, err := c.Enqueue(context.Background(), api.Job{Queue: "q", Task: "t"}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Once the owner has named itself, a client's calls go straight to it: no
// node forwards them. When the namespace moves, the next call still lands
// (the old owner forwards it, and the reply names the new owner) and the
// calls after it go straight to the new owner.
func TestCallsGoStraightToTheOwner(t *testing.T) {
	b := startAuthBus(t)
	// The auth bus's own node answers plain enqueues with "ok"; this test
	// has its own nodes.
	b.node.Close()
	p := newPlacement("n1")
	n1 := startOwnerNode(t, b, "n1", p)
	n2 := startOwnerNode(t, b, "n2", p)

	c, err := client.Connect(b.srv.ClientURL(), producerTok, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	enqueue := enqueuer(t, c)
	enqueue(1) // learns the owner, through n2 or not
	goesStraightTo(t, enqueue, n1, n2)

	// The namespace moves to n2: n1 forwards the next call, whose reply
	// names n2.
	p.move("n2")
	before := n1.svc.Forwarded()
	enqueue(1)
	if got := n1.svc.Forwarded() - before; got != 1 {
		t.Fatalf("n1 forwarded %d calls right after the move, want 1", got)
	}
	goesStraightTo(t, enqueue, n2, n1)

	// No node holds it: the call waits at n2 for an owner (here it is
	// given one).
	p.move("")
	done := make(chan error, 1)
	go func() {
		_, err := c.Enqueue(context.Background(), api.Job{Queue: "q", Task: "t"})
		done <- err
	}()
	waitParked(t, n1, n2)
	p.move("n1")
	if err := <-done; err != nil {
		t.Fatalf("a call made while no node held its namespace: %v", err)
	}
	if got := n1.actors.n.Load(); got != 52 {
		t.Fatalf("n1 served %d calls, want 52", got)
	}
}

// goesStraightTo checks that 50 calls all reach owner, and that other
// forwards none of them.
func goesStraightTo(t *testing.T, enqueue func(int), owner, other *ownerNode) {
	t.Helper()
	served, forwarded := owner.actors.n.Load(), other.svc.Forwarded()
	enqueue(50)
	if got := owner.actors.n.Load() - served; got != 50 {
		t.Fatalf("owner %s served %d of 50 calls", owner.id, got)
	}
	if got := other.svc.Forwarded() - forwarded; got != 0 {
		t.Fatalf("%s forwarded %d calls after the owner named itself, want 0", other.id, got)
	}
}

// waitParked waits until one of the nodes holds a call waiting for an
// owner.
func waitParked(t *testing.T, nodes ...*ownerNode) {
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

// An owner subject names only where the client expects the owner: a node
// that takes a call there for a namespace it does not own forwards it, and
// the reply names the owner.
func TestAnOwnerSubjectIsOnlyAHint(t *testing.T) {
	b := startAuthBus(t)
	b.node.Close()
	p := newPlacement("n1")
	n1 := startOwnerNode(t, b, "n1", p)
	n2 := startOwnerNode(t, b, "n2", p)
	nc, _ := b.connect(t, producerTok)
	msg := &nats.Msg{Subject: n2.subject(), Data: []byte(`{"jobs":[{"queue":"q","task":"t"}]}`), Header: nats.Header{}}
	msg.Header.Set(api.HeaderAuthorization, "Bearer "+producerTok)
	reply, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := reply.Header.Get(api.HeaderOwner), api.OwnerToken("n1"); got != want {
		t.Fatalf("reply names owner %q, want %q (n1)", got, want)
	}
	if n1.actors.n.Load() != 1 || n2.actors.n.Load() != 0 || n2.svc.Forwarded() != 1 {
		t.Fatalf("n1 served %d, n2 served %d and forwarded %d; want 1, 0, 1", n1.actors.n.Load(), n2.actors.n.Load(), n2.svc.Forwarded())
	}
}

// fakeNow is a clock the test moves.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// A node that gave its namespaces up keeps taking the calls sent straight
// to it, and passes them on, until they fall quiet; only then does it
// stop listening (a call on its way when the servers forget the subject
// would be dropped unanswered). After that a call there gets no
// responders and the client sends it again on the plain subject.
func TestStopDirectWaitsUntilDirectCallsFallQuiet(t *testing.T) {
	b := startAuthBus(t)
	b.node.Close()
	p := newPlacement("n1")
	n1 := startOwnerNode(t, b, "n1", p)
	n2 := startOwnerNode(t, b, "n2", p)
	clock := &fakeNow{t: time.Unix(1_000_000, 0)}
	n1.svc.now = clock.now

	// A client that knows n1 as the owner, and one that sends to n1's
	// subject whatever the replies say (a call already on its way).
	c, err := client.Connect(b.srv.ClientURL(), producerTok, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	enqueuer(t, c)(1)
	raw, _ := b.connect(t, producerTok)
	send := func(owner string) {
		t.Helper()
		msg := &nats.Msg{Subject: n1.subject(), Data: []byte(`{"jobs":[{"queue":"q","task":"t"}]}`), Header: nats.Header{}}
		msg.Header.Set(api.HeaderAuthorization, "Bearer "+producerTok)
		reply, err := raw.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatalf("a call sent straight to n1: %v", err)
		}
		if got, want := reply.Header.Get(api.HeaderOwner), api.OwnerToken(owner); got != want {
			t.Fatalf("reply names owner %q, want %q (%s)", got, want, owner)
		}
	}
	send("n1")

	// n1 leaves: its namespace moves to n2, and it stops.
	p.move("n2")
	if err := n1.svc.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- n1.svc.StopDirect(context.Background()) }()
	// A call every half quiet period, within directQuietMax.
	calls := int(directQuietMax/(directQuiet/2)) - 2
	for i := range calls {
		send("n2")
		clock.add(directQuiet / 2) // never quiet long enough
		select {
		case err := <-stopped:
			t.Fatalf("n1 stopped listening after %d of %d calls sent straight to it (%v)", i+1, calls, err)
		default:
		}
	}
	if got := n1.svc.Forwarded(); got != int64(calls) {
		t.Fatalf("n1 forwarded %d calls while stopping, want %d", got, calls)
	}
	clock.add(directQuiet)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	waitListening(t, b, n1.subject(), false)

	// The client still names n1: no responders there, so the call goes
	// out again on the plain subject, to n2.
	before := n2.actors.n.Load()
	enqueuer(t, c)(1)
	if got := n2.actors.n.Load() - before; got != 1 {
		t.Fatalf("n2 served %d calls after n1 stopped listening, want 1", got)
	}
}

// directQuietMax bounds the wait: a node whose subject never falls quiet
// still stops.
func TestStopDirectWaitsAtMostDirectQuietMax(t *testing.T) {
	b := startAuthBus(t)
	b.node.Close()
	p := newPlacement("n2")
	n1 := startOwnerNode(t, b, "n1", p)
	startOwnerNode(t, b, "n2", p)
	clock := &fakeNow{t: time.Unix(1_000_000, 0)}
	n1.svc.now = clock.now
	// A call has just come when the stop begins (else a stop that looks
	// before the loop's first call sees quiet and stops at once).
	n1.svc.lastDirect.Store(clock.now().UnixNano())
	stopped := make(chan error, 1)
	go func() { stopped <- n1.svc.StopDirect(context.Background()) }()
	// A call comes every half quiet period, for ever: n1 stops anyway,
	// once directQuietMax has passed.
	var waited time.Duration
	for done := false; !done; {
		n1.svc.lastDirect.Store(clock.now().UnixNano())
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		case <-time.After(20 * time.Millisecond): // longer than StopDirect's poll
			clock.add(directQuiet / 2)
			waited += directQuiet / 2
		}
	}
	if waited < directQuietMax {
		t.Fatalf("n1 stopped listening after %v of calls, before directQuietMax (%v)", waited, directQuietMax)
	}
	waitListening(t, b, n1.subject(), false)
}

func TestOwnerSubjects(t *testing.T) {
	tok := api.OwnerToken("n1")
	if !api.ValidOwnerToken(tok) {
		t.Fatalf("OwnerToken(n1) = %q is not valid", tok)
	}
	for _, subject := range api.RequestSubjects {
		s := api.SubjectOwner(tok, subject)
		got, back, ok := api.ParseOwnerSubject(s)
		if !ok || got != tok || back != subject {
			t.Fatalf("%s: parsed %q %q %v", s, got, back, ok)
		}
	}
	for _, bad := range []string{"fq.v1.enqueue", "fq.v1.o.", "fq.v1.o.x.enqueue", "fq.v1.o." + tok, "fq.v1.o." + tok + ".",
		"fq.v1.o.0123456789ABCDEF.enqueue", "fq.v1.o.0123456789abcde.enqueue", "fq.v1.o.0123456789abcdef0.enqueue", "fq.v1.o.*.enqueue", "fq.v1.o.>"} {
		if _, _, ok := api.ParseOwnerSubject(bad); ok {
			t.Fatalf("%s parsed", bad)
		}
	}
}

// A node that is leaving (Router.Leaving) passes a call for a namespace it gave up
// to the next owner at once, marked so that the next owner, which still
// sees the leaving node holding it, waits for its placement to move on
// rather than send the call back.
func TestALeavingNodesCallsWaitAtTheNextOwner(t *testing.T) {
	b := startAuthBus(t)
	b.node.Close()
	p1, p2 := newPlacement("n2"), newPlacement("n1") // n2 lags behind
	n1 := startOwnerNode(t, b, "n1", p1)
	n2 := startOwnerNode(t, b, "n2", p2)
	n1.view.leave()
	raw, _ := b.connect(t, producerTok)
	msg := &nats.Msg{Subject: n1.subject(), Data: []byte(`{"jobs":[{"queue":"q","task":"t"}]}`), Header: nats.Header{}}
	msg.Header.Set(api.HeaderAuthorization, "Bearer "+producerTok)
	done := make(chan error, 1)
	go func() {
		reply, err := raw.RequestMsg(msg, 10*time.Second)
		if err == nil && reply.Header.Get(api.HeaderOwner) != api.OwnerToken("n2") {
			err = fmt.Errorf("answered by %q, want n2", reply.Header.Get(api.HeaderOwner))
		}
		done <- err
	}()
	waitParked(t, n2)
	if n1.svc.Forwarded() != 1 || n2.svc.Forwarded() != 0 {
		t.Fatalf("n1 forwarded %d, n2 %d; want 1 and none back", n1.svc.Forwarded(), n2.svc.Forwarded())
	}
	p2.move("n2") // n2 takes the namespace
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n2.actors.n.Load() != 1 || n1.actors.n.Load() != 0 {
		t.Fatalf("n1 served %d, n2 %d; want n2 to serve it", n1.actors.n.Load(), n2.actors.n.Load())
	}
}

// ticking moves each placement to the owner it already names, again and
// again, as a cluster's ticks do, until the test ends.
func ticking(t *testing.T, ps map[*placement]string) {
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for p, owner := range ps {
					p.move(owner)
				}
			}
		}
	}()
}

// Two nodes that keep disagreeing (each sees the other as the owner) while
// their placement keeps moving send a call back and forth, and it waits at
// each between rounds: its wait for an owner goes with it (Fq-Owner-Within),
// so once parkFor is spent in all it is refused UNAVAILABLE, rather than
// bouncing, a new wait at each node, until its caller gives up.
func TestAForwardedCallsWaitForAnOwnerIsBoundedAcrossNodes(t *testing.T) {
	t.Parallel()
	b := startAuthBus(t)
	b.node.Close()
	p1, p2 := newPlacement("n2"), newPlacement("n1")
	n1 := startOwnerNode(t, b, "n1", p1)
	n2 := startOwnerNode(t, b, "n2", p2)
	ticking(t, map[*placement]string{p1: "n2", p2: "n1"})
	raw, _ := b.connect(t, producerTok)
	msg := &nats.Msg{Subject: api.SubjectEnqueue, Data: []byte(`{"jobs":[{"queue":"q","task":"t"}]}`), Header: nats.Header{}}
	msg.Header.Set(api.HeaderAuthorization, "Bearer "+producerTok)
	reply, err := raw.RequestMsg(msg, 4*parkFor)
	if err != nil {
		t.Fatalf("no answer in %v (forwarded %d times): %v", 4*parkFor, n1.svc.Forwarded()+n2.svc.Forwarded(), err)
	}
	if code := reply.Header.Get(api.HeaderErrorCode); code != "503" || !strings.Contains(string(reply.Data), "no node holds namespace") {
		t.Fatalf("answered %q %s; want 503, no node holds the namespace", code, reply.Data)
	}
	if f := n1.svc.Forwarded() + n2.svc.Forwarded(); f <= 2*maxHops {
		t.Fatalf("forwarded %d times: the call did not go round", f)
	}
	if n1.actors.n.Load()+n2.actors.n.Load() != 0 {
		t.Fatal("an actor took the call")
	}
}
