package bus

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
)

// A node's own call forwarded to the namespace's owner keeps what the
// owner's actor needs to pace its refusal: that it is a client's call
// (gRPC), and how long its caller still waits.
func TestInternalOpsCarryPaceAndDeadline(t *testing.T) {
	b := startAuthBus(t)
	conn := func(id string) *nats.Conn {
		nc, err := Connect(ConnectOptions{Server: b.srv, Name: id, Secret: testSecret})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	owner := &countingActors{}
	sub, err := ServeInternalOps(conn("n2"), "n2", owner, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	waitListening(t, b, api.SubjectInternalOp("n2"), true)
	rs := &RoutedSender{NC: conn("n1"), Local: &countingActors{}, Router: view{p: newPlacement("n2"), node: "n1"}}

	send := func(m *actors.Message) *actors.Message {
		t.Helper()
		answered := make(chan *api.Error, 1)
		m.Op, m.Body = actors.OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}}
		m.Reply = func(_ any, e *api.Error) { answered <- e }
		rs.Send("acme", m)
		if e := <-answered; e != nil {
			t.Fatal(e)
		}
		return owner.lastMessage()
	}
	by := time.Now().Add(3 * time.Second)
	got := send(&actors.Message{Paced: true, AnswerBy: by})
	if !got.Paced || got.AnswerBy.Before(by.Add(-time.Second)) || got.AnswerBy.After(by.Add(time.Second)) {
		t.Fatalf("the owner's actor got paced %v, answer by %v from now; want true, about 3 s", got.Paced, time.Until(got.AnswerBy))
	}
	if got := send(&actors.Message{}); got.Paced || !got.AnswerBy.IsZero() {
		t.Fatalf("the node's own call reached the owner as paced %v, answer by %v; want neither", got.Paced, got.AnswerBy)
	}
}

// routedNode is a node's RoutedSender, with its internal calls served.
type routedNode struct {
	rs    *RoutedSender
	local *countingActors
	// received counts the calls other nodes sent it.
	received atomic.Int64
	// seen is how many blocked waits waitParked has seen.
	seen int64
}

// countingSender counts what it passes on.
type countingSender struct {
	n    *atomic.Int64
	next Sender
}

func (c countingSender) Send(ns string, m *actors.Message) { c.n.Add(1); c.next.Send(ns, m) }

func startRoutedNode(t *testing.T, b *authBus, id string, p *placement) *routedNode {
	t.Helper()
	return startRoutedNodeWith(t, b, id, p, nil)
}

