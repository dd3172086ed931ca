package actors

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
)

// recordingObserver keeps what the metrics are told of claims and of how
// attempts end. Overlapped ack writes report from their own goroutine.
type recordingObserver struct {
	nopObserver
	mu      sync.Mutex
	waits   []time.Duration
	settled Settled
}

func (o *recordingObserver) Claimed(_ string, waits []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waits = append(o.waits, waits...)
}

func (o *recordingObserver) Settled(_ string, s Settled) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settled.Completed += s.Completed
	o.settled.Retried += s.Retried
	o.settled.Dead += s.Dead
	o.settled.Released += s.Released
	o.settled.Expired += s.Expired
}

func (o *recordingObserver) take() ([]time.Duration, Settled) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.waits
	o.waits = nil
	return w, o.settled
}

// The metrics learn, for every job handed out, how long it had been due
// (from its run_at, so a released job counts from its first due time and a
// retried one from its retry time), and, for every write of acks and
// nacks, how its attempts ended: acked, retried, dead, released, and which
// of them were leases that ran out. Both where a step is one transaction
// (SQLite) and where acks are written beside the steps (PostgreSQL,
// Redis), where the count comes before the ack's answer.
func TestTheMetricsLearnHowLongJobsWaitedAndHowAttemptsEnded(t *testing.T) {
	for _, overlap := range []bool{false, true} {
		name := "one transaction a step"
		if overlap {
			name = "acks beside the steps"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			obs := &recordingObserver{}
			_, st := sqliteActor(t, `{}`, Pace{})
			deps := &Deps{Store: st, Snapshots: cachebust.New(st, time.Second, nil), Log: slog.New(slog.DiscardHandler), Observer: obs}
			if overlap {
				deps.Store, deps.OverlapAcks = newAckGate(st), true
			}
			a := NewActor("acme", NewCore("acme", rand.New(rand.NewPCG(1, 2))), deps)
			t0 := time.Unix(1_000_000, 0)
			one := int64(1)
			enq := stepOnce(t, a, t0, OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{
				{ID: "a", Queue: "q", Task: "t"}, {ID: "b", Queue: "q", Task: "t"}, {ID: "c", Queue: "q", Task: "t"},
				{ID: "d", Queue: "q", Task: "t"}, {ID: "e", Queue: "q", Task: "t", MaxAttempts: &one},
			}})
			if len(*enq) != 1 || (*enq)[0].err != nil {
				t.Fatalf("enqueue: %+v", *enq)
			}

			t1 := t0.Add(3 * time.Second)
			got := stepOnce(t, a, t1, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 5, LeaseMS: 60000})
			if len(*got) != 1 || (*got)[0].err != nil || len((*got)[0].body.(api.ClaimReply).Jobs) != 5 {
				t.Fatalf("claim: %+v", *got)
			}
			if waits, _ := obs.take(); !slices.Equal(waits, []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second}) {
				t.Fatalf("waits of the first claim = %v, want 3s for each of the 5 jobs", waits)
			}

			ack := stepOnce(t, a, t1, OpAck, &api.AckRequest{ID: "a", Attempt: 1})
			if overlap {
				acksBack(t, a)
			}
			if len(*ack) != 1 || (*ack)[0].err != nil {
				t.Fatalf("ack: %+v", *ack)
			}
			// Counted before the ack was answered.
			if _, s := obs.take(); s != (Settled{Completed: 1}) {
				t.Fatalf("after the ack: %+v, want one completed", s)
			}
			yes, no := true, false
			var retryAt time.Time
			for _, n := range []*api.NackRequest{
				{ID: "b", Attempt: 1, Error: "boom", Retry: &yes},
				{ID: "c", Attempt: 1, Error: "fatal", Retry: &no},
				{ID: "d", Attempt: 1, Release: true},
			} {
				got := stepOnce(t, a, t1, OpNack, n)
				if len(*got) != 1 || (*got)[0].err != nil {
					t.Fatalf("nack %+v: %+v", n, *got)
				}
				if n.ID == "b" {
					retryAt = *(*got)[0].body.(api.NackReply).RunAt
				}
			}
			// e's lease runs out; its one attempt is spent, so it is dead.
			t2 := t1.Add(61 * time.Second)
			a.Step(ctx, t2)
			if _, s := obs.take(); s != (Settled{Completed: 1, Retried: 1, Dead: 2, Released: 1, Expired: 1}) {
				t.Fatalf("after the nacks and the lease expiry: %+v, want 1 completed, 1 retried, 2 dead (1 by its lease), 1 released", s)
			}

			// d, released, has been due since t0; b since its retry time.
			got = stepOnce(t, a, t2, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 5, LeaseMS: 60000})
			if len(*got) != 1 || (*got)[0].err != nil {
				t.Fatalf("second claim: %+v", *got)
			}
			jobs := (*got)[0].body.(api.ClaimReply).Jobs
			if len(jobs) != 2 || jobs[0].ID != "d" || jobs[1].ID != "b" {
				t.Fatalf("second claim took %+v, want d then b", jobs)
			}
			want := []time.Duration{t2.Sub(t0), t2.Sub(retryAt.Truncate(time.Microsecond))}
			if waits, _ := obs.take(); !slices.Equal(waits, want) {
				t.Fatalf("waits of the second claim = %v, want %v", waits, want)
			}
		})
	}
}

