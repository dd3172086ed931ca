package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

func exerciseDelete(t *testing.T, newStore Factory) {
	deleteBefore := func(t *testing.T, s store.Store, status api.Status, before time.Time, limit int) int64 {
		t.Helper()
		n, err := s.JobDeleteFinishedBefore(t.Context(), store.JobDeleteFinishedBeforeParams{Status: status, Before: before, Limit: limit})
		if err != nil {
			t.Fatalf("JobDeleteFinishedBefore(%s, %s, %d): %v", status, fmtTime(before), limit, err)
		}
		return n
	}
	overCeiling := func(t *testing.T, s store.Store, ns string, status api.Status, keep int64, limit int) int64 {
		t.Helper()
		n, err := s.JobDeleteOverCeiling(t.Context(), store.JobDeleteOverCeilingParams{Namespace: ns, Status: status, Keep: keep, Limit: limit})
		if err != nil {
			t.Fatalf("JobDeleteOverCeiling(%s, %s, keep %d, limit %d): %v", ns, status, keep, limit, err)
		}
		return n
	}
	wantN := func(t *testing.T, what string, got, want int64) {
		t.Helper()
		if got != want {
			t.Errorf("%s deleted %d, want %d", what, got, want)
		}
	}

	// ttlFixture: completed and dead jobs in two namespaces, plus pending
	// and running jobs whose run_at (and zero finished_at) is long past.
	ttlFixture := func(t *testing.T, s store.Store) {
		t.Helper()
		completeJob(t, s, nsA, at(-3*time.Hour), newJob("c3"))
		completeJob(t, s, nsA, at(-2*time.Hour), newJob("c2"))
		completeJob(t, s, nsA, at(-time.Hour), newJob("c1")) // exactly at the cutoff: kept
		completeJob(t, s, nsB, at(-150*time.Minute), newJob("cb"))
		killJob(t, s, nsA, at(-3*time.Hour), newJob("d3"), false)
		shedJob(t, s, nsB, at(-3*time.Hour), newJob("db"))
		runJob(t, s, nsA, at(-48*time.Hour), with(newJob("run"), func(j *store.NewJob) { j.RunAt = at(-48 * time.Hour) }))
		mustEnqueue(t, s, nsA, at(-48*time.Hour), with(newJob("pend"), func(j *store.NewJob) { j.RunAt = at(-48 * time.Hour) }))
	}

	t.Run("FinishedBefore", func(t *testing.T) {
		s := newStore(t, nil)
		ttlFixture(t, s)
		wantN(t, "completed before -1h", deleteBefore(t, s, api.StatusCompleted, at(-time.Hour), 100), 3)
		for _, id := range []string{"c3", "c2"} {
			wantNoJob(t, s, nsA, id)
		}
		wantNoJob(t, s, nsB, "cb")
		getJob(t, s, nsA, "c1")
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Running: 1, Completed: 1, Dead: 1})
		wantCounts(t, s, nsB, store.Counts{Dead: 1})

		wantN(t, "dead before -1h", deleteBefore(t, s, api.StatusDead, at(-time.Hour), 100), 2)
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Running: 1, Completed: 1})
		wantCounts(t, s, nsB, store.Counts{})

		wantN(t, "completed before +1h", deleteBefore(t, s, api.StatusCompleted, at(time.Hour), 100), 1)
		wantN(t, "nothing left", deleteBefore(t, s, api.StatusCompleted, at(100*time.Hour), 100), 0)
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Running: 1})
	})

	t.Run("FinishedBeforeNeverPendingOrRunning", func(t *testing.T) {
		s := newStore(t, nil)
		ttlFixture(t, s)
		for _, st := range []api.Status{api.StatusPending, api.StatusRunning} {
			n, err := s.JobDeleteFinishedBefore(t.Context(), store.JobDeleteFinishedBeforeParams{Status: st, Before: at(100 * time.Hour), Limit: 100})
			if err == nil && n != 0 {
				t.Errorf("JobDeleteFinishedBefore with status %s deleted %d jobs", st, n)
			}
		}
		deleteBefore(t, s, api.StatusCompleted, at(100*time.Hour), 100)
		deleteBefore(t, s, api.StatusDead, at(100*time.Hour), 100)
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Running: 1})
		getJob(t, s, nsA, "run")
		getJob(t, s, nsA, "pend")
	})

	// A namespace whose quota cannot be read loses nothing to the TTL
	// sweep; the rows of others behind its oldest still go, in order.
	t.Run("FinishedBeforeSkips", func(t *testing.T) {
		s := newStore(t, nil)
		for i := range 4 { // nsA's rows are the oldest
			completeJob(t, s, nsA, at(time.Duration(-20+i)*time.Hour), newJob(fmt.Sprintf("a%d", i)))
		}
		completeJob(t, s, nsB, at(-10*time.Hour), newJob("b0"))
		completeJob(t, s, nsB, at(-9*time.Hour), newJob("b1"))
		completeJob(t, s, nsB, at(-time.Minute), newJob("young"))
		skipA := func(limit int) int64 {
			t.Helper()
			n, err := s.JobDeleteFinishedBefore(t.Context(), store.JobDeleteFinishedBeforeParams{
				Status: api.StatusCompleted, Before: at(-time.Hour), Limit: limit, Skip: []string{nsA}})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		wantN(t, "skipping nsA, limit 1", skipA(1), 1)
		wantNoJob(t, s, nsB, "b0")
		getJob(t, s, nsB, "b1")
		wantN(t, "skipping nsA, limit 10", skipA(10), 1)
		wantN(t, "skipping nsA, nothing left", skipA(10), 0)
		wantCounts(t, s, nsA, store.Counts{Completed: 4})
		wantCounts(t, s, nsB, store.Counts{Completed: 1})
		// Not skipped, nsA's go too.
		wantN(t, "no skip", deleteBefore(t, s, api.StatusCompleted, at(-time.Hour), 10), 4)
	})

	t.Run("FinishedBeforeLimit", func(t *testing.T) {
		s := newStore(t, nil)
		for i := range 5 {
			completeJob(t, s, []string{nsA, nsB}[i%2], at(time.Duration(-10+i)*time.Hour), newJob(fmt.Sprintf("c%d", i)))
		}
		wantN(t, "first batch", deleteBefore(t, s, api.StatusCompleted, base, 2), 2)
		wantN(t, "second batch", deleteBefore(t, s, api.StatusCompleted, base, 2), 2)
		wantN(t, "third batch", deleteBefore(t, s, api.StatusCompleted, base, 2), 1)
		wantN(t, "fourth batch", deleteBefore(t, s, api.StatusCompleted, base, 2), 0)
		wantCounts(t, s, nsA, store.Counts{})
		wantCounts(t, s, nsB, store.Counts{})
	})

	// ceilingFixture: five completed jobs in nsA whose finish order differs
	// from their enqueue order (finished at -5h for c0, -1h for c1, -3h c2,
	// -2h c3, -4h c4), two completed jobs in nsB and two dead in nsA.
	ceilingFixture := func(t *testing.T, s store.Store) {
		t.Helper()
		for i, h := range []int{5, 1, 3, 2, 4} {
			completeJob(t, s, nsA, at(time.Duration(-h)*time.Hour), newJob(fmt.Sprintf("c%d", i)))
		}
		completeJob(t, s, nsB, at(-10*time.Hour), newJob("b0"))
		completeJob(t, s, nsB, at(-9*time.Hour), newJob("b1"))
		killJob(t, s, nsA, at(-10*time.Hour), newJob("d0"), false)
		killJob(t, s, nsA, at(-9*time.Hour), newJob("d1"), false)
	}

	t.Run("OverCeiling", func(t *testing.T) {
		s := newStore(t, nil)
		ceilingFixture(t, s)
		wantN(t, "keep 2, limit 2", overCeiling(t, s, nsA, api.StatusCompleted, 2, 2), 2)
		// The oldest two by finished_at: c0 (-5h) and c4 (-4h).
		wantIDs(t, "completed after one batch", list(t, s, store.JobListParams{Namespace: nsA, Status: api.StatusCompleted}), "c3", "c2", "c1")
		wantN(t, "keep 2, second batch", overCeiling(t, s, nsA, api.StatusCompleted, 2, 2), 1)
		wantIDs(t, "completed after convergence", list(t, s, store.JobListParams{Namespace: nsA, Status: api.StatusCompleted}), "c3", "c1")
		wantN(t, "keep 2, converged", overCeiling(t, s, nsA, api.StatusCompleted, 2, 2), 0)
		wantCounts(t, s, nsA, store.Counts{Completed: 2, Dead: 2})
		wantCounts(t, s, nsB, store.Counts{Completed: 2})
	})

	t.Run("OverCeilingKeepZero", func(t *testing.T) {
		s := newStore(t, nil)
		ceilingFixture(t, s)
		wantN(t, "dead, keep 0", overCeiling(t, s, nsA, api.StatusDead, 0, 100), 2)
		wantCounts(t, s, nsA, store.Counts{Completed: 5})
		wantN(t, "completed, keep 0, limit 3", overCeiling(t, s, nsA, api.StatusCompleted, 0, 3), 3)
		wantIDs(t, "completed left", list(t, s, store.JobListParams{Namespace: nsA, Status: api.StatusCompleted}), "c3", "c1")
		wantCounts(t, s, nsB, store.Counts{Completed: 2})
	})

	t.Run("OverCeilingUnderCeiling", func(t *testing.T) {
		s := newStore(t, nil)
		ceilingFixture(t, s)
		wantN(t, "keep 5 of 5", overCeiling(t, s, nsA, api.StatusCompleted, 5, 100), 0)
		wantN(t, "keep 50 of 5", overCeiling(t, s, nsA, api.StatusCompleted, 50, 100), 0)
		wantN(t, "empty namespace", overCeiling(t, s, "empty", api.StatusCompleted, 0, 100), 0)
		wantCounts(t, s, nsA, store.Counts{Completed: 5, Dead: 2})
	})

	t.Run("OverCeilingNeverPendingOrRunning", func(t *testing.T) {
		s := newStore(t, nil)
		ceilingFixture(t, s)
		runJob(t, s, nsA, base, with(newJob("run"), func(j *store.NewJob) { j.Queue = "qr" }))
		mustEnqueue(t, s, nsA, base, newJob("pend"))
		for _, st := range []api.Status{api.StatusPending, api.StatusRunning} {
			n, err := s.JobDeleteOverCeiling(t.Context(), store.JobDeleteOverCeilingParams{Namespace: nsA, Status: st, Keep: 0, Limit: 100})
			if err == nil && n != 0 {
				t.Errorf("JobDeleteOverCeiling with status %s deleted %d jobs", st, n)
			}
		}
		overCeiling(t, s, nsA, api.StatusCompleted, 0, 100)
		overCeiling(t, s, nsA, api.StatusDead, 0, 100)
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Running: 1})
	})
}
