package actors

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/internal/testlog"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
)

// commitFault fails every step commit while armed.
type commitFault struct{ armed atomic.Bool }

func (f *commitFault) Fault(op string, _ int) error {
	if op == "Commit" && f.armed.Load() {
		return errors.New("injected commit failure")
	}
	return nil
}

// faultySQLite is a private in-memory SQLite store whose step commits
// fail while its fault is armed; the test's end closes it.
func faultySQLite(t *testing.T) (*sqlite.Store, *commitFault) {
	t.Helper()
	faults := &commitFault{}
	st, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, faults
}

func collect(m *Message, into *[]answer) *Message {
	m.Reply = func(b any, e *api.Error) { *into = append(*into, answer{b, e}) }
	return m
}

// With SQLite a step is one transaction and its answers wait for the
// commit: a failed commit turns every success of the step into an error,
// and the counts the step changed are read again from the store.
func TestStepAnswersWaitForTheCommit(t *testing.T) {
	ctx := context.Background()
	st, faults := faultySQLite(t)
	deps := &Deps{Store: st, Snapshots: cachebust.New(st, time.Second, nil), Log: slog.New(slog.DiscardHandler), Observer: nopObserver{}}
	a := NewActor("acme", NewCore("acme", rand.New(rand.NewPCG(1, 2))), deps)
	now := time.Unix(1_000_000, 0)

	var got []answer
	a.Send(collect(&Message{Op: OpEnqueue, Body: &api.EnqueueRequest{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t"}}}}, &got))
	a.Step(ctx, now)
	if len(got) != 1 || got[0].err != nil {
		t.Fatalf("first enqueue: %+v", got)
	}

	// The failing step: an enqueue, a claim (of a) and a refusal.
	faults.armed.Store(true)
	var enq, claim, ack []answer
	a.Send(collect(&Message{Op: OpEnqueue, Body: &api.EnqueueRequest{Jobs: []api.Job{{ID: "b", Queue: "q", Task: "t"}}}}, &enq))
	a.Send(collect(&Message{Op: OpClaim, Body: &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000}}, &claim))
	a.Send(collect(&Message{Op: OpAck, Body: &api.AckRequest{ID: "nope"}}, &ack))
	a.Step(ctx, now)
	for _, c := range []struct {
		what string
		got  []answer
		want api.Code
	}{{"enqueue", enq, api.CodeUnavailable}, {"claim", claim, api.CodeUnavailable}, {"ack of an unknown job", ack, api.CodeNotFound}} {
		if len(c.got) != 1 || c.got[0].err == nil || c.got[0].err.Code != c.want {
			t.Errorf("%s in the failed step answered %+v, want one %s", c.what, c.got, c.want)
		}
	}
	if c, err := st.JobCount(ctx, "acme"); err != nil || c != (store.Counts{Pending: 1}) {
		t.Errorf("store after the failed step: %+v, %v; want only job a, pending", c, err)
	}

	// The next step works from the store's truth: a is still there to claim.
	faults.armed.Store(false)
	got = nil
	a.Send(collect(&Message{Op: OpClaim, Body: &api.ClaimRequest{Queues: []string{"q"}, Max: 2, LeaseMS: 60000}}, &got))
	a.Step(ctx, now)
	if len(got) != 1 || got[0].err != nil {
		t.Fatalf("claim after the failed step: %+v", got)
	}
	jobs := got[0].body.(api.ClaimReply).Jobs
	if len(jobs) != 1 || jobs[0].ID != "a" || jobs[0].Attempt != 1 {
		t.Errorf("claimed %+v, want job a at attempt 1", jobs)
	}
	if a.Core().Pending() != 0 || a.Core().Running() != 1 {
		t.Errorf("core counts pending %d running %d, want 0 and 1", a.Core().Pending(), a.Core().Running())
	}
}

// A job a worker took ahead of a free slot counts as running against
// max_running until it is given back; a release makes it pending again,
// its attempt not spent, and frees the slot for the next claim.
// sqliteActor is namespace acme's actor on a private in-memory SQLite
// store whose quota document is doc, with pace, and the store; the test's
// end closes it.
func sqliteActor(t *testing.T, doc string, pace Pace) (*Actor, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.SettingPut(context.Background(), store.SettingPutParams{Key: quota.Key("acme"), Value: []byte(doc), Now: time.Unix(1_000_000, 0)}); err != nil {
		t.Fatal(err)
	}
	deps := &Deps{Store: st, Snapshots: cachebust.New(st, time.Second, nil), Log: slog.New(slog.DiscardHandler), Observer: nopObserver{}, Pace: pace}
	return NewActor("acme", NewCore("acme", rand.New(rand.NewPCG(1, 2))), deps), st
}

func TestReleaseGivesBackAnUnstartedJob(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_000_000, 0)
	a, st := sqliteActor(t, `{"max_running":2}`, Pace{})
	step := func(op Op, body any) answer {
		t.Helper()
		var got []answer
		a.Send(collect(&Message{Op: op, Body: body}, &got))
		a.Step(ctx, now)
		if len(got) != 1 {
			t.Fatalf("%v: %d answers", op, len(got))
		}
		return got[0]
	}
	claim := func() []api.Job {
		t.Helper()
		got := step(OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 3, LeaseMS: 60000})
		if got.err != nil {
			t.Fatalf("claim: %v", got.err)
		}
		return got.body.(api.ClaimReply).Jobs
	}
	step(OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t"}, {ID: "b", Queue: "q", Task: "t"}, {ID: "c", Queue: "q", Task: "t"}}})
	if got := claim(); len(got) != 2 {
		t.Fatalf("first claim took %d jobs, want 2 (max_running)", len(got))
	}
	if got := claim(); len(got) != 0 {
		t.Fatalf("a claim at max_running took %d jobs", len(got))
	}
	rel := step(OpNack, &api.NackRequest{ID: "b", Attempt: 1, Release: true})
	if rel.err != nil || rel.body.(api.NackReply).Status != api.StatusPending {
		t.Fatalf("release: %+v", rel)
	}
	if c, _ := st.JobCount(ctx, "acme"); c.Running != 1 || c.Pending != 2 {
		t.Fatalf("after the release: %+v, want 1 running, 2 pending", c)
	}
	if j, _ := st.JobGet(ctx, "acme", "b"); j.Attempt != 0 || j.Error != "" {
		t.Fatalf("released job: attempt %d error %q, want 0 and none", j.Attempt, j.Error)
	}
	got := claim()
	if len(got) != 1 || got[0].ID != "b" || got[0].Attempt != 1 {
		t.Fatalf("claim after the release: %+v, want b as attempt 1", got)
	}
	// A release of a job no longer held under that attempt is a lost lease.
	if lost := step(OpNack, &api.NackRequest{ID: "a", Attempt: 7, Release: true}); lost.err == nil || lost.err.Reason != api.ReasonLeaseLost {
		t.Fatalf("release under another attempt: %+v", lost)
	}
}

// readFault fails every count read while failing is set; it hides
// SQLite's BeginStep (its writes are not one transaction a step).
type readFault struct {
	Store
	failing atomic.Bool
}

func (r *readFault) JobCount(ctx context.Context, ns string) (store.Counts, error) {
	if r.failing.Load() {
		return store.Counts{}, errors.New("injected read failure")
	}
	return r.Store.JobCount(ctx, ns)
}

// A namespace's new actor that cannot read its counts stays up and tries
// again: the running jobs it has not read may hold leases that run out,
// and nothing else watches them (a node wakes the namespaces it takes
// over once; an actor that passivated then would leave them running until
// some call for the namespace came). Once the store answers, the lease
// that ran out is expired.
func TestAnActorThatCannotReadItsCountsStaysUpAndTriesAgain(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1_000_000, 0)
	first, st := sqliteActor(t, `{}`, Pace{})
	stepOnce(t, first, t0, OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{ID: "j", Queue: "q", Task: "t"}}})
	if got := stepOnce(t, first, t0, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 1000}); len(*got) != 1 || len((*got)[0].body.(api.ClaimReply).Jobs) != 1 {
		t.Fatalf("claim: %+v", *got)
	}

	// The namespace's next actor, as on a node that took it over.
	rf := &readFault{Store: st}
	rf.failing.Store(true)
	var logs testlog.Buffer
	deps := &Deps{Store: rf, Snapshots: cachebust.New(st, time.Second, nil), Log: logs.Logger(slog.LevelInfo), Observer: nopObserver{}}
	a := NewActor("acme", NewCore("acme", rand.New(rand.NewPCG(1, 2))), deps)
	wake := stepOnce(t, a, t0.Add(2*time.Second), OpWake, nil)
	if len(*wake) != 1 || (*wake)[0].err == nil || (*wake)[0].err.Code != api.CodeUnavailable {
		t.Fatalf("wake with the counts unreadable answered %+v, want UNAVAILABLE", *wake)
	}
	if !a.Core().Busy() || a.Core().Idle(t0.Add(time.Hour), time.Second) {
		t.Fatal("an actor that could not read its counts may passivate: the lease of job j would go unwatched")
	}
	a.Step(ctx, t0.Add(2500*time.Millisecond)) // polls that fail again are not logged again
	a.Step(ctx, t0.Add(2600*time.Millisecond))
	if n := strings.Count(logs.String(), "cannot load namespace counts"); n != 1 {
		t.Fatalf("three failed reads logged %d times at info and above, want once:\n%s", n, logs.String())
	}

	rf.failing.Store(false)
	a.Step(ctx, t0.Add(3*time.Second)) // its next poll, no message
	if !strings.Contains(logs.String(), "namespace counts read again") {
		t.Errorf("the recovery was not logged:\n%s", logs.String())
	}
	j, err := st.JobGet(ctx, "acme", "j")
	if err != nil || j.Status != api.StatusPending || j.Error != "lease expired" {
		t.Fatalf("job j after the counts were read: %+v, %v; want pending again, its lease expired", j, err)
	}
	if a.Core().Busy() {
		t.Fatal("still busy with nothing running and the counts read")
	}
}