// Where a step is one transaction, what it reports to the metrics waits
// for its commit: a step whose commit fails wrote nothing, and reports
// nothing; the same step again, committed, reports once.
func TestAStepThatFailsToCommitReportsNothing(t *testing.T) {
	st, faults := faultySQLite(t)
	obs := &countingObserver{}
	deps := &Deps{Store: st, Snapshots: cachebust.New(st, time.Second, nil), Log: slog.New(slog.DiscardHandler), Observer: obs}
	a := NewActor("acme", NewCore("acme", rand.New(rand.NewPCG(1, 2))), deps)
	now := time.Unix(1_000_000, 0)
	stepOnce(t, a, now, OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t"}, {ID: "b", Queue: "q", Task: "t"}}})
	stepOnce(t, a, now, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000})
	before := obs.snapshot()
	if before != (counts{enqueued: 2, claimed: 1}) {
		t.Fatalf("before the failing steps: %+v, want 2 enqueued and 1 claimed", before)
	}

	steps := func() (enq, claim, ack *[]answer) {
		enq = stepOnce(t, a, now, OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{ID: "c", Queue: "q", Task: "t"}}})
		claim = stepOnce(t, a, now, OpClaim, &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000})
		ack = stepOnce(t, a, now, OpAck, &api.AckRequest{ID: "a", Attempt: 1})
		return enq, claim, ack
	}
	faults.armed.Store(true)
	enq, claim, ack := steps()
	for what, got := range map[string]*[]answer{"enqueue": enq, "claim": claim, "ack": ack} {
		if len(*got) != 1 || (*got)[0].err == nil {
			t.Fatalf("%s in a step whose commit failed answered %+v, want an error", what, *got)
		}
	}
	if got := obs.snapshot(); got != before {
		t.Fatalf("after steps whose commits failed: %+v, want nothing more than %+v", got, before)
	}

	faults.armed.Store(false)
	enq, claim, ack = steps()
	for what, got := range map[string]*[]answer{"enqueue": enq, "claim": claim, "ack": ack} {
		if len(*got) != 1 || (*got)[0].err != nil {
			t.Fatalf("%s, committed, answered %+v", what, *got)
		}
	}
	if got, want := obs.snapshot(), (counts{enqueued: 3, claimed: 2, completed: 1}); got != want {
		t.Fatalf("after the steps committed: %+v, want %+v", got, want)
	}
}

type counts struct{ enqueued, claimed, completed int }

// countingObserver counts enqueued, claimed and completed jobs.
type countingObserver struct {
	nopObserver
	mu sync.Mutex
	c  counts
}

func (o *countingObserver) Outcomes(_ string, outcome api.Outcome, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if outcome == api.OutcomeEnqueued {
		o.c.enqueued += n
	}
}

func (o *countingObserver) Claimed(_ string, waits []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.c.claimed += len(waits)
}

func (o *countingObserver) Settled(_ string, s Settled) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.c.completed += s.Completed
}

func (o *countingObserver) snapshot() counts {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.c
}

// Two claims decided in one step each report their own jobs' waits, also
// where the reports wait for the step's commit.
func TestClaimsOfOneStepReportTheirOwnWaits(t *testing.T) {
	ctx := context.Background()
	obs := &recordingObserver{}
	_, st := sqliteActor(t, `{}`, Pace{})
	deps := &Deps{Store: st, Snapshots: cachebust.New(st, time.Second, nil), Log: slog.New(slog.DiscardHandler), Observer: obs}
	a := NewActor("acme", NewCore("acme", rand.New(rand.NewPCG(1, 2))), deps)
	t0 := time.Unix(1_000_000, 0)
	later := t0.Add(time.Second)
	stepOnce(t, a, t0, OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{
		{ID: "x", Queue: "q", Task: "t"}, {ID: "y", Queue: "q", Task: "t", RunAt: &later},
	}})
	var first, second []answer
	a.Send(collect(&Message{Op: OpClaim, Body: &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000}}, &first))
	a.Send(collect(&Message{Op: OpClaim, Body: &api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 60000}}, &second))
	a.Step(ctx, t0.Add(3*time.Second))
	if len(first) != 1 || len(second) != 1 || first[0].err != nil || second[0].err != nil {
		t.Fatalf("claims: %+v %+v", first, second)
	}
	if waits, _ := obs.take(); !slices.Equal(waits, []time.Duration{3 * time.Second, 2 * time.Second}) {
		t.Fatalf("waits = %v, want 3s (x, due since t0) then 2s (y, due since t0+1s)", waits)
	}
}
