package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

func exerciseRead(t *testing.T, newStore Factory) {
	t.Run("JobGetNotFound", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsB, base, newJob("j"))
		_, err := s.JobGet(t.Context(), nsA, "j")
		wantErrIs(t, "JobGet of another namespace's job", err, store.ErrNotFound)
		_, err = s.JobGet(t.Context(), nsA, "never")
		wantErrIs(t, "JobGet of an unknown id", err, store.ErrNotFound)
		if j := getJob(t, s, nsB, "j"); j.Namespace != nsB || j.ID != "j" {
			t.Errorf("JobGet returned %s/%s, want %s/j", j.Namespace, j.ID, nsB)
		}
	})

	// listFixture: in nsA, by enqueue order: c (completed, q1), d (dead,
	// q2), r (running, q1), s (shed, q1), p1 (pending, q1), p2 (pending,
	// delayed, q2); in nsB one pending job in q1.
	listFixture := func(t *testing.T, s store.Store) {
		t.Helper()
		completeJob(t, s, nsA, at(-4*time.Hour), with(newJob("c"), func(j *store.NewJob) { j.Queue = "q1" }))
		killJob(t, s, nsA, at(-3*time.Hour), with(newJob("d"), func(j *store.NewJob) { j.Queue = "q2" }), false)
		runJob(t, s, nsA, at(-2*time.Hour), with(newJob("r"), func(j *store.NewJob) { j.Queue = "q1"; j.RunAt = at(-2 * time.Hour) }))
		shedJob(t, s, nsA, at(-time.Hour), with(newJob("s"), func(j *store.NewJob) { j.Queue = "q1" }))
		mustEnqueue(t, s, nsA, base,
			with(newJob("p1"), func(j *store.NewJob) { j.Queue = "q1" }),
			with(newJob("p2"), func(j *store.NewJob) { j.Queue = "q2"; j.RunAt = at(time.Hour) }),
		)
		mustEnqueue(t, s, nsB, base, with(newJob("b1"), func(j *store.NewJob) { j.Queue = "q1" }))
	}

	t.Run("JobListFilters", func(t *testing.T) {
		s := newStore(t, nil)
		listFixture(t, s)
		for _, tc := range []struct {
			name string
			p    store.JobListParams
			want []string
		}{
			{"all", store.JobListParams{}, []string{"p2", "p1", "s", "r", "d", "c"}},
			{"pending (delayed included)", store.JobListParams{Status: api.StatusPending}, []string{"p2", "p1"}},
			{"running", store.JobListParams{Status: api.StatusRunning}, []string{"r"}},
			{"completed", store.JobListParams{Status: api.StatusCompleted}, []string{"c"}},
			{"dead", store.JobListParams{Status: api.StatusDead}, []string{"s", "d"}},
			{"dead shed", store.JobListParams{Status: api.StatusDead, Shed: boolPtr(true)}, []string{"s"}},
			{"dead not shed", store.JobListParams{Status: api.StatusDead, Shed: boolPtr(false)}, []string{"d"}},
			{"shed", store.JobListParams{Shed: boolPtr(true)}, []string{"s"}},
			{"not shed", store.JobListParams{Shed: boolPtr(false)}, []string{"p2", "p1", "r", "d", "c"}},
			{"queue q1", store.JobListParams{Queue: "q1"}, []string{"p1", "s", "r", "c"}},
			{"queue q2 pending", store.JobListParams{Queue: "q2", Status: api.StatusPending}, []string{"p2"}},
			{"queue q1 shed", store.JobListParams{Queue: "q1", Shed: boolPtr(true)}, []string{"s"}},
			{"unknown queue", store.JobListParams{Queue: "nope"}, nil},
			{"limit 2", store.JobListParams{Limit: 2}, []string{"p2", "p1"}},
			{"limit 1 dead", store.JobListParams{Status: api.StatusDead, Limit: 1}, []string{"s"}},
			{"limit 100", store.JobListParams{Limit: 100}, []string{"p2", "p1", "s", "r", "d", "c"}},
		} {
			tc.p.Namespace = nsA
			wantIDs(t, "JobList "+tc.name, list(t, s, tc.p), tc.want...)
		}
		wantIDs(t, "JobList of the other namespace", list(t, s, store.JobListParams{Namespace: nsB}), "b1")
		wantIDs(t, "JobList of an empty namespace", list(t, s, store.JobListParams{Namespace: "empty"}))
	})

	t.Run("JobListReturnsWholeJobs", func(t *testing.T) {
		s := newStore(t, nil)
		listFixture(t, s)
		for _, j := range listAll(t, s, nsA) {
			wantJob(t, "JobList entry "+j.ID, j, getJob(t, s, nsA, j.ID))
		}
	})

	t.Run("JobListBeforeSeqPages", func(t *testing.T) {
		s := newStore(t, nil)
		listFixture(t, s)
		all := listAll(t, s, nsA)
		if len(all) != 6 {
			t.Fatalf("JobList: %d jobs, want 6", len(all))
		}
		for i := 1; i < len(all); i++ {
			if all[i].Seq >= all[i-1].Seq {
				t.Errorf("JobList not newest first: %s (Seq %d) after %s (Seq %d)", all[i].ID, all[i].Seq, all[i-1].ID, all[i-1].Seq)
			}
		}
		wantIDs(t, "JobList before p1's Seq", list(t, s, store.JobListParams{Namespace: nsA, BeforeSeq: all[1].Seq}), "s", "r", "d", "c")
		wantIDs(t, "JobList before c's Seq", list(t, s, store.JobListParams{Namespace: nsA, BeforeSeq: all[5].Seq}))
		wantIDs(t, "JobList dead before r's Seq", list(t, s, store.JobListParams{Namespace: nsA, Status: api.StatusDead, BeforeSeq: all[3].Seq}), "d")

		// Paging two at a time walks every job once, in order.
		var got []store.Job
		var before int64
		for page := 0; page < 10; page++ {
			jobs := list(t, s, store.JobListParams{Namespace: nsA, BeforeSeq: before, Limit: 2})
			if len(jobs) == 0 {
				break
			}
			got = append(got, jobs...)
			before = jobs[len(jobs)-1].Seq
		}
		wantIDs(t, "JobList paged by 2", got, "p2", "p1", "s", "r", "d", "c")
	})

	t.Run("JobListLimitZeroIsUnlimited", func(t *testing.T) {
		s := newStore(t, nil)
		var jobs []store.NewJob
		for i := range 120 {
			jobs = append(jobs, newJob(fmt.Sprintf("j%03d", i)))
		}
		mustEnqueue(t, s, nsA, base, jobs...)
		if got := list(t, s, store.JobListParams{Namespace: nsA}); len(got) != 120 {
			t.Errorf("JobList with Limit 0 returned %d of 120 jobs; an empty field does not filter", len(got))
		}
	})

	t.Run("JobCount", func(t *testing.T) {
		s := newStore(t, nil)
		wantCounts(t, s, nsA, store.Counts{})
		listFixture(t, s)
		wantCounts(t, s, nsA, store.Counts{Pending: 2, Running: 1, Completed: 1, Dead: 2})
		wantCounts(t, s, nsB, store.Counts{Pending: 1})
		wantCounts(t, s, "empty", store.Counts{})
	})

	t.Run("JobListRunning", func(t *testing.T) {
		s := newStore(t, nil)
		wantIDs(t, "JobListRunning of an empty store", listRunning(t, s, nsA))
		listFixture(t, s)
		runJob(t, s, nsA, base, with(newJob("r2"), func(j *store.NewJob) { j.Queue = "q9" }))
		runJob(t, s, nsB, base, with(newJob("rb"), func(j *store.NewJob) { j.Queue = "q9" }))
		got := listRunning(t, s, nsA)
		wantSameIDs(t, "JobListRunning", got, "r", "r2")
		for _, j := range got {
			wantJob(t, "running job "+j.ID, j, getJob(t, s, nsA, j.ID))
			if j.LeaseUntil.IsZero() || j.Worker == "" {
				t.Errorf("running job %s listed without lease or worker", j.ID)
			}
		}
		wantSameIDs(t, "JobListRunning of the other namespace", listRunning(t, s, nsB), "rb")
	})

	t.Run("JobRunningNamespaces", func(t *testing.T) {
		s := newStore(t, nil)
		wantNamespaces := func(what string, want ...string) {
			t.Helper()
			got, err := s.JobRunningNamespaces(t.Context())
			if err != nil {
				t.Fatalf("%s: JobRunningNamespaces: %v", what, err)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: JobRunningNamespaces = %q, want %q", what, got, want)
			}
		}
		wantNamespaces("an empty store")
		listFixture(t, s) // nsA has one running job, nsB pending ones only
		odd := "odd:ns*[x]?"
		rb := runJob(t, s, nsB, base, with(newJob("rb"), func(j *store.NewJob) { j.Queue = "q9" }))
		runJob(t, s, odd, base, newJob("ro"))
		runJob(t, s, odd, base, newJob("ro2"))
		completeJob(t, s, "done", base, newJob("c"))
		wantNamespaces("after claims", nsA, nsB, odd)
		killRunning(t, s, nsB, at(time.Second), rb, false)
		wantNamespaces("after nsB's running job died", nsA, odd)
	})

	t.Run("JobListDeadRetryable", func(t *testing.T) {
		s := newStore(t, nil)
		dq := func(id string) store.NewJob { return with(newJob(id), func(j *store.NewJob) { j.Queue = "dq" }) }
		// r1 was auto-retried once and died again at -4h.
		killJob(t, s, nsA, at(-8*time.Hour), dq("r1"), false)
		replay(t, s, nsA, at(-6*time.Hour), store.EnqueueCall{ReplayIDs: []string{"r1"}, AutoRetry: true})
		killRunning(t, s, nsA, at(-4*time.Hour), claimJob(t, s, nsA, at(-5*time.Hour), "r1", "dq"), false)
		killJob(t, s, nsA, at(-3*time.Hour), dq("d1"), false)
		killJob(t, s, nsA, at(-2*time.Hour), dq("noretry"), true)
		shedJob(t, s, nsA, at(-150*time.Minute), dq("shed"))
		killJob(t, s, nsA, at(-time.Hour), dq("d4"), false) // exactly at DeadBefore
		killJob(t, s, nsA, at(-30*time.Minute), dq("young"), false)
		killJob(t, s, nsA, at(-3*time.Hour), newJob("otherq"), false)
		killJob(t, s, nsB, at(-3*time.Hour), dq("otherns"), false)
		completeJob(t, s, nsA, at(-3*time.Hour), dq("completed"))
		mustEnqueue(t, s, nsA, at(-3*time.Hour), with(dq("pending"), func(j *store.NewJob) { j.RunAt = at(time.Hour) }))
		if got := getJob(t, s, nsA, "r1"); got.DeadReplays != 1 || got.Status != api.StatusDead {
			t.Fatalf("setup: r1 status %s DeadReplays %d, want dead 1", got.Status, got.DeadReplays)
		}

		retryable := func(maxReplays int64, limit int) []store.Job {
			t.Helper()
			jobs, err := s.JobListDeadRetryable(t.Context(), store.JobListDeadRetryableParams{
				Namespace: nsA, Queue: "dq", DeadBefore: at(-time.Hour), MaxReplays: maxReplays, Limit: limit,
			})
			if err != nil {
				t.Fatalf("JobListDeadRetryable: %v", err)
			}
			return jobs
		}
		wantIDs(t, "MaxReplays 1 (r1 used its replay)", retryable(1, 100), "d1", "d4")
		wantIDs(t, "MaxReplays 2, oldest first", retryable(2, 100), "r1", "d1", "d4")
		wantIDs(t, "MaxReplays 2, limit 2", retryable(2, 2), "r1", "d1")
		wantIDs(t, "MaxReplays 0", retryable(0, 100))
		for _, j := range retryable(2, 100) {
			wantJob(t, "retryable job "+j.ID, j, getJob(t, s, nsA, j.ID))
		}
	})
}