// startRoutedNodeWith is startRoutedNode with local as its actors (nil:
// countingActors, which served counts).
func startRoutedNodeWith(t *testing.T, b *authBus, id string, p *placement, local Sender) *routedNode {
	t.Helper()
	nc, err := Connect(ConnectOptions{Server: b.srv, Name: id, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	n := &routedNode{local: &countingActors{}}
	if local == nil {
		local = n.local
	}
	n.rs = &RoutedSender{Node: id, NC: nc, Local: local, Router: newView(p, id),
		Interest: b.srv.GlobalAccount().SubscriptionInterest}
	// As on a node: calls from other nodes are routed again.
	sub, err := ServeInternalOps(nc, id, countingSender{&n.received, n.rs}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	waitListening(t, b, api.SubjectInternalOp(id), true)
	return n
}

// waitParked waits until a call's wait for an owner on n blocks (once
// more than before).
func (n *routedNode) waitParked(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.rs.blocked.Load() <= n.seen {
		if time.Now().After(deadline) {
			t.Fatal("no call waits for an owner")
		}
		time.Sleep(time.Millisecond)
	}
	n.seen = n.rs.blocked.Load()
}

func (n *routedNode) served() int { return int(n.local.n.Load()) }

// sendVia sends an enqueue through rs and returns where its answer comes.
func sendVia(rs interface {
	Send(string, *actors.Message)
}, hops int) <-chan *api.Error {
	answered := make(chan *api.Error, 1)
	rs.Send("acme", &actors.Message{Op: actors.OpEnqueue, Hops: hops,
		Body:  &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}},
		Reply: func(_ any, e *api.Error) { answered <- e }})
	return answered
}

func answeredOK(t *testing.T, ch <-chan *api.Error) {
	t.Helper()
	if e := <-ch; e != nil {
		t.Fatal(e)
	}
}

// A node's own call (gRPC, the admin door, periodic fires) waits for the
// namespace's owner while no node can take it, as a client's call on the
// bus does, and goes where the placement settles. A node that takes a
// call for a namespace it does not own routes it again, at most maxHops
// times, then waits.
func TestRoutedCallsWaitForTheOwner(t *testing.T) {
	b := startAuthBus(t)
	p := newPlacement("")
	n1, n2 := startRoutedNode(t, b, "n1", p), startRoutedNode(t, b, "n2", p)

	waiting := sendVia(n1.rs, 0)
	n1.waitParked(t)
	p.move("n2")
	answeredOK(t, waiting)
	if n2.served() != 1 || n1.served() != 0 {
		t.Fatalf("n1 served %d, n2 %d; want the owner n2 to serve it", n1.served(), n2.served())
	}

	// Handed on maxHops times already: it waits, even with an owner to go
	// to, until this node owns the namespace.
	waiting = sendVia(n1.rs, maxHops)
	n1.waitParked(t)
	p.move("n1")
	answeredOK(t, waiting)
	if n1.served() != 1 {
		t.Fatalf("n1 served %d, want the call that waited for it", n1.served())
	}
	// Once the placement moved on, it may be handed on again.
	p.move("n2")
	waiting = sendVia(n1.rs, maxHops)
	n1.waitParked(t)
	if n2.served() != 1 {
		t.Fatalf("a call handed on %d times went on before the placement moved on", maxHops)
	}
	p.move("n2") // a placement round: the owner is the same
	answeredOK(t, waiting)
	if n2.served() != 2 {
		t.Fatalf("n2 served %d, want the call forwarded after the round", n2.served())
	}
	p.move("n1")

	// A call sent by a node that still names n2 the owner (n3's stale
	// view) reaches n2's internal subject and is routed on to n1.
	stale := &RoutedSender{Node: "n3", NC: n2.rs.NC, Local: &countingActors{}, Router: view{p: newPlacement("n2"), node: "n3"}}
	answeredOK(t, sendVia(stale, 0))
	if n1.served() != 2 || n2.served() != 2 {
		t.Fatalf("n1 served %d, n2 %d; want the call routed on to n1", n1.served(), n2.served())
	}
}

// HandOff passes a stopped node's call to a live owner, and only then.
// The owner, which may not hold the namespace yet and still see the
// stopped node as its owner, waits for its placement to move on rather
// than send the call back.
func TestHandOffGoesOnlyToALiveOwner(t *testing.T) {
	b := startAuthBus(t)
	p := newPlacement("n2")
	n1, n2 := startRoutedNode(t, b, "n1", p), startRoutedNode(t, b, "n2", p)
	handOff := func(hops int) (bool, <-chan *api.Error) {
		answered := make(chan *api.Error, 1)
		ok := n1.rs.HandOff("acme", &actors.Message{Op: actors.OpEnqueue, Hops: hops,
			Body:  &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}},
			Reply: func(_ any, e *api.Error) { answered <- e }})
		return ok, answered
	}
	ok, answered := handOff(0)
	if !ok {
		t.Fatal("no hand-off to the live owner n2")
	}
	answeredOK(t, answered)
	if n2.served() != 1 {
		t.Fatalf("n2 served %d, want the handed-off call", n2.served())
	}
	p.move("n1")
	if ok, _ := handOff(0); ok {
		t.Error("handed off to itself")
	}
	p.move("n3") // a node nobody hears
	if ok, _ := handOff(0); ok {
		t.Error("handed off to a node that is not there")
	}

	// n1 has left and sees n2 as the owner; n2 still sees n1.
	n1.rs.Router = view{p: newPlacement("n2"), node: "n1"}
	p2 := newPlacement("n1")
	n2.rs.Router = view{p: p2, node: "n2"}
	ok, answered = handOff(0)
	if !ok {
		t.Fatal("no hand-off to n2")
	}
	select {
	case e := <-answered:
		t.Fatalf("answered (%v) before n2 held the namespace: sent back to n1?", e)
	default:
	}
	n2.waitParked(t)
	p2.move("n2")
	answeredOK(t, answered)
	if n2.served() != 2 || n1.served() != 0 || n1.received.Load() != 0 {
		t.Fatalf("n1 served %d and got %d back, n2 served %d; want n2 to serve the handed-off call, none back", n1.served(), n1.received.Load(), n2.served())
	}
}

