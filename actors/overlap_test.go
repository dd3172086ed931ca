package actors

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
)

// ackGate is a store whose step is not one transaction (it hides
// SQLite's BeginStep), as PostgreSQL and Redis are: acks are written
// beside the steps there. The first JobUpdateMany after arm waits inside
// until release; with fail set it then writes and reports fail, as a
// write whose answer was lost.
type ackGate struct {
	Store
	armed            atomic.Bool
	entered, release chan struct{}
	fail             error
}

func newAckGate(st Store) *ackGate {
	return &ackGate{Store: st, entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *ackGate) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	if g.armed.Swap(false) {
		close(g.entered)
		<-g.release
		if g.fail != nil {
			_, _ = g.Store.JobUpdateMany(ctx, p)
			return nil, g.fail
		}
	}
	return g.Store.JobUpdateMany(ctx, p)
}

// overlapActor is namespace acme's actor with OverlapAcks on a gated
// in-memory SQLite store whose quota document is doc.
func overlapActor(t *testing.T, doc string) (*Actor, *ackGate, *sqlite.Store) {
	t.Helper()
	_, st := sqliteActor(t, doc, Pace{})
	gate := newAckGate(st)
	deps := &Deps{Store: gate, Snapshots: cachebust.New(st, time.Second, nil), Log: slog.New(slog.DiscardHandler), Observer: nopObserver{}, OverlapAcks: true}
	return NewActor("acme", NewCore("acme", rand.New(rand.NewPCG(1, 2))), deps), gate, st
}

// stepOnce sends m to a, steps it at now and returns m's answers so far.
func stepOnce(t *testing.T, a *Actor, now time.Time, op Op, body any) *[]answer {
	t.Helper()
	got := &[]answer{}
	a.Send(collect(&Message{Op: op, Body: body}, got))
	a.Step(context.Background(), now)
	return got
}

// acksBack waits until the ack write a has out is back (its answer is
// then in the mailbox).
func acksBack(t *testing.T, a *Actor) {
	t.Helper()
	out := a.AcksOut()
	if out == nil {
		t.Fatal("no ack write is out")
	}
	<-out
}

// stepOff steps a in the background; the returned channel is closed when
// the step is over.
func stepOff(a *Actor, now time.Time) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Step(context.Background(), now)
	}()
	return done
}

// An ack's write does not hold up the namespace's next steps (the store's
// step is not one transaction): while it is out, claims are answered, the
// acked job still counts against max_running, no other call may touch it,
// and its lease does not expire. It is answered once written, and the
// counts follow at the next step.
func TestOverlappedAckLetsTheNextStepsGoOn(t *testing.T) {
	a, gate, st := overlapActor(t, `{"max_running":2}`)
	now := time.Unix(1_000_000, 0)
	jobs := []api.Job{{ID: "a", Queue: "q", Task: "t"}, {ID: "b", Queue: "q", Task: "t"}, {ID: "c", Queue: "q", Task: "t"}}
	if got := stepOnce(t, a, now, OpEnqueue, &api.EnqueueRequest{Jobs: jobs}); len(*got) != 1 || (*got)[0].err != nil {
		t.Fatalf("enqueue: %+v", *got)
	}
	got := stepOnce(t, a, now, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 2, LeaseMS: 60000})
	if len(*got) != 1 || (*got)[0].err != nil || len((*got)[0].body.(api.ClaimReply).Jobs) != 2 {
		t.Fatalf("claim of a and b: %+v", *got)
	}

	gate.armed.Store(true)
	ackCh := make(chan answer, 1)
	var queued int
	a.Send(&Message{Op: OpAck, Body: &api.AckRequest{ID: "a", Attempt: 1}, Reply: func(b any, e *api.Error) {
		queued = a.Pending() // what the actor has yet to take when the worker hears
		ackCh <- answer{b, e}
	}})
	select {
	case <-stepOff(a, now):
	case <-time.After(10 * time.Second):
		t.Fatal("the step waited for its ack's write")
	}
	<-gate.entered
	select {
	case ans := <-ackCh:
		t.Fatalf("the ack was answered before its write: %+v", ans)
	default:
	}

	// While a's ack is out: a claim finds both slots taken (a counts).
	got = stepOnce(t, a, now, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000})
	if len(*got) != 1 || (*got)[0].err != nil || len((*got)[0].body.(api.ClaimReply).Jobs) != 0 {
		t.Errorf("a claim at max_running with an ack out: %+v, want no job", *got)
	}
	// Nothing else may touch a: a second ack and a nack lose, a heartbeat
	// does not extend it.
	for _, c := range []struct {
		op   Op
		body any
	}{{OpAck, &api.AckRequest{ID: "a", Attempt: 1}}, {OpNack, &api.NackRequest{ID: "a", Attempt: 1, Error: "x"}}} {
		got := stepOnce(t, a, now, c.op, c.body)
		if len(*got) != 1 || (*got)[0].err == nil || (*got)[0].err.Reason != api.ReasonLeaseLost {
			t.Errorf("%s of a while its ack is out: %+v, want LEASE_LOST", c.op, *got)
		}
	}
	got = stepOnce(t, a, now, OpHeartbeat, &api.HeartbeatRequest{IDs: []string{"a", "b"}, LeaseMS: 60000})
	if ext := (*got)[0].body.(api.HeartbeatReply).Extended; len(ext) != 1 || ext[0] != "b" {
		t.Errorf("heartbeat of a and b while a's ack is out extended %v, want [b]", ext)
	}
	// Past both leases: b's runs out (pending again), a's is not judged.
	later := now.Add(2 * time.Minute)
	a.Step(context.Background(), later)
	if j, err := st.JobGet(context.Background(), "acme", "b"); err != nil || j.Status != api.StatusPending {
		t.Errorf("b after its lease ran out: %v %v, want pending", j.Status, err)
	}
	if j, err := st.JobGet(context.Background(), "acme", "a"); err != nil || j.Status != api.StatusRunning || j.Attempt != 1 {
		t.Errorf("a with its ack still out: %v attempt %d %v, want running at attempt 1", j.Status, j.Attempt, err)
	}
	if r := a.Core().Running(); r != 1 {
		t.Errorf("running with a's ack out: %d, want 1", r)
	}

	close(gate.release)
	if ans := <-ackCh; ans.err != nil {
		t.Fatalf("a's ack: %+v", ans)
	}
	// The answer left after the counts' message was queued: the next step
	// frees a's slot before it decides anything.
	if queued != 1 {
		t.Errorf("when a's ack was answered, %d messages waited for the actor; want its counts' message", queued)
	}
	acksBack(t, a)
	got = stepOnce(t, a, later, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 2, LeaseMS: 60000})
	if len(*got) != 1 || (*got)[0].err != nil {
		t.Fatalf("a claim after a's ack: %+v", *got)
	}
	// b waits out its backoff; c is the one due.
	if js := (*got)[0].body.(api.ClaimReply).Jobs; len(js) != 1 || js[0].ID != "c" {
		t.Errorf("a claim after a's ack got %+v, want c", js)
	}
	if j, err := st.JobGet(context.Background(), "acme", "a"); err != nil || j.Status != api.StatusCompleted {
		t.Errorf("a after its ack: %v %v, want completed", j.Status, err)
	}
	if r := a.Core().Running(); r != 1 {
		t.Errorf("running: %d, want 1 (c)", r)
	}
}

