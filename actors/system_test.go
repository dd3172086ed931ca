package actors

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/internal/testlog"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// panicky makes the next Get panic once when armed.
type panicky struct {
	inner Snapshots
	armed atomic.Bool
	fired atomic.Int64 // panics so far
}

func (p *panicky) Get(ctx context.Context, ns string, now time.Time) cachebust.Snapshot {
	if p.armed.Swap(false) {
		p.fired.Add(1)
		panic("injected")
	}
	return p.inner.Get(ctx, ns, now)
}

type answer struct {
	body any
	err  *api.Error
}

func newSystem(t *testing.T, idle time.Duration) (*System, *panicky) {
	t.Helper()
	return newSystemLogged(t, idle, nil)
}

// newSystemLogged is newSystem whose actors log to log (nil: nowhere).
func newSystemLogged(t *testing.T, idle time.Duration, log *slog.Logger) (*System, *panicky) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snaps := &panicky{inner: cachebust.New(st, time.Second, nil)}
	sys := NewSystem(context.Background(), Deps{Store: st, Snapshots: snaps, IdleAfter: idle, Log: log})
	t.Cleanup(func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		st.Close()
	})
	return sys, snaps
}

func send(sys *System, ns string, op Op, body any) <-chan answer {
	ch := make(chan answer, 1)
	sys.Send(ns, &Message{Op: op, Body: body, Reply: func(b any, e *api.Error) { ch <- answer{b, e} }})
	return ch
}

func wait(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer in 10 s")
		return answer{}
	}
}

func TestActorsPassivateWhenIdleAndRespawnOnDemand(t *testing.T) {
	sys, _ := newSystem(t, 20*time.Millisecond)
	a := wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}}))
	if a.err != nil {
		t.Fatal(a.err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for sys.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("idle actor never passivated")
		}
		<-time.After(5 * time.Millisecond)
	}
	// A new actor rebuilds the count from the store: the job is there.
	a = wait(t, send(sys, "acme", OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 5, LeaseMS: 60000}))
	if a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 1 {
		t.Fatalf("claim after respawn: %+v", a)
	}
	// An actor with a running job stays: it watches the lease.
	<-time.After(60 * time.Millisecond)
	if sys.Len() != 1 {
		t.Fatal("an actor holding a running job passivated")
	}
}

func TestActorRestartsInPlaceAfterAPanic(t *testing.T) {
	sys, p := newSystem(t, time.Minute)
	enq := &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}}
	if a := wait(t, send(sys, "acme", OpEnqueue, enq)); a.err != nil {
		t.Fatal(a.err)
	}
	landed := 1
	for try := 1; ; try++ {
		fired := p.fired.Load()
		p.armed.Store(true)
		a := wait(t, send(sys, "acme", OpEnqueue, enq))
		if a.err != nil && a.err.Code == api.CodeInternal {
			break
		}
		// A step of the actor's own (a timer's, with no message) may
		// take the panic before the message comes: the message is then
		// served by the rebuilt core, and the panic is armed again. A
		// message answered while no panic fired is the failure.
		if a.err != nil || p.fired.Load() == fired || try == 5 {
			t.Fatalf("message during a panic answered %+v, want INTERNAL", a)
		}
		landed++
	}
	// The next message is served by the rebuilt core, which counts the
	// jobs that landed before the panic.
	a := wait(t, send(sys, "acme", OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 5, LeaseMS: 60000}))
	if a.err != nil || len(a.body.(api.ClaimReply).Jobs) != landed {
		t.Fatalf("after restart: %+v, want %d jobs", a, landed)
	}
}

