package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

func exerciseUpdate(t *testing.T, newStore Factory) {
	// running starts job id in its own queue and returns it as stored.
	running := func(t *testing.T, s store.Store, id string) store.Job {
		t.Helper()
		runJob(t, s, nsA, base, with(newJob(id), func(j *store.NewJob) { j.Queue = "q-" + id; j.MaxAttempts = 3 }))
		return getJob(t, s, nsA, id)
	}
	now := at(10 * time.Second)

	t.Run("Complete", func(t *testing.T) {
		s := newStore(t, nil)
		r := running(t, s, "j")
		applied := update(t, s, nsA, now, store.JobUpdate{ID: "j", Attempt: 1, Kind: store.UpdateComplete, Result: []byte(`{"sent":true}`)})
		if !applied[0] {
			t.Fatal("complete of a running job not applied")
		}
		want := r
		want.Status = api.StatusCompleted
		want.Result = []byte(`{"sent":true}`)
		want.FinishedAt = now
		want.LeaseUntil = time.Time{}
		want.Worker = getJob(t, s, nsA, "j").Worker // kept or cleared: not part of the contract
		wantJob(t, "completed job", getJob(t, s, nsA, "j"), want)
		wantCounts(t, s, nsA, store.Counts{Completed: 1})
		wantIDs(t, "JobListRunning", listRunning(t, s, nsA))
	})

	t.Run("CompleteWithoutResult", func(t *testing.T) {
		s := newStore(t, nil)
		running(t, s, "j")
		update(t, s, nsA, now, store.JobUpdate{ID: "j", Attempt: 1, Kind: store.UpdateComplete})
		got := getJob(t, s, nsA, "j")
		if got.Status != api.StatusCompleted || len(got.Result) != 0 {
			t.Errorf("completed without result: status %s result %s, want completed and no result", got.Status, showBytes(got.Result))
		}
	})

	t.Run("Retry", func(t *testing.T) {
		s := newStore(t, nil)
		r := running(t, s, "j")
		runAt := now.Add(5 * time.Second)
		applied := update(t, s, nsA, now, store.JobUpdate{ID: "j", Attempt: 1, Kind: store.UpdateRetry, Error: "timeout talking to smtp", RunAt: runAt})
		if !applied[0] {
			t.Fatal("retry of a running job not applied")
		}
		got := getJob(t, s, nsA, "j")
		want := r
		want.Status = api.StatusPending
		want.RunAt = runAt
		want.Error = "timeout talking to smtp"
		want.LeaseUntil = time.Time{}
		want.Worker = got.Worker // not part of the contract
		wantJob(t, "retried job", got, want)
		wantCounts(t, s, nsA, store.Counts{Pending: 1})
		wantIDs(t, "claim before the retry's run_at", claimOnce(t, s, nsA, runAt.Add(-time.Millisecond), 10, "q-j"))
		c := claimOnce(t, s, nsA, runAt, 10, "q-j")
		if len(c) != 1 || c[0].Attempt != 2 {
			t.Errorf("claim at the retry's run_at got %+v, want j at attempt 2", c)
		}
	})

	t.Run("Dead", func(t *testing.T) {
		for _, noRetry := range []bool{false, true} {
			t.Run(fmt.Sprintf("NoRetry=%t", noRetry), func(t *testing.T) {
				s := newStore(t, nil)
				r := running(t, s, "j")
				applied := update(t, s, nsA, now, store.JobUpdate{ID: "j", Attempt: 1, Kind: store.UpdateDead, Error: "bad input", NoRetry: noRetry})
				if !applied[0] {
					t.Fatal("dead of a running job not applied")
				}
				got := getJob(t, s, nsA, "j")
				want := r
				want.Status = api.StatusDead
				want.Error = "bad input"
				want.FinishedAt = now
				want.NoRetry = noRetry
				want.LeaseUntil = time.Time{}
				want.Worker = got.Worker // not part of the contract
				wantJob(t, "dead job", got, want)
				wantCounts(t, s, nsA, store.Counts{Dead: 1})
			})
		}
	})

	t.Run("Extend", func(t *testing.T) {
		s := newStore(t, nil)
		r := running(t, s, "j")
		lease := at(5 * time.Minute)
		applied := update(t, s, nsA, now, store.JobUpdate{ID: "j", Attempt: 1, Kind: store.UpdateExtend, LeaseUntil: lease})
		if !applied[0] {
			t.Fatal("extend of a running job not applied")
		}
		want := r
		want.LeaseUntil = lease
		wantJob(t, "extended job", getJob(t, s, nsA, "j"), want)
		wantJob(t, "JobListRunning", listRunning(t, s, nsA)[0], want)
	})

	t.Run("Release", func(t *testing.T) {
		s := newStore(t, nil)
		// j failed once (its error kept), was claimed again as attempt 2,
		// then given back unstarted: pending as before that claim, ahead
		// of k, due after it, and its debounce key its own again.
		mustEnqueue(t, s, nsA, base, with(newJob("j"), func(j *store.NewJob) { j.Queue = "rq"; j.DebounceKey = "dk" }))
		claimJob(t, s, nsA, base, "j", "rq")
		update(t, s, nsA, base, store.JobUpdate{ID: "j", Attempt: 1, Kind: store.UpdateRetry, Error: "first try failed", RunAt: base})
		before := getJob(t, s, nsA, "j")
		claimJob(t, s, nsA, at(time.Second), "j", "rq")
		mustEnqueue(t, s, nsA, at(2*time.Second), with(newJob("k"), func(j *store.NewJob) { j.Queue = "rq"; j.RunAt = at(2 * time.Second) }))
		applied := update(t, s, nsA, now, store.JobUpdate{ID: "j", Attempt: 2, Kind: store.UpdateRelease})
		if !applied[0] {
			t.Fatal("release of a running job not applied")
		}
		got := getJob(t, s, nsA, "j")
		want := before
		want.Worker = got.Worker // kept or cleared: not part of the contract
		wantJob(t, "released job", got, want)
		wantCounts(t, s, nsA, store.Counts{Pending: 2})
		wantIDs(t, "JobListRunning", listRunning(t, s, nsA))
		// Taken first again, as attempt 2.
		again := claimOnce(t, s, nsA, at(time.Minute), 1, "rq")
		wantIDs(t, "claim after the release", again, "j")
		if again[0].Attempt != 2 {
			t.Fatalf("claimed again as attempt %d, want 2", again[0].Attempt)
		}
		// A second debounced job while j ran takes the key; a release
		// then leaves j without it.
		mustEnqueue(t, s, nsA, at(time.Minute), with(newJob("d2"), func(j *store.NewJob) { j.Queue = "rq2"; j.DebounceKey = "dk" }))
		update(t, s, nsA, at(time.Minute), store.JobUpdate{ID: "j", Attempt: 2, Kind: store.UpdateRelease})
		if got := getJob(t, s, nsA, "j"); got.DebounceKey != "" || got.Status != api.StatusPending || got.Attempt != 1 {
			t.Fatalf("released while another job holds its debounce key: status %s attempt %d key %q", got.Status, got.Attempt, got.DebounceKey)
		}
	})

	t.Run("StaleAttemptNotApplied", func(t *testing.T) {
		s := newStore(t, nil)
		running(t, s, "j")
		// Attempt 1 expires and the job is claimed again as attempt 2.
		update(t, s, nsA, now, store.JobUpdate{ID: "j", Attempt: 1, Kind: store.UpdateRetry, Error: "lease expired", RunAt: now})
		claimJob(t, s, nsA, now, "j", "q-j")
		cur := getJob(t, s, nsA, "j")
		if cur.Attempt != 2 {
			t.Fatalf("setup: attempt %d, want 2", cur.Attempt)
		}
		for _, kind := range []store.UpdateKind{store.UpdateComplete, store.UpdateRetry, store.UpdateDead, store.UpdateExtend, store.UpdateRelease} {
			applied := update(t, s, nsA, at(time.Minute), store.JobUpdate{
				ID: "j", Attempt: 1, Kind: kind,
				Result: []byte(`"late"`), Error: "late", RunAt: at(time.Hour), LeaseUntil: at(time.Hour), NoRetry: true,
			})
			if applied[0] {
				t.Errorf("update kind %d with the previous attempt applied", kind)
			}
			wantUnchanged(t, s, cur)
		}
	})

	t.Run("NotRunningNotApplied", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base, newJob("pending"))
		completeJob(t, s, nsA, base, with(newJob("completed"), func(j *store.NewJob) { j.Queue = "qc" }))
		killJob(t, s, nsA, base, with(newJob("dead"), func(j *store.NewJob) { j.Queue = "qd" }), false)
		runJob(t, s, nsB, base, newJob("other-ns"))
		before := map[string]store.Job{}
		for _, id := range []string{"pending", "completed", "dead"} {
			before[id] = getJob(t, s, nsA, id)
		}
		nsB := getJob(t, s, nsB, "other-ns")
		for _, kind := range []store.UpdateKind{store.UpdateComplete, store.UpdateRetry, store.UpdateDead, store.UpdateExtend, store.UpdateRelease} {
			for _, tc := range []struct {
				id      string
				attempt int64
			}{{"pending", 0}, {"pending", 1}, {"completed", 1}, {"dead", 1}, {"other-ns", 1}, {"unknown", 1}} {
				applied := update(t, s, nsA, at(time.Minute), store.JobUpdate{
					ID: tc.id, Attempt: tc.attempt, Kind: kind,
					Result: []byte(`"late"`), Error: "late", RunAt: at(time.Hour), LeaseUntil: at(time.Hour),
				})
				if applied[0] {
					t.Errorf("update kind %d of %s (attempt %d) applied", kind, tc.id, tc.attempt)
				}
			}
		}
		for _, j := range before {
			wantUnchanged(t, s, j)
		}
		wantUnchanged(t, s, nsB)
		wantNoJob(t, s, nsA, "unknown")
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Completed: 1, Dead: 1})
	})

	t.Run("GroupAppliesInOrder", func(t *testing.T) {
		s := newStore(t, nil)
		for _, id := range []string{"a", "b", "c", "d"} {
			running(t, s, id)
		}
		applied := update(t, s, nsA, now,
			store.JobUpdate{ID: "a", Attempt: 1, Kind: store.UpdateExtend, LeaseUntil: at(time.Hour)},
			store.JobUpdate{ID: "a", Attempt: 1, Kind: store.UpdateComplete, Result: []byte(`1`)},
			store.JobUpdate{ID: "b", Attempt: 1, Kind: store.UpdateComplete, Result: []byte(`2`)},
			store.JobUpdate{ID: "b", Attempt: 1, Kind: store.UpdateExtend, LeaseUntil: at(time.Hour)}, // b no longer running
			store.JobUpdate{ID: "c", Attempt: 2, Kind: store.UpdateComplete},                          // wrong attempt
			store.JobUpdate{ID: "c", Attempt: 1, Kind: store.UpdateRetry, Error: "e", RunAt: at(time.Minute)},
			store.JobUpdate{ID: "d", Attempt: 1, Kind: store.UpdateDead, Error: "x", NoRetry: true},
			store.JobUpdate{ID: "d", Attempt: 1, Kind: store.UpdateRetry, Error: "y", RunAt: at(time.Minute)}, // d is dead
		)
		if want := []bool{true, true, true, false, false, true, true, false}; fmt.Sprint(applied) != fmt.Sprint(want) {
			t.Errorf("applied = %v, want %v", applied, want)
		}
		for id, st := range map[string]api.Status{"a": api.StatusCompleted, "b": api.StatusCompleted, "c": api.StatusPending, "d": api.StatusDead} {
			if got := getJob(t, s, nsA, id); got.Status != st {
				t.Errorf("job %s: status %s, want %s", id, got.Status, st)
			}
		}
		if got := getJob(t, s, nsA, "d"); got.Error != "x" || !got.NoRetry {
			t.Errorf("job d: error %q NoRetry %t, want x true (the later retry must not apply)", got.Error, got.NoRetry)
		}
		if got := getJob(t, s, nsA, "b"); !got.LeaseUntil.IsZero() {
			t.Errorf("job b: LeaseUntil %s after completing, want zero", fmtTime(got.LeaseUntil))
		}
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Completed: 2, Dead: 1})
	})

	// Plain acks (no result) are the hot path; a backend may write a
	// group's worth at once, but each must come out as if applied alone
	// and in order.
	t.Run("PlainAcksInOneGroup", func(t *testing.T) {
		s := newStore(t, nil)
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			running(t, s, id)
		}
		runJob(t, s, nsB, base, with(newJob("g"), func(j *store.NewJob) { j.Queue = "q-g" }))
		applied := update(t, s, nsA, now,
			store.JobUpdate{ID: "a", Attempt: 1, Kind: store.UpdateComplete},
			store.JobUpdate{ID: "b", Attempt: 2, Kind: store.UpdateComplete}, // wrong attempt
			store.JobUpdate{ID: "c", Attempt: 1, Kind: store.UpdateExtend, LeaseUntil: at(time.Hour)},
			store.JobUpdate{ID: "c", Attempt: 1, Kind: store.UpdateComplete},
			store.JobUpdate{ID: "d", Attempt: 1, Kind: store.UpdateComplete},
			store.JobUpdate{ID: "d", Attempt: 1, Kind: store.UpdateComplete},  // already completed
			store.JobUpdate{ID: "zz", Attempt: 1, Kind: store.UpdateComplete}, // no such job
			store.JobUpdate{ID: "g", Attempt: 1, Kind: store.UpdateComplete},  // another namespace's
			store.JobUpdate{ID: "e", Attempt: 1, Kind: store.UpdateComplete},
			store.JobUpdate{ID: "f", Attempt: 1, Kind: store.UpdateRetry, Error: "e", RunAt: at(time.Minute)},
		)
		if want := []bool{true, false, true, true, true, false, false, false, true, true}; fmt.Sprint(applied) != fmt.Sprint(want) {
			t.Errorf("applied = %v, want %v", applied, want)
		}
		for id, st := range map[string]api.Status{"a": api.StatusCompleted, "b": api.StatusRunning, "c": api.StatusCompleted,
			"d": api.StatusCompleted, "e": api.StatusCompleted, "f": api.StatusPending} {
			got := getJob(t, s, nsA, id)
			if got.Status != st {
				t.Errorf("job %s: status %s, want %s", id, got.Status, st)
			}
			if st == api.StatusCompleted && (!got.FinishedAt.Equal(now) || !got.LeaseUntil.IsZero() || len(got.Result) != 0) {
				t.Errorf("job %s: finished %s lease %s result %s, want finished %s, no lease, no result",
					id, fmtTime(got.FinishedAt), fmtTime(got.LeaseUntil), showBytes(got.Result), fmtTime(now))
			}
		}
		if got := getJob(t, s, nsB, "g"); got.Status != api.StatusRunning {
			t.Errorf("other namespace's job g: status %s, want running", got.Status)
		}
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Running: 1, Completed: 4})
		wantIDs(t, "JobListRunning", listRunning(t, s, nsA), "b")
	})
}