// An ack whose write fails is answered with the store's error, and the
// counts are read again: the write may have happened (here it did, its
// answer lost), and the store, not the plan, says what runs.
func TestAFailedOverlappedAckIsAnsweredAndTheCountsReadAgain(t *testing.T) {
	a, gate, st := overlapActor(t, `{}`)
	now := time.Unix(1_000_000, 0)
	stepOnce(t, a, now, OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t"}, {ID: "b", Queue: "q", Task: "t"}}})
	stepOnce(t, a, now, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 2, LeaseMS: 60000})
	gate.fail = errors.New("injected")
	gate.armed.Store(true)
	close(gate.release)
	ackCh := make(chan answer, 1)
	a.Send(&Message{Op: OpAck, Body: &api.AckRequest{ID: "a", Attempt: 1}, Reply: func(b any, e *api.Error) { ackCh <- answer{b, e} }})
	a.Step(context.Background(), now)
	if ans := <-ackCh; ans.err == nil || ans.err.Code != api.CodeUnavailable {
		t.Fatalf("ack whose write failed: %+v, want UNAVAILABLE", ans)
	}
	acksBack(t, a)
	a.Step(context.Background(), now)
	if r := a.Core().Running(); r != 1 {
		t.Errorf("running after the failed write that happened: %d, want 1 (b), as the store says", r)
	}
	// b's ack goes through as usual.
	a.Send(&Message{Op: OpAck, Body: &api.AckRequest{ID: "b", Attempt: 1}, Reply: func(b any, e *api.Error) { ackCh <- answer{b, e} }})
	a.Step(context.Background(), now)
	if ans := <-ackCh; ans.err != nil {
		t.Fatalf("b's ack: %+v", ans)
	}
	acksBack(t, a)
	a.Step(context.Background(), now)
	if j, err := st.JobGet(context.Background(), "acme", "b"); err != nil || j.Status != api.StatusCompleted {
		t.Errorf("b: %v %v, want completed", j.Status, err)
	}
	if r := a.Core().Running(); r != 0 {
		t.Errorf("running: %d, want 0", r)
	}
}