func TestStopAnswersEverythingHeld(t *testing.T) {
	st, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sys := NewSystem(context.Background(), Deps{Store: st, Snapshots: cachebust.New(st, time.Second, nil)})
	parked := send(sys, "acme", OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 60000, LeaseMS: 1000})
	// Let the claim park: answer a second message first.
	wait(t, send(sys, "acme", OpHeartbeat, &api.HeartbeatRequest{IDs: []string{"x"}, LeaseMS: 1000}))
	if err := sys.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := wait(t, parked)
	if a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 0 {
		t.Fatalf("parked claim at stop: %+v, want no jobs", a)
	}
	a = wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}}))
	if a.err == nil || a.err.Code != api.CodeUnavailable {
		t.Fatalf("message after stop: %+v, want UNAVAILABLE", a)
	}
}

// Once stopped, a message goes to the hand-off (SetHandOff) when it takes
// it, untouched, and is answered UNAVAILABLE when it does not.
func TestStoppedSystemHandsMessagesOff(t *testing.T) {
	sys, _ := newSystem(t, time.Minute)
	var handed []*Message
	take := true
	sys.SetHandOff(func(ns string, m *Message) bool {
		if ns != "acme" {
			t.Errorf("handed off for %q", ns)
		}
		if take {
			handed = append(handed, m)
		}
		return take
	})
	if a := wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}})); a.err != nil {
		t.Fatalf("before the stop: %+v", a)
	}
	if len(handed) != 0 {
		t.Fatal("a running system handed a message off")
	}
	if err := sys.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	body := &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}}
	ch := send(sys, "acme", OpEnqueue, body)
	if len(handed) != 1 || handed[0].Body != body || handed[0].Op != OpEnqueue {
		t.Fatalf("after the stop the hand-off got %d messages, want the one sent, untouched", len(handed))
	}
	select {
	case a := <-ch:
		t.Fatalf("a handed-off message was answered here: %+v", a)
	default:
	}
	take = false
	if a := wait(t, send(sys, "acme", OpEnqueue, body)); a.err != ErrStopping {
		t.Fatalf("a message the hand-off did not take: %+v, want ErrStopping", a)
	}
}

// A parked claim whose caller has gone (Message.Done closed: a gRPC client
// cancelled its long poll) is handed no job when one comes: the job stays
// for the next claim, its attempt unspent, instead of being leased to a
// caller that will never work it.
func TestAGoneCallersParkedClaimGetsNoJob(t *testing.T) {
	sys, _ := newSystem(t, time.Minute)
	done := make(chan struct{})
	gone := make(chan answer, 1)
	sys.Send("acme", &Message{Op: OpClaim, Done: done,
		Body:  &api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 60000, LeaseMS: 60000},
		Reply: func(b any, e *api.Error) { gone <- answer{b, e} }})
	// The claim parks: a later message is answered first.
	wait(t, send(sys, "acme", OpHeartbeat, &api.HeartbeatRequest{IDs: []string{"x"}, LeaseMS: 1000}))
	close(done)
	if a := wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}})); a.err != nil {
		t.Fatal(a.err)
	}
	if a := wait(t, gone); a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 0 {
		t.Fatalf("the gone caller's claim: %+v, want no job", a)
	}
	a := wait(t, send(sys, "acme", OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000}))
	if a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 1 || a.body.(api.ClaimReply).Jobs[0].Attempt != 1 {
		t.Fatalf("the next claim: %+v, want the job at its first attempt", a)
	}

	// A claim whose caller left before the actor took it gets nothing
	// either.
	if a := wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}})); a.err != nil {
		t.Fatal(a.err)
	}
	late := make(chan answer, 1)
	sys.Send("acme", &Message{Op: OpClaim, Done: done,
		Body:  &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000},
		Reply: func(b any, e *api.Error) { late <- answer{b, e} }})
	if a := wait(t, late); a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 0 {
		t.Fatalf("a claim whose caller had left: %+v, want no job", a)
	}
	a = wait(t, send(sys, "acme", OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000}))
	if a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 1 {
		t.Fatalf("the next claim: %+v, want the second job", a)
	}
}

// claimGate holds the first claim inside the store until the test lets it
// go on.
type claimGate struct {
	Store
	entered, release chan struct{}
	once             atomic.Bool
}

