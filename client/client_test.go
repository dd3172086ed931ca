package client

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/flexiq/flexiq/api"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startNATS(t testing.TB) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// A request in flight when the connection drops fails with
// ErrConnectionLost, not after its timeout: its reply cannot come.
func TestRequestInFlightFailsWhenTheConnectionDrops(t *testing.T) {
	srv := startNATS(t)
	// A node that takes the claim and never answers.
	node, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	taken := make(chan struct{}, 1)
	if _, err := node.Subscribe(api.SubjectClaim, func(*nats.Msg) { taken <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}

	c, err := Connect(srv.ClientURL(), "tok", nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Timeout = time.Minute

	type result struct {
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, err := c.Claim(context.Background(), api.ClaimRequest{Queues: []string{"q"}, Max: 1})
		done <- result{err}
	}()
	<-taken
	srv.Shutdown()

	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the claim is still waiting 30 s after its connection dropped")
	}
	if !errors.Is(r.err, ErrConnectionLost) || !errors.Is(r.err, ErrUnreachable) {
		t.Fatalf("claim error = %v, want ErrUnreachable caused by ErrConnectionLost", r.err)
	}
}

// A request made after a drop, once reconnected, is answered as usual:
// only the requests in flight at the drop fail.
func TestRequestAfterReconnectIsAnswered(t *testing.T) {
	srv := startNATS(t)
	port := srv.Addr().(*net.TCPAddr).Port
	c, err := Connect(srv.ClientURL(), "tok", nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reconnected := c.Conn().StatusChanged(nats.CONNECTED)
	defer c.Conn().RemoveStatusListener(reconnected)

	srv.Shutdown()
	srv.WaitForShutdown()
	again, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	again.Start()
	defer again.Shutdown()
	if !again.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	select {
	case <-reconnected:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconnection")
	}
	node, err := nats.Connect(again.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if _, err := node.Subscribe(api.SubjectClaim, func(m *nats.Msg) { _ = m.Respond([]byte(`{"jobs":[{"id":"j1"}]}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Claim(context.Background(), api.ClaimRequest{Queues: []string{"q"}, Max: 1})
	if err != nil {
		t.Fatalf("claim after reconnection: %v", err)
	}
	if len(jobs) != 1 || jobs[0].ID != "j1" {
		t.Fatalf("claim after reconnection = %+v, want job j1", jobs)
	}
}

// answering answers subjects of srv with the handlers given, as a node
// would, and is closed when the test ends.
func answering(t *testing.T, srv *server.Server, handlers map[string]nats.MsgHandler) {
	t.Helper()
	node, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	for subject, h := range handlers {
		if _, err := node.Subscribe(subject, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
}

// A caller that leaves a claim (its context ends) gets its error at once;
// jobs the node hands out for that claim afterwards are released, not left
// leased to nobody until their leases run out.
func TestJobsOfAClaimItsCallerLeftAreReleased(t *testing.T) {
	srv := startNATS(t)
	claims := make(chan *nats.Msg, 1)
	nacks := make(chan api.NackRequest, 4)
	answering(t, srv, map[string]nats.MsgHandler{
		api.SubjectClaim: func(m *nats.Msg) { claims <- m },
		api.SubjectNack: func(m *nats.Msg) {
			var n api.NackRequest
			_ = json.Unmarshal(m.Data, &n)
			nacks <- n
			_ = m.Respond([]byte(`{}`))
		},
	})
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Claim(ctx, api.ClaimRequest{Queues: []string{"q"}, Max: 2, WaitMS: 60_000})
		done <- err
	}()
	req := <-claims
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("claim left by its caller: %v, want ErrUnreachable and context.Canceled", err)
	}
	// The node, not knowing, answers with two jobs.
	if err := req.Respond([]byte(`{"jobs":[{"id":"j1","attempt":1},{"id":"j2","attempt":3}]}`)); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for range 2 {
		select {
		case n := <-nacks:
			if !n.Release {
				t.Fatalf("nack of %s without release: %+v", n.ID, n)
			}
			got[n.ID] = n.Attempt
		case <-time.After(30 * time.Second):
			t.Fatalf("released %v 30 s after the answer, want j1 and j2", got)
		}
	}
	if got["j1"] != 1 || got["j2"] != 3 {
		t.Fatalf("released %v, want j1 at attempt 1 and j2 at attempt 3", got)
	}
}

// A claim answered before its caller leaves is the caller's, as usual.
func TestAClaimAnsweredIsTheCallers(t *testing.T) {
	srv := startNATS(t)
	answering(t, srv, map[string]nats.MsgHandler{
		api.SubjectClaim: func(m *nats.Msg) { _ = m.Respond([]byte(`{"jobs":[{"id":"j1","attempt":1}]}`)) },
	})
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	jobs, err := c.Claim(ctx, api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 1000})
	if err != nil || len(jobs) != 1 || jobs[0].ID != "j1" {
		t.Fatalf("claim: %+v, %v; want j1", jobs, err)
	}
}

// A call whose context has no deadline ends after Client.Timeout; one
// whose context has a deadline ends at it, whatever Timeout says. Either
// way the call leaves nothing behind waiting for its reply.
func TestCallEndsAtItsTimeoutOrItsDeadline(t *testing.T) {
	srv := startNATS(t)
	answering(t, srv, map[string]nats.MsgHandler{api.SubjectEnqueue: func(*nats.Msg) {}}) // never answers
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	c.Timeout = 20 * time.Millisecond
	_, err = c.Enqueue(context.Background(), api.Job{Queue: "q", Task: "t"})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call past Timeout: %v, want ErrUnreachable and context.DeadlineExceeded", err)
	}

	c.Timeout = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = c.Enqueue(ctx, api.Job{Queue: "q", Task: "t"})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call past its context's deadline: %v, want ErrUnreachable and context.DeadlineExceeded", err)
	}

	c.replies.mu.Lock()
	left := len(c.replies.waiting)
	c.replies.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d calls still waiting for replies after both ended", left)
	}
}

// Calls take their timers from a pool: a timer used before, by a call
// that timed out or by one that was answered, times the next call that
// takes it by that call's own timeout.
func TestATimerUsedAgainTimesItsOwnCall(t *testing.T) {
	srv := startNATS(t)
	answering(t, srv, map[string]nats.MsgHandler{
		api.SubjectClaim: func(*nats.Msg) {}, // never answers
		api.SubjectEnqueue: func(m *nats.Msg) {
			_ = m.Respond([]byte(`{"results":[{"id":"j","outcome":"enqueued"}]}`))
		},
	})
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	claim := func() error {
		done := make(chan error, 1)
		go func() {
			_, err := c.Claim(context.Background(), api.ClaimRequest{Queues: []string{"q"}, Max: 1})
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("a call past its timeout still waits after 10 s: its timer was not set again")
			return nil
		}
	}
	for round := range 3 {
		c.Timeout = 20 * time.Millisecond
		if err := claim(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: an unanswered call: %v, want context.DeadlineExceeded", round, err)
		}
		c.Timeout = time.Hour
		if _, err := c.Enqueue(context.Background(), api.Job{Queue: "q", Task: "t"}); err != nil {
			t.Fatalf("round %d: an answered call after one that timed out: %v", round, err)
		}
	}
}

// A reply naming its namespace's owner sends the next call straight to the
// owner's subject; when nobody listens there any more (the owner is gone:
// the server answers "no responders" on the call's reply subject), the
// call goes again on the plain subject, once, and is answered there.
func TestCallFallsBackFromAGoneOwner(t *testing.T) {
	srv := startNATS(t)
	owner := api.OwnerToken("node-a")
	var plain, direct atomic.Int64
	reply := []byte(`{"results":[{"id":"j","outcome":"enqueued"}]}`)
	answering(t, srv, map[string]nats.MsgHandler{
		api.SubjectEnqueue: func(m *nats.Msg) {
			plain.Add(1)
			r := nats.NewMsg(m.Reply)
			r.Header.Set(api.HeaderOwner, owner)
			r.Data = reply
			_ = m.RespondMsg(r)
		},
	})
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, api.Job{Queue: "q", Task: "t"}); err != nil {
		t.Fatal(err)
	}
	if o := c.owner.Load(); o == nil || *o != owner {
		t.Fatalf("owner after the first reply: %v, want %s", o, owner)
	}

	// The owner listens on its subject: the next call goes there.
	node, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	sub, err := node.Subscribe(api.SubjectOwner(owner, api.SubjectEnqueue), func(m *nats.Msg) {
		direct.Add(1)
		_ = m.Respond(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, api.Job{Queue: "q", Task: "t"}); err != nil {
		t.Fatal(err)
	}
	if direct.Load() != 1 || plain.Load() != 1 {
		t.Fatalf("calls: %d to the owner, %d plain; want 1 and 1", direct.Load(), plain.Load())
	}

	// The owner is gone: the call falls back to the plain subject.
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	node.Close()
	if _, err := c.Enqueue(ctx, api.Job{Queue: "q", Task: "t"}); err != nil {
		t.Fatalf("call after the owner left: %v", err)
	}
	if direct.Load() != 1 || plain.Load() != 2 {
		t.Fatalf("calls: %d to the owner, %d plain; want 1 and 2", direct.Load(), plain.Load())
	}
	c.replies.mu.Lock()
	left := len(c.replies.waiting)
	c.replies.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d calls still waiting for replies", left)
	}
}