// A leaving node's sender (Router.Leaving) passes a call on to the next owner at
// once, marked to wait there, and waits for nothing itself.
func TestALeavingNodesRoutedCallsWaitAtTheNextOwner(t *testing.T) {
	b := startAuthBus(t)
	p1, p2 := newPlacement("n2"), newPlacement("n1") // n2 lags behind
	n1, n2 := startRoutedNode(t, b, "n1", p1), startRoutedNode(t, b, "n2", p2)
	n1.rs.Router.(view).leave()
	waiting := sendVia(n1.rs, 0)
	n2.waitParked(t)
	p2.move("n2")
	answeredOK(t, waiting)
	if n2.served() != 1 || n1.served() != 0 || n1.received.Load() != 0 {
		t.Fatalf("n1 served %d and got %d back, n2 served %d; want n2 to serve it, none back", n1.served(), n1.received.Load(), n2.served())
	}
	// With no other node to go to, it does not wait: its stopped actors
	// answer.
	p1.move("")
	answered := sendVia(n1.rs, 0)
	if n1.served() != 1 { // handed to them within Send, not after a wait
		t.Fatalf("n1 served %d, want its local actors to take it at once", n1.served())
	}
	answeredOK(t, answered)
}

// heldActors answer a call only when the test lets them.
type heldActors struct{ release chan struct{} }

func (a heldActors) Send(_ string, m *actors.Message) {
	go func() {
		<-a.release
		m.Reply(api.EnqueueReply{Results: []api.EnqueueResult{{ID: "j", Outcome: api.OutcomeEnqueued}}}, nil)
	}()
}