// A stopping node waits for the acks being written and answers them.
func TestStopWaitsForTheAcksBeingWritten(t *testing.T) {
	st, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	gate := newAckGate(st)
	sys := NewSystem(context.Background(), Deps{Store: gate, Snapshots: cachebust.New(st, time.Second, nil), OverlapAcks: true})
	if a := wait(t, send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t"}}})); a.err != nil {
		t.Fatal(a.err)
	}
	if a := wait(t, send(sys, "acme", OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000})); a.err != nil {
		t.Fatal(a.err)
	}
	gate.armed.Store(true)
	ack := send(sys, "acme", OpAck, &api.AckRequest{ID: "a", Attempt: 1})
	<-gate.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := sys.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop with an ack being written: %v, want it to wait (deadline exceeded)", err)
	}
	close(gate.release)
	if err := sys.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-ack:
		if a.err != nil {
			t.Errorf("the ack: %+v", a)
		}
	default:
		t.Error("Stop returned before the ack being written was answered")
	}
	if j, err := st.JobGet(context.Background(), "acme", "a"); err != nil || j.Status != api.StatusCompleted {
		t.Errorf("a: %v %v, want completed", j.Status, err)
	}
}

// An ack written beside the steps whose counts were read again meanwhile
// (after the write, so they no longer hold the job) changes them no
// further: taking the job off them twice would free a slot max_running
// still has taken.
func TestAcksDoneAfterAReloadLeavesTheCountsToTheStore(t *testing.T) {
	c := newTestCore(t, `{"max_running":2}`)
	lease := t0.Add(time.Minute)
	running := []store.Job{{ID: "a", Queue: "q", Task: "t", Attempt: 1, LeaseUntil: lease}, {ID: "b", Queue: "q", Task: "t", Attempt: 1, LeaseUntil: lease}}
	c.Load(store.Counts{Running: 2}, running, t0)
	p := c.PlanUpdates([]*UpdateCall{{Msg: &Message{Op: OpAck, Body: &api.AckRequest{ID: "a", Attempt: 1}}}}, t0)
	acks := c.SplitAcks(&p)
	if acks.Len() != 1 || p.Len() != 0 {
		t.Fatalf("split: %d acks out, %d left in the step; want 1 and 0", acks.Len(), p.Len())
	}
	// The ack is written; the counts are read before its answer is taken.
	c.Load(store.Counts{Running: 1, Completed: 1}, running[1:], t0)
	c.AcksDone(&acks, []bool{true}, nil)
	if c.Loaded() || c.Running() != 1 {
		t.Errorf("after an ack written before the counts were read: loaded %v, running %d; want them read again, 1 as read", c.Loaded(), c.Running())
	}
	c.Load(store.Counts{Running: 1, Completed: 1}, running[1:], t0)
	if c.Running() != 1 {
		t.Errorf("running: %d, want 1", c.Running())
	}

	// Decided and answered on the same counts, it takes the job off them.
	p = c.PlanUpdates([]*UpdateCall{{Msg: &Message{Op: OpAck, Body: &api.AckRequest{ID: "b", Attempt: 1}}}}, t0)
	acks = c.SplitAcks(&p)
	c.AcksDone(&acks, []bool{true}, nil)
	if !c.Loaded() || c.Running() != 0 {
		t.Errorf("after b's ack: loaded %v, running %d; want true and 0", c.Loaded(), c.Running())
	}
}

// The counts read again while an ack is out (after a failed write, say)
// still hold the acked job out of reach: its lease running out before the
// write lands does not expire it, and the ack, taken in time, completes
// it. (Found by the simulator, seed 797.)
func TestOverlappedAckSurvivesAReload(t *testing.T) {
	a, gate, st := overlapActor(t, `{}`)
	ctx := context.Background()
	now := time.Unix(1_000_000, 0)
	if got := stepOnce(t, a, now, OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t"}}}); len(*got) != 1 || (*got)[0].err != nil {
		t.Fatalf("enqueue: %+v", *got)
	}
	got := stepOnce(t, a, now, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 1000})
	if len(*got) != 1 || (*got)[0].err != nil || len((*got)[0].body.(api.ClaimReply).Jobs) != 1 {
		t.Fatalf("claim of a: %+v", *got)
	}
	gate.armed.Store(true)
	ackCh := make(chan answer, 1)
	a.Send(&Message{Op: OpAck, Body: &api.AckRequest{ID: "a", Attempt: 1}, Reply: func(b any, e *api.Error) { ackCh <- answer{b, e} }})
	a.Step(ctx, now)
	<-gate.entered

	a.core.Unload()                     // a write of the step failed: the counts are read again
	a.Step(ctx, now.Add(2*time.Second)) // past a's lease
	close(gate.release)
	acksBack(t, a)
	if ans := <-ackCh; ans.err != nil {
		t.Fatalf("the ack, taken while a's lease ran: %v", ans.err)
	}
	a.Step(ctx, now.Add(2*time.Second))
	j, err := st.JobGet(ctx, "acme", "a")
	if err != nil || j.Status != api.StatusCompleted || j.Attempt != 1 {
		t.Fatalf("a after its ack: %+v, %v; want completed at attempt 1", j, err)
	}
}