func (g *claimGate) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	if !g.once.Swap(true) {
		close(g.entered)
		<-g.release
	}
	return g.Store.JobClaimMany(ctx, p)
}

// A caller that leaves while its claim is being written gets no job, and
// the jobs the claim took go back, pending, their attempt unspent.
func TestJobsClaimedForAGoneCallerGoBack(t *testing.T) {
	st, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	gate := &claimGate{Store: st, entered: make(chan struct{}), release: make(chan struct{})}
	sys := NewSystem(context.Background(), Deps{Store: gate, Snapshots: cachebust.New(st, time.Second, nil)})
	defer func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if a := wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}})); a.err != nil {
		t.Fatal(a.err)
	}
	done := make(chan struct{})
	gone := make(chan answer, 1)
	sys.Send("acme", &Message{Op: OpClaim, Done: done,
		Body:  &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000},
		Reply: func(b any, e *api.Error) { gone <- answer{b, e} }})
	<-gate.entered
	close(done)
	close(gate.release)
	if a := wait(t, gone); a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 0 {
		t.Fatalf("the gone caller's claim: %+v, want no job", a)
	}
	a := wait(t, send(sys, "acme", OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000}))
	if a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 1 || a.body.(api.ClaimReply).Jobs[0].Attempt != 1 {
		t.Fatalf("the next claim: %+v, want the job back at its first attempt", a)
	}
}

// A claim just sent gets its jobs even if its caller's interest is not
// seen yet (Listening false: in a forming cluster a forwarded call can
// overtake it); only a claim that has waited is asked whether anybody
// still listens, and then gets no job once nobody does.
func TestOnlyAClaimThatWaitedIsAskedWhetherItsCallerListens(t *testing.T) {
	var logs testlog.Buffer
	sys, _ := newSystemLogged(t, time.Minute, logs.Logger(slog.LevelDebug))
	if a := wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}})); a.err != nil {
		t.Fatal(a.err)
	}
	claim := func(waitMS int64, listening func() bool) <-chan answer {
		ch := make(chan answer, 1)
		sys.Send("acme", &Message{Op: OpClaim, Listening: listening,
			Body:  &api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: waitMS, LeaseMS: 60000},
			Reply: func(b any, e *api.Error) { ch <- answer{b, e} }})
		return ch
	}
	unseen := func() bool { return false }
	if a := wait(t, claim(0, unseen)); a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 1 {
		t.Fatalf("a claim just sent, its caller's interest not seen yet: %+v, want the job", a)
	}

	var listening atomic.Bool
	listening.Store(true)
	parked := claim(60000, listening.Load)
	// The claim parks: a later message is answered first.
	wait(t, send(sys, "acme", OpHeartbeat, &api.HeartbeatRequest{IDs: []string{"x"}, LeaseMS: 1000}))
	if strings.Contains(logs.String(), "its caller left") {
		t.Fatalf("a caller that listens was logged as gone:\n%s", logs.String())
	}
	listening.Store(false)
	if a := wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}})); a.err != nil {
		t.Fatal(a.err)
	}
	if a := wait(t, parked); a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 0 {
		t.Fatalf("a parked claim nobody listens for any more: %+v, want no job", a)
	}
	// At debug, the owner says why the claim was answered early: the
	// next time a reply is dropped, its log tells this case from a claim
	// that took jobs.
	if !strings.Contains(logs.String(), "parked claim answered before its wait ended: its caller left") {
		t.Errorf("the gone caller's claim was not logged at debug:\n%s", logs.String())
	}
	a := wait(t, send(sys, "acme", OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000}))
	if a.err != nil || len(a.body.(api.ClaimReply).Jobs) != 1 || a.body.(api.ClaimReply).Jobs[0].Attempt != 1 {
		t.Fatalf("the next claim: %+v, want the job at its first attempt", a)
	}
}