// Wait (a stopping node, before it closes its connection) returns once the
// calls it passed to other nodes are answered, or when ctx ends.
func TestRoutedSenderWaitsForTheAnswersOfItsCalls(t *testing.T) {
	b := startAuthBus(t)
	p := newPlacement("n2")
	n1 := startRoutedNode(t, b, "n1", p)
	nc, err := Connect(ConnectOptions{Server: b.srv, Name: "n2", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	owner := heldActors{release: make(chan struct{})}
	sub, err := ServeInternalOps(nc, "n2", owner, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	waitListening(t, b, api.SubjectInternalOp("n2"), true)

	answered := sendVia(n1.rs, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n1.rs.Wait(ctx); err == nil {
		t.Fatal("Wait returned while a call it passed on was unanswered")
	}
	close(owner.release)
	answeredOK(t, answered)
	if err := n1.rs.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A node's own call between two nodes that keep disagreeing goes back and
// forth with its wait for an owner (owner_within_ms): once parkFor is
// spent in all, the actors of the node it is on answer it (on a node:
// "moving between nodes"), instead of a new wait at each node it reaches
// until the caller gives up.
func TestARoutedCallsWaitForAnOwnerIsBoundedAcrossNodes(t *testing.T) {
	t.Parallel()
	b := startAuthBus(t)
	p1, p2 := newPlacement("n2"), newPlacement("n1")
	n1, n2 := startRoutedNode(t, b, "n1", p1), startRoutedNode(t, b, "n2", p2)
	ticking(t, map[*placement]string{p1: "n2", p2: "n1"})
	answered := sendVia(n1.rs, 0)
	select {
	case e := <-answered:
		if e != nil {
			t.Fatal(e)
		}
	case <-time.After(4 * parkFor):
		t.Fatalf("no answer in %v (handed on %d times)", 4*parkFor, n1.received.Load()+n2.received.Load())
	}
	if n1.served()+n2.served() != 1 {
		t.Fatalf("n1 served %d, n2 %d; want one of them to answer it", n1.served(), n2.served())
	}
	if got := n1.received.Load() + n2.received.Load(); got <= 2*maxHops {
		t.Fatalf("handed on %d times: the call did not go round", got)
	}
}

// pieceActors hands the test each call it takes, to answer when it likes.
type pieceActors chan *actors.Message

func (a pieceActors) Send(_ string, m *actors.Message) { a <- m }

// take waits for the next call the owner's actors got and checks it is a
// piece of a long poll: a claim waiting at most forwardPoll.
func (a pieceActors) take(t *testing.T) *actors.Message {
	t.Helper()
	select {
	case m := <-a:
		if c, ok := m.Body.(*api.ClaimRequest); !ok || c.WaitMS <= 0 || time.Duration(c.WaitMS)*time.Millisecond > forwardPoll {
			t.Fatalf("the owner got %#v, want a claim waiting at most %v", m.Body, forwardPoll)
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("the owner got no piece of the long poll")
		return nil
	}
}

// A long poll forwarded to another node is asked for piece by piece, each
// waiting at most forwardPoll, until a piece brings a job; once its caller
// is gone, or the node begins to stop, no further piece is asked for and
// the caller gets no job (the owner cannot see either: a job it handed to
// a longer poll would be leased to nobody, its attempt spent when the lease
// runs out).
func TestAForwardedLongPollGoesInPieces(t *testing.T) {
	b := startAuthBus(t)
	p := newPlacement("n2")
	owner := make(pieceActors, 16)
	n1 := startRoutedNode(t, b, "n1", p)
	startRoutedNodeWith(t, b, "n2", p, owner)
	closing := make(chan struct{})
	n1.rs.Closing = closing
	claim := func(done chan struct{}) <-chan answerOf {
		ch := make(chan answerOf, 1)
		n1.rs.Send("acme", &actors.Message{Op: actors.OpClaim, Done: done,
			Body:  &api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 60000, LeaseMS: 1000},
			Reply: func(b any, e *api.Error) { ch <- answerOf{b, e} }})
		return ch
	}
	none := api.ClaimReply{Jobs: []api.Job{}}

	// Pieces until one brings a job.
	got := claim(nil)
	owner.take(t).Reply(none, nil)
	owner.take(t).Reply(api.ClaimReply{Jobs: []api.Job{{ID: "j1"}}}, nil)
	if a := answerIn(t, got); a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 1 {
		t.Fatalf("the caller got %+v, want the job of the second piece", a)
	}

	// The caller leaves during a piece: it is the last.
	done := make(chan struct{})
	got = claim(done)
	owner.take(t).Reply(none, nil)
	m := owner.take(t)
	close(done)
	m.Reply(none, nil)
	if a := answerIn(t, got); a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 0 {
		t.Fatalf("the gone caller got %+v, want no job", a)
	}

	// The caller leaves while a piece brings a job: the job is given
	// back (a nack with release), not handed to nobody.
	done = make(chan struct{})
	got = claim(done)
	m = owner.take(t)
	close(done)
	m.Reply(api.ClaimReply{Jobs: []api.Job{{ID: "j2", Attempt: 1}}}, nil)
	if a := answerIn(t, got); a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 0 {
		t.Fatalf("the gone caller got %+v, want no job", a)
	}
	select {
	case rel := <-owner:
		if n, ok := rel.Body.(*api.NackRequest); !ok || n.ID != "j2" || n.Attempt != 1 || !n.Release {
			t.Fatalf("the owner got %#v, want j2 released at attempt 1", rel.Body)
		}
		rel.Reply(api.NackReply{Status: api.StatusPending}, nil)
	case <-time.After(10 * time.Second):
		t.Fatal("the job handed to the gone caller was not given back")
	}

	// The node begins to stop during a piece: it is the last.
	got = claim(nil)
	m = owner.take(t)
	close(closing)
	m.Reply(none, nil)
	if a := answerIn(t, got); a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 0 {
		t.Fatalf("at stop the caller got %+v, want no job", a)
	}
	if err := n1.rs.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-owner:
		t.Fatalf("the owner was asked for another piece (%#v) after the caller left or the node began to stop", m.Body)
	default:
	}
}

// answerOf is an answer a test's call got.
type answerOf struct {
	body any
	err  *api.Error
}

// answerIn waits for a test call's answer (10 s at most: no answer fails).
func answerIn(t *testing.T, ch <-chan answerOf) answerOf {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("the caller got no answer")
		return answerOf{}
	}
}