func exerciseNextRunAt(t *testing.T, newStore Factory) {
	next := func(t *testing.T, s store.Store, ns string, queues ...string) (time.Time, bool) {
		t.Helper()
		got, ok, err := s.JobNextRunAt(t.Context(), ns, queues)
		if err != nil {
			t.Fatalf("JobNextRunAt: %v", err)
		}
		return got, ok
	}
	t.Run("NoneWhenNothingDelayed", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base, newJob("due"))
		if got, ok := next(t, s, nsA, "q"); ok {
			t.Fatalf("JobNextRunAt with only due jobs = %v, want none", got)
		}
	})
	t.Run("EarliestOfTheQueues", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base,
			with(newJob("a"), func(j *store.NewJob) { j.Queue = "q1"; j.RunAt = at(3 * time.Minute) }),
			with(newJob("b"), func(j *store.NewJob) { j.Queue = "q2"; j.RunAt = at(2 * time.Minute) }),
			with(newJob("c"), func(j *store.NewJob) { j.Queue = "q3"; j.RunAt = at(time.Minute) }),
		)
		mustEnqueue(t, s, nsB, base, with(newJob("x"), func(j *store.NewJob) { j.Queue = "q1"; j.RunAt = at(time.Second) }))
		got, ok := next(t, s, nsA, "q1", "q2")
		if !ok {
			t.Fatal("JobNextRunAt found nothing, want b's run_at")
		}
		all, ok := next(t, s, nsA)
		if !ok {
			t.Fatal("JobNextRunAt of every queue found nothing")
		}
		wantTime(t, "next run_at of the namespace", all, at(time.Minute))
		wantTime(t, "next run_at of q1,q2", got, at(2*time.Minute))
		// Once claimed the job no longer counts.
		if jobs := claimOnce(t, s, nsA, at(2*time.Minute), 10, "q2"); len(jobs) != 1 || jobs[0].ID != "b" {
			t.Fatalf("claim at b's run_at got %v, want [b]", ids(jobs))
		}
		got, _ = next(t, s, nsA, "q1", "q2")
		wantTime(t, "next run_at after b ran", got, at(3*time.Minute))
	})
	t.Run("RetryBackoffCounts", func(t *testing.T) {
		s := newStore(t, nil)
		r := runJob(t, s, nsA, base, newJob("r"))
		update(t, s, nsA, base, store.JobUpdate{ID: r.ID, Attempt: r.Attempt, Kind: store.UpdateRetry, RunAt: at(time.Hour), Error: "boom"})
		got, ok := next(t, s, nsA, "q")
		if !ok {
			t.Fatal("JobNextRunAt found nothing after a retry with backoff")
		}
		wantTime(t, "next run_at after retry", got, at(time.Hour))
	})
}
