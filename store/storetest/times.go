package storetest

import (
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// docs/protocol.md lets a job run at any time from 1970-01-01T00:00:00Z to the end
// of 9999; every such time comes back as sent, to the microsecond, on every
// path that writes run_at (insert, coalesce, retry). Unix nanoseconds stop
// in 2262 and a double is exact to the microsecond only until 2255, so
// these are the times a backend is most likely to bend.
var edgeTimes = []struct {
	id string
	at time.Time
}{
	{"epoch", time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)},
	{"y2300", time.Date(2300, 6, 1, 12, 34, 56, 123456000, time.UTC)},
	{"y9999", time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
}

func exerciseTimes(t *testing.T, newStore Factory) {
	wantExact := func(t *testing.T, what string, got, want time.Time) {
		t.Helper()
		if !got.Equal(want) {
			t.Errorf("%s: run_at %s, want %s", what, fmtTime(got), fmtTime(want))
		}
	}

	t.Run("RunAtInRangeReadBackExactly", func(t *testing.T) {
		s := newStore(t, nil)
		var jobs []store.NewJob
		for _, e := range edgeTimes {
			jobs = append(jobs, with(newJob(e.id), func(j *store.NewJob) { j.RunAt = e.at }))
		}
		// Keyed jobs take another write path in some backends.
		for _, e := range edgeTimes {
			jobs = append(jobs, with(newJob("keyed-"+e.id), func(j *store.NewJob) { j.RunAt = e.at; j.UniqueKey = "u-" + e.id }))
		}
		mustEnqueue(t, s, nsA, base, jobs...)
		for _, e := range edgeTimes {
			for _, id := range []string{e.id, "keyed-" + e.id} {
				wantExact(t, "JobGet "+id, getJob(t, s, nsA, id).RunAt, e.at)
			}
		}
		for _, j := range listAll(t, s, nsA) {
			for _, e := range edgeTimes {
				if j.ID == e.id || j.ID == "keyed-"+e.id {
					wantExact(t, "JobList "+j.ID, j.RunAt, e.at)
				}
			}
		}
		// The earliest future one is next; only the 1970 ones are due.
		next, ok, err := s.JobNextRunAt(t.Context(), nsA, nil)
		if err != nil || !ok {
			t.Fatalf("JobNextRunAt = %v, %t, %v; want the 2300 run_at", next, ok, err)
		}
		wantExact(t, "JobNextRunAt", next, edgeTimes[1].at)
		got := claimOnce(t, s, nsA, base, 10, "q")
		wantSameIDs(t, "claim at base", got, "epoch", "keyed-epoch")
		for _, j := range got {
			wantExact(t, "claimed "+j.ID, j.RunAt, edgeTimes[0].at)
		}
	})

	t.Run("CoalesceAndRetryKeepTheTimeExactly", func(t *testing.T) {
		s := newStore(t, nil)
		for _, e := range edgeTimes {
			mustEnqueue(t, s, nsA, base, with(newJob("holder-"+e.id), func(j *store.NewJob) {
				j.DebounceKey, j.RunAt = "d-"+e.id, at(time.Hour)
			}))
			res := enqueueOne(t, s, nsA, base, with(newJob("late-"+e.id), func(j *store.NewJob) {
				j.DebounceKey, j.RunAt = "d-"+e.id, e.at
			}))
			wantResult(t, "coalesce", res, "holder-"+e.id, api.OutcomeCoalesced)
			wantExact(t, "coalesced holder-"+e.id, getJob(t, s, nsA, "holder-"+e.id).RunAt, e.at)

			// A queue of its own: a retried 1970 job is due and would go first.
			r := runJob(t, s, nsA, base, with(newJob("retry-"+e.id), func(j *store.NewJob) { j.Queue = "qr-" + e.id }))
			if applied := update(t, s, nsA, base, store.JobUpdate{ID: r.ID, Attempt: r.Attempt, Kind: store.UpdateRetry, Error: "later", RunAt: e.at}); !applied[0] {
				t.Fatalf("retry of %s not applied", r.ID)
			}
			wantExact(t, "retried "+r.ID, getJob(t, s, nsA, r.ID).RunAt, e.at)
		}
	})
}
