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

// Whether a claim's caller still listens (Listening: on a node with an
// embedded server, its interest in the reply subject) is asked as the
// claim's jobs are about to go out, of every claim, and when a parked
// claim is tried again. A claim just sent is not asked before its write:
// its caller's interest may still be on its way through the routes.
func TestAClaimIsAskedWhetherItsCallerListensAsItsJobsGoOut(t *testing.T) {
	st, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs testlog.Buffer
	gate := &claimGate{Store: st, entered: make(chan struct{}), release: make(chan struct{})}
	sys := NewSystem(context.Background(), Deps{Store: gate, Snapshots: cachebust.New(st, time.Second, nil), Log: logs.Logger(slog.LevelDebug)})
	defer func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	enqueue := func() {
		t.Helper()
		if a := wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}})); a.err != nil {
			t.Fatal(a.err)
		}
	}
	claim := func(waitMS int64, listening func() bool) <-chan answer {
		ch := make(chan answer, 1)
		sys.Send("acme", &Message{Op: OpClaim, Listening: listening,
			Body:  &api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: waitMS, LeaseMS: 60000},
			Reply: func(b any, e *api.Error) { ch <- answer{b, e} }})
		return ch
	}
	jobs := func(a answer) []api.Job {
		t.Helper()
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a.body.(api.ClaimReply).Jobs
	}
	next := func(what string) {
		t.Helper()
		a := wait(t, send(sys, "acme", OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000}))
		if got := jobs(a); len(got) != 1 || got[0].Attempt != 1 {
			t.Fatalf("the claim after %s: %+v, want the job at its first attempt", what, a)
		}
	}

	// Its caller's interest arrives while the claim is written (the
	// first claim's write is held at the gate): asked before the write,
	// the claim would have been turned away though its caller waits.
	enqueue()
	arrived := func() bool {
		select {
		case <-gate.entered:
			return true
		default:
			return false
		}
	}
	first := claim(0, arrived)
	select {
	case <-gate.entered:
	case a := <-first:
		t.Fatalf("a claim whose caller's interest was not seen yet was answered before its write: %+v", a)
	case <-time.After(10 * time.Second):
		t.Fatal("the claim was not written")
	}
	close(gate.release)
	if got := jobs(wait(t, first)); len(got) != 1 {
		t.Fatalf("a claim whose caller's interest arrived during its write got %d jobs, want 1", len(got))
	}

	// Nobody listens as its jobs go out: they would be lost with the
	// reply, so they go back, their attempt unspent.
	enqueue()
	if got := jobs(wait(t, claim(0, func() bool { return false }))); len(got) != 0 {
		t.Fatalf("a claim nobody listens for got %d jobs, want none", len(got))
	}
	if !strings.Contains(logs.String(), "claim's caller left while it was written: its jobs go back") {
		t.Errorf("the jobs that went back were not logged at debug:\n%s", logs.String())
	}
	next("a claim nobody listened for")

	// A parked claim is asked again when it is tried: once nobody
	// listens, it is answered with no job and takes none.
	var listening atomic.Bool
	listening.Store(true)
	parked := claim(60000, listening.Load)
	// The claim parks: a later message is answered first.
	wait(t, send(sys, "acme", OpHeartbeat, &api.HeartbeatRequest{IDs: []string{"x"}, LeaseMS: 1000}))
	if strings.Contains(logs.String(), "its caller left\"") {
		t.Fatalf("a caller that listens was logged as gone:\n%s", logs.String())
	}
	listening.Store(false)
	enqueue()
	if got := jobs(wait(t, parked)); len(got) != 0 {
		t.Fatalf("a parked claim nobody listens for any more got %d jobs, want none", len(got))
	}
	// At debug, the owner says why the claim was answered early: the
	// next time a reply is dropped, its log tells this case from a claim
	// that took jobs.
	if !strings.Contains(logs.String(), "parked claim answered before its wait ended: its caller left") {
		t.Errorf("the gone caller's parked claim was not logged at debug:\n%s", logs.String())
	}
	next("a parked claim nobody listened for")
}

// stepClock is the wall clock put ahead by what slowSnapshots add: a step
// that reads its namespace's snapshot takes at least that long by it.
type stepClock struct{ ahead atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

type slowSnapshots struct {
	inner Snapshots
	clock *stepClock
	by    time.Duration
}

func (s *slowSnapshots) Get(ctx context.Context, ns string, now time.Time) cachebust.Snapshot {
	s.clock.ahead.Add(int64(s.by))
	return s.inner.Get(ctx, ns, now)
}

type stepReport struct {
	ns       string
	messages int
	busy     time.Duration
}

// stepReports passes on what the actors report of their steps.
type stepReports struct {
	nopObserver
	ch chan stepReport
}

func (o stepReports) Stepped(ns string, messages int, busy time.Duration) {
	o.ch <- stepReport{ns, messages, busy}
}

// Every step of an actor is reported to the metrics with the messages it
// took and how long it kept the actor busy (by the system's clock), so an
// operator can tell a namespace whose calls wait for its one writer.
func TestEachStepReportsItsMessagesAndBusyTime(t *testing.T) {
	st, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clock := &stepClock{}
	const slow = 5 * time.Millisecond
	snaps := &slowSnapshots{inner: cachebust.New(st, time.Second, nil), clock: clock, by: slow}
	obs := stepReports{ch: make(chan stepReport, 1000)}
	sys := NewSystem(context.Background(), Deps{Store: st, Snapshots: snaps, Clock: clock, Observer: obs})
	t.Cleanup(func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		st.Close()
	})

	const calls = 5
	var answers []<-chan answer
	for range calls {
		answers = append(answers, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}}))
	}
	for _, ch := range answers {
		if a := wait(t, ch); a.err != nil {
			t.Fatal(a.err)
		}
	}
	// A step is reported once it has answered: wait for the reports of
	// the steps that took the five calls.
	took := 0
	for took < calls {
		select {
		case r := <-obs.ch:
			if r.ns != "acme" {
				t.Fatalf("a step of %q reported, want acme", r.ns)
			}
			// Each step that took a call read the namespace's snapshot.
			if r.messages > 0 && r.busy < slow {
				t.Fatalf("a step of %d messages reported busy %v, want at least %v (it read the snapshot)", r.messages, r.busy, slow)
			}
			took += r.messages
		case <-time.After(10 * time.Second):
			t.Fatalf("steps reported %d messages in 10 s, want %d", took, calls)
		}
	}
	if took != calls {
		t.Fatalf("steps reported %d messages, want %d", took, calls)
	}
}
