package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

func exerciseClaim(t *testing.T, newStore Factory) {
	// orderFixture enqueues jobs whose dispatch order (priority desc, run_at,
	// Seq) differs from their enqueue order, their id order and their
	// run_at order. Claimed from q1 and q2 at base, the order is f c b a d.
	orderFixture := func(t *testing.T, s store.Store) {
		t.Helper()
		mustEnqueue(t, s, nsA, at(-time.Hour),
			with(newJob("e"), func(j *store.NewJob) { j.Queue = "q1"; j.RunAt = at(time.Second) }),      // not due yet
			with(newJob("a"), func(j *store.NewJob) { j.Queue = "q1"; j.RunAt = at(-3 * time.Second) }), // prio 0, oldest, before d
			with(newJob("b"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 5; j.RunAt = at(-time.Second) }),
			with(newJob("g"), func(j *store.NewJob) { j.Queue = "q3"; j.Priority = 100; j.RunAt = at(-time.Hour) }), // other queue
		)
		mustEnqueue(t, s, nsA, at(-time.Hour),
			with(newJob("d"), func(j *store.NewJob) { j.Queue = "q2"; j.RunAt = at(-3 * time.Second) }), // same prio and run_at as a, later Seq
			with(newJob("c"), func(j *store.NewJob) { j.Queue = "q1"; j.Priority = 5; j.RunAt = at(-2 * time.Second) }),
			with(newJob("f"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 10; j.RunAt = base }), // due exactly now
			with(newJob("h"), func(j *store.NewJob) { j.Queue = "q1"; j.Priority = -1; j.RunAt = at(-time.Hour) }),
		)
		mustEnqueue(t, s, nsB, at(-time.Hour),
			with(newJob("other-ns"), func(j *store.NewJob) { j.Queue = "q1"; j.Priority = 1000; j.RunAt = at(-time.Hour) }),
		)
	}

	t.Run("OrderAndDue", func(t *testing.T) {
		s := newStore(t, nil)
		orderFixture(t, s)
		got := claimOnce(t, s, nsA, base, 100, "q1", "q2")
		wantIDs(t, "claim from q1 and q2", got, "f", "c", "b", "a", "d", "h")
		wantIDs(t, "still pending", list(t, s, store.JobListParams{Namespace: nsA, Status: api.StatusPending}), "g", "e")
		if j := getJob(t, s, nsB, "other-ns"); j.Status != api.StatusPending {
			t.Errorf("another namespace's job was claimed: status %s", j.Status)
		}
	})

	t.Run("MaxRespected", func(t *testing.T) {
		s := newStore(t, nil)
		orderFixture(t, s)
		wantIDs(t, "claim max 2", claimOnce(t, s, nsA, base, 2, "q1", "q2"), "f", "c")
		wantIDs(t, "claim max 1", claimOnce(t, s, nsA, base, 1, "q1", "q2"), "b")
		wantIDs(t, "claim max 3", claimOnce(t, s, nsA, base, 3, "q1", "q2"), "a", "d", "h")
		wantIDs(t, "claim when none is due", claimOnce(t, s, nsA, base, 3, "q1", "q2"))
		wantCounts(t, s, nsA, store.Counts{Pending: 2, Running: 6})
	})

	t.Run("SingleQueue", func(t *testing.T) {
		s := newStore(t, nil)
		orderFixture(t, s)
		wantIDs(t, "claim from q2", claimOnce(t, s, nsA, base, 10, "q2"), "f", "b", "d")
		wantIDs(t, "claim from q3", claimOnce(t, s, nsA, base, 10, "q3"), "g")
		wantIDs(t, "claim from an unknown queue", claimOnce(t, s, nsA, base, 10, "nope"))
	})

	t.Run("BecomesDue", func(t *testing.T) {
		s := newStore(t, nil)
		orderFixture(t, s)
		claimOnce(t, s, nsA, base, 100, "q1", "q2")
		wantIDs(t, "claim before run_at", claimOnce(t, s, nsA, at(999*time.Millisecond), 10, "q1"))
		wantIDs(t, "claim at run_at", claimOnce(t, s, nsA, at(time.Second), 10, "q1"), "e")
	})

	t.Run("MarksRunning", func(t *testing.T) {
		s := newStore(t, nil)
		j := with(newJob("j"), func(j *store.NewJob) { j.Priority = 3; j.MaxAttempts = 7; j.UniqueKey = "uk" })
		mustEnqueue(t, s, nsA, at(-time.Hour), j)
		orig := getJob(t, s, nsA, "j")
		lease := at(45 * time.Second)
		res := claim(t, s, store.JobClaimManyParams{
			Namespace: nsA,
			Now:       base,
			Claims:    []store.ClaimSpec{{Queues: []string{"q"}, Max: 5, LeaseUntil: lease, Worker: "worker-7"}},
		})
		want := orig
		want.Status = api.StatusRunning
		want.Attempt = 1
		want.LeaseUntil = lease
		want.Worker = "worker-7"
		if len(res[0]) != 1 {
			t.Fatalf("claim got %v, want [j]", ids(res[0]))
		}
		wantJob(t, "claimed job as returned", res[0][0], want)
		wantJob(t, "claimed job as stored", getJob(t, s, nsA, "j"), want)
		wantIDs(t, "JobListRunning", listRunning(t, s, nsA), "j")
		wantCounts(t, s, nsA, store.Counts{Running: 1})
		wantIDs(t, "claim of a running job", claimOnce(t, s, nsA, at(time.Hour), 5, "q"))
	})

	t.Run("AttemptCountsClaims", func(t *testing.T) {
		s := newStore(t, nil)
		r := runJob(t, s, nsA, base, newJob("j"))
		if r.Attempt != 1 {
			t.Fatalf("first claim: attempt %d, want 1", r.Attempt)
		}
		update(t, s, nsA, base, store.JobUpdate{ID: "j", Attempt: 1, Kind: store.UpdateRetry, Error: "e1", RunAt: at(time.Second)})
		r = claimJob(t, s, nsA, at(time.Second), "j", "q")
		if r.Attempt != 2 {
			t.Errorf("claim after a retry: attempt %d, want 2", r.Attempt)
		}
	})

	t.Run("NeverFinishedOrShed", func(t *testing.T) {
		s := newStore(t, nil)
		completeJob(t, s, nsA, at(-3*time.Hour), newJob("completed"))
		killJob(t, s, nsA, at(-2*time.Hour), newJob("dead"), false)
		shedJob(t, s, nsA, at(-time.Hour), newJob("shed"))
		wantIDs(t, "claim with only finished and shed jobs", claimOnce(t, s, nsA, at(24*time.Hour), 10, "q"))
		wantCounts(t, s, nsA, store.Counts{Completed: 1, Dead: 2})
	})

	t.Run("OtherNamespaceNeverHandedOut", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsB, base, newJob("b1"), newJob("b2"))
		wantIDs(t, "claim in an empty namespace", claimOnce(t, s, nsA, base, 10, "q"))
		wantCounts(t, s, nsB, store.Counts{Pending: 2})
		wantIDs(t, "claim in the jobs' namespace", claimOnce(t, s, nsB, base, 10, "q"), "b1", "b2")
	})

	t.Run("SeveralClaimsInOneGroup", func(t *testing.T) {
		s := newStore(t, nil)
		orderFixture(t, s)
		lease := at(time.Minute)
		res := claim(t, s, store.JobClaimManyParams{
			Namespace: nsA,
			Now:       base,
			Claims: []store.ClaimSpec{
				{Queues: []string{"q1", "q2"}, Max: 2, LeaseUntil: lease, Worker: "w1"},
				{Queues: []string{"q2"}, Max: 2, LeaseUntil: lease, Worker: "w2"},
				{Queues: []string{"q1", "q2"}, Max: 10, LeaseUntil: lease, Worker: "w3"},
				{Queues: []string{"q1", "q2"}, Max: 10, LeaseUntil: lease, Worker: "w4"},
			},
		})
		wantIDs(t, "first claim", res[0], "f", "c")
		wantIDs(t, "second claim", res[1], "b", "d")
		wantIDs(t, "third claim", res[2], "a", "h")
		wantIDs(t, "fourth claim", res[3])
		for i, jobs := range res {
			for _, j := range jobs {
				if got := getJob(t, s, nsA, j.ID); got.Worker != fmt.Sprintf("w%d", i+1) || got.Attempt != 1 {
					t.Errorf("job %s stored with worker %q attempt %d, want w%d attempt 1", j.ID, got.Worker, got.Attempt, i+1)
				}
			}
		}
	})

	// A group whose claims all name one queue, with no gate to ask, may be
	// handed out by a path of its own (the PostgreSQL backend's one
	// statement): it must give what the gated scan gives, claim by claim.
	t.Run("OneQueueGroupWithoutAllowMatchesTheScan", func(t *testing.T) {
		fixture := func(t *testing.T, s store.Store) {
			orderFixture(t, s)
			mustEnqueue(t, s, nsA, at(-time.Hour),
				with(newJob("q2-late"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 5; j.RunAt = at(-time.Second); j.Task = "skip" }),
				with(newJob("q2-due-later"), func(j *store.NewJob) { j.Queue = "q2"; j.RunAt = at(time.Second) }),
				with(newJob("q2-top"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 50; j.RunAt = at(-time.Minute) }),
			)
			claimJob(t, s, nsA, base, "q2-top", "q2") // running: never handed out again
		}
		for _, exclude := range [][]string{nil, {"skip"}} {
			specs := func() []store.ClaimSpec {
				return []store.ClaimSpec{
					{Queues: []string{"q2"}, Max: 2, LeaseUntil: at(time.Minute), Worker: "w1"},
					{Queues: []string{"q2"}, Max: 0, LeaseUntil: at(2 * time.Minute), Worker: "w2"},
					{Queues: []string{"q2"}, Max: 1, LeaseUntil: at(3 * time.Minute)},
					{Queues: []string{"q2"}, Max: 10, LeaseUntil: at(4 * time.Minute), Worker: "w4"},
				}
			}
			// Once at base (q2-due-later not yet due), once later (due).
			for _, now := range []time.Time{base, at(time.Second)} {
				gated, plain := newStore(t, nil), newStore(t, nil)
				fixture(t, gated)
				fixture(t, plain)
				want := claim(t, gated, store.JobClaimManyParams{Namespace: nsA, Now: now, Claims: specs(), ExcludeTasks: exclude,
					Allow: func(string, string) store.ClaimVerdict { return store.ClaimTake }})
				got := claim(t, plain, store.JobClaimManyParams{Namespace: nsA, Now: now, Claims: specs(), ExcludeTasks: exclude})
				handed := 0
				for i := range want {
					handed += len(want[i])
					if fmt.Sprint(ids(got[i])) != fmt.Sprint(ids(want[i])) {
						t.Errorf("exclude %v, now %v: claim %d got %v, the gated scan %v", exclude, now, i, ids(got[i]), ids(want[i]))
						continue
					}
					for k := range want[i] {
						g, w := got[i][k], want[i][k]
						if g.Worker != w.Worker || !g.LeaseUntil.Equal(w.LeaseUntil) || g.Attempt != w.Attempt || g.Status != api.StatusRunning {
							t.Errorf("claim %d job %s: worker %q lease %v attempt %d status %s; the gated scan: %q %v %d %s",
								i, g.ID, g.Worker, g.LeaseUntil, g.Attempt, g.Status, w.Worker, w.LeaseUntil, w.Attempt, w.Status)
						}
						wantJob(t, "stored as returned", getJob(t, plain, nsA, g.ID), g)
					}
				}
				if handed == 0 {
					t.Fatalf("exclude %v, now %v: nothing handed out; the fixture is wrong", exclude, now)
				}
				wantIDs(t, "still pending", list(t, plain, store.JobListParams{Namespace: nsA, Status: api.StatusPending}),
					ids(list(t, gated, store.JobListParams{Namespace: nsA, Status: api.StatusPending}))...)
			}
		}
	})

	// A claim given the queue's head (where its available jobs start, as
	// the actor knows it) hands out what it would from the queue's start:
	// the head's priority from the head on, then lower priorities.
	t.Run("OneQueueGroupFromItsHead", func(t *testing.T) {
		fixture := func(t *testing.T, s store.Store) {
			orderFixture(t, s)
			mustEnqueue(t, s, nsA, at(-time.Hour),
				with(newJob("q2-five"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 5; j.RunAt = at(-time.Second) }), // b's priority and run_at, later Seq
				with(newJob("q2-low"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = -3; j.RunAt = at(-time.Hour) }),
				with(newJob("q2-zero"), func(j *store.NewJob) { j.Queue = "q2"; j.RunAt = at(-2 * time.Second) }),
			)
		}
		spec := func(max int) []store.ClaimSpec {
			return []store.ClaimSpec{{Queues: []string{"q2"}, Max: max, LeaseUntil: at(time.Minute), Worker: "w"}}
		}
		for _, first := range []int{1, 2, 3, 5} {
			for _, max := range []int{1, 2, 10} {
				ref, s := newStore(t, nil), newStore(t, nil)
				fixture(t, ref)
				fixture(t, s)
				// The first claim makes the due delayed jobs available.
				took := claim(t, s, store.JobClaimManyParams{Namespace: nsA, Now: base, Claims: spec(first)})[0]
				claim(t, ref, store.JobClaimManyParams{Namespace: nsA, Now: base, Claims: spec(first)})
				head := store.PosOf(&took[len(took)-1])
				heads := []store.JobPos{head, {Priority: head.Priority, RunAt: head.RunAt}} // as a claim leaves it, as an enqueue lowers it
				want := ids(claim(t, ref, store.JobClaimManyParams{Namespace: nsA, Now: base, NoPromote: true, Claims: spec(max)})[0])
				got := ids(claim(t, s, store.JobClaimManyParams{Namespace: nsA, Now: base, NoPromote: true, Claims: spec(max), Head: &heads[(first+max)%2]})[0])
				if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 {
					t.Errorf("after %v, from head %+v: claim of %d got %v, from the start %v", ids(took), heads[(first+max)%2], max, got, want)
				}
			}
		}
	})

	t.Run("OneQueueGroupTakesNoMoreThanItsMax", func(t *testing.T) {
		for _, specs := range [][]store.ClaimSpec{
			{{Queues: []string{"q"}, Max: 3, LeaseUntil: at(time.Minute), Worker: "w"}},
			{{Queues: []string{"q"}, Max: 2, LeaseUntil: at(time.Minute), Worker: "w1"}, {Queues: []string{"q"}, Max: 1, LeaseUntil: at(2 * time.Minute)}},
		} {
			s := newStore(t, nil)
			var jobs []store.NewJob
			for i := range 40 {
				jobs = append(jobs, with(newJob(fmt.Sprintf("j%02d", i)), func(j *store.NewJob) { j.Priority = int64(i % 3) }))
			}
			mustEnqueue(t, s, nsA, at(-time.Hour), jobs...)
			res := claim(t, s, store.JobClaimManyParams{Namespace: nsA, Now: base, Claims: specs})
			var got []store.Job
			for _, r := range res {
				got = append(got, r...)
			}
			wantIDs(t, fmt.Sprintf("%d claims", len(specs)), got, "j02", "j05", "j08")
			wantCounts(t, s, nsA, store.Counts{Pending: 37, Running: 3})
		}
		// More than a backend may number in one page (SQLite: 512): the
		// scan takes over, with the same result.
		s := newStore(t, nil)
		var jobs []store.NewJob
		for i := range 700 {
			jobs = append(jobs, newJob(fmt.Sprintf("k%03d", i)))
		}
		mustEnqueue(t, s, nsA, at(-time.Hour), jobs...)
		res := claim(t, s, store.JobClaimManyParams{Namespace: nsA, Now: base, Claims: []store.ClaimSpec{
			{Queues: []string{"q"}, Max: 300, LeaseUntil: at(time.Minute)},
			{Queues: []string{"q"}, Max: 300, LeaseUntil: at(time.Minute)},
		}})
		if len(res[0]) != 300 || len(res[1]) != 300 || res[0][0].ID != "k000" || res[1][0].ID != "k300" || res[1][299].ID != "k599" {
			t.Fatalf("two claims of 300 from 700 jobs: got %d and %d jobs", len(res[0]), len(res[1]))
		}
		wantCounts(t, s, nsA, store.Counts{Pending: 100, Running: 600})
	})

	// takeCounter wraps a gate so the test knows how many jobs it took:
	// every taken job must be handed out ("it must count what it takes").
	type takeCounter struct {
		asked []string
		took  int
	}
	counting := func(c *takeCounter, gate func(queue, task string) store.ClaimVerdict) func(queue, task string) store.ClaimVerdict {
		return func(queue, task string) store.ClaimVerdict {
			c.asked = append(c.asked, queue+"/"+task)
			v := gate(queue, task)
			if v == store.ClaimTake {
				c.took++
			}
			return v
		}
	}
	claimWith := func(t *testing.T, s store.Store, gate func(queue, task string) store.ClaimVerdict, specs ...store.ClaimSpec) ([][]store.Job, *takeCounter) {
		t.Helper()
		c := &takeCounter{}
		for i := range specs {
			specs[i].LeaseUntil = at(time.Minute)
			specs[i].Worker = fmt.Sprintf("w%d", i+1)
		}
		res := claim(t, s, store.JobClaimManyParams{Namespace: nsA, Now: base, Claims: specs, Allow: counting(c, gate)})
		handed := 0
		for _, jobs := range res {
			handed += len(jobs)
		}
		if c.took != handed {
			t.Errorf("Allow took %d jobs but %d were handed out (asked: %v)", c.took, handed, c.asked)
		}
		return res, c
	}
	wantUntouched := func(t *testing.T, s store.Store, jobs ...store.Job) {
		t.Helper()
		for _, j := range jobs {
			wantUnchanged(t, s, j)
		}
	}

	t.Run("AllowAskedInDispatchOrder", func(t *testing.T) {
		s := newStore(t, nil)
		// One task per job, so each Allow call names its job.
		mustEnqueue(t, s, nsA, at(-time.Hour),
			with(newJob("j3"), func(j *store.NewJob) { j.Task = "t3"; j.Queue = "q2"; j.RunAt = at(-2 * time.Second) }),
			with(newJob("j1"), func(j *store.NewJob) { j.Task = "t1"; j.Queue = "q1"; j.Priority = 1 }),
			with(newJob("j4"), func(j *store.NewJob) { j.Task = "t4"; j.Queue = "q1"; j.RunAt = at(-2 * time.Second) }),
			with(newJob("j2"), func(j *store.NewJob) { j.Task = "t2"; j.Queue = "q2"; j.RunAt = at(-3 * time.Second) }),
			with(newJob("later"), func(j *store.NewJob) { j.Task = "t9"; j.Queue = "q1"; j.RunAt = at(time.Second) }),
		)
		res, c := claimWith(t, s, func(string, string) store.ClaimVerdict { return store.ClaimTake },
			store.ClaimSpec{Queues: []string{"q1", "q2"}, Max: 10})
		wantIDs(t, "claim", res[0], "j1", "j2", "j3", "j4")
		if want := []string{"q1/t1", "q2/t2", "q2/t3", "q1/t4"}; fmt.Sprint(c.asked) != fmt.Sprint(want) {
			t.Errorf("Allow asked for %v, want each due candidate in dispatch order %v", c.asked, want)
		}
	})

	t.Run("AllowSkipTaskLeavesPending", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, at(-time.Hour),
			with(newJob("x1"), func(j *store.NewJob) { j.Task = "x"; j.Priority = 4 }),
			with(newJob("y1"), func(j *store.NewJob) { j.Task = "y"; j.Priority = 3 }),
			with(newJob("x2"), func(j *store.NewJob) { j.Task = "x"; j.Priority = 2 }),
			with(newJob("y2"), func(j *store.NewJob) { j.Task = "y"; j.Priority = 1 }),
			with(newJob("z1"), func(j *store.NewJob) { j.Task = "z"; j.Priority = 0 }),
		)
		x2 := getJob(t, s, nsA, "x2")
		running := map[string]int{}
		res, c := claimWith(t, s, func(queue, task string) store.ClaimVerdict {
			if task == "x" && running[task] >= 1 { // task x capped at 1
				return store.ClaimSkipTask
			}
			running[task]++
			return store.ClaimTake
		}, store.ClaimSpec{Queues: []string{"q"}, Max: 10})
		wantIDs(t, "claim with task x capped at 1", res[0], "x1", "y1", "y2", "z1")
		if want := []string{"q/x", "q/y", "q/x", "q/y", "q/z"}; fmt.Sprint(c.asked) != fmt.Sprint(want) {
			t.Errorf("Allow asked for %v, want each due candidate in dispatch order %v", c.asked, want)
		}
		wantUntouched(t, s, x2)

		// Left pending, it is there for a later claim, attempt untouched.
		got := claimOnce(t, s, nsA, base, 10, "q")
		if len(got) != 1 || got[0].ID != "x2" || got[0].Attempt != 1 {
			t.Errorf("later claim got %+v, want x2 at attempt 1", got)
		}
	})

	t.Run("AllowSkipTaskHoldsForTheGroup", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, at(-time.Hour),
			with(newJob("x1"), func(j *store.NewJob) { j.Task = "x"; j.Priority = 5 }),
			with(newJob("x2"), func(j *store.NewJob) { j.Task = "x"; j.Priority = 4 }),
			with(newJob("y1"), func(j *store.NewJob) { j.Task = "y"; j.Priority = 3 }),
			with(newJob("x3"), func(j *store.NewJob) { j.Task = "x"; j.Priority = 2; j.Queue = "q2" }),
			with(newJob("y2"), func(j *store.NewJob) { j.Task = "y"; j.Priority = 1; j.Queue = "q2" }),
		)
		var xs []store.Job
		for _, id := range []string{"x1", "x2", "x3"} {
			xs = append(xs, getJob(t, s, nsA, id))
		}
		skipped := false
		// Skips task x once; were it asked again it would say take, but the
		// skip holds for every further x job of the group.
		res, _ := claimWith(t, s, func(queue, task string) store.ClaimVerdict {
			if task == "x" && !skipped {
				skipped = true
				return store.ClaimSkipTask
			}
			return store.ClaimTake
		},
			store.ClaimSpec{Queues: []string{"q"}, Max: 10},
			store.ClaimSpec{Queues: []string{"q", "q2"}, Max: 10},
		)
		wantIDs(t, "first claim", res[0], "y1")
		wantIDs(t, "second claim of the group", res[1], "y2")
		wantUntouched(t, s, xs...)
		wantIDs(t, "a new group", claimOnce(t, s, nsA, base, 10, "q", "q2"), "x1", "x2", "x3")
	})

	t.Run("AllowSkipQueueHoldsForTheGroup", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, at(-time.Hour),
			with(newJob("a"), func(j *store.NewJob) { j.Queue = "q1"; j.Priority = 5 }),
			with(newJob("b"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 4 }),
			with(newJob("c"), func(j *store.NewJob) { j.Queue = "q1"; j.Priority = 3; j.Task = "other" }),
			with(newJob("d"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 2 }),
		)
		a, cj := getJob(t, s, nsA, "a"), getJob(t, s, nsA, "c")
		skipped := false
		res, _ := claimWith(t, s, func(queue, task string) store.ClaimVerdict {
			if queue == "q1" && !skipped {
				skipped = true
				return store.ClaimSkipQueue
			}
			return store.ClaimTake
		},
			store.ClaimSpec{Queues: []string{"q1", "q2"}, Max: 1},
			store.ClaimSpec{Queues: []string{"q1", "q2"}, Max: 10},
		)
		wantIDs(t, "first claim", res[0], "b")
		wantIDs(t, "second claim of the group", res[1], "d")
		wantUntouched(t, s, a, cj)
	})

	t.Run("AllowStopEndsTheGroup", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, at(-time.Hour),
			with(newJob("j1"), func(j *store.NewJob) { j.Task = "t1" }),
			with(newJob("j2"), func(j *store.NewJob) { j.Task = "t2" }),
			with(newJob("j3"), func(j *store.NewJob) { j.Task = "t3" }),
			with(newJob("j4"), func(j *store.NewJob) { j.Task = "t4" }),
			with(newJob("j5"), func(j *store.NewJob) { j.Task = "t5"; j.Queue = "q2" }),
		)
		j4, j5 := getJob(t, s, nsA, "j4"), getJob(t, s, nsA, "j5")
		asks := 0
		// A namespace cap of 3: the fourth ask stops the group; any later
		// ask would be taken, but the group has ended.
		res, _ := claimWith(t, s, func(queue, task string) store.ClaimVerdict {
			asks++
			if asks == 4 {
				return store.ClaimStop
			}
			return store.ClaimTake
		},
			store.ClaimSpec{Queues: []string{"q"}, Max: 2},
			store.ClaimSpec{Queues: []string{"q"}, Max: 2},
			store.ClaimSpec{Queues: []string{"q2", "q"}, Max: 2},
		)
		wantIDs(t, "first claim", res[0], "j1", "j2")
		wantIDs(t, "second claim", res[1], "j3")
		wantIDs(t, "third claim, after the stop", res[2])
		wantUntouched(t, s, j4, j5)
	})

	t.Run("AllowNotAskedPastMax", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, at(-time.Hour),
			with(newJob("x1"), func(j *store.NewJob) { j.Task = "x"; j.Priority = 3 }),
			with(newJob("x2"), func(j *store.NewJob) { j.Task = "x"; j.Priority = 2 }),
			with(newJob("y1"), func(j *store.NewJob) { j.Task = "y"; j.Priority = 1 }),
			with(newJob("y2"), func(j *store.NewJob) { j.Task = "y"; j.Priority = 0 }),
		)
		res, _ := claimWith(t, s, func(queue, task string) store.ClaimVerdict {
			if task == "x" {
				return store.ClaimSkipTask
			}
			return store.ClaimTake
		}, store.ClaimSpec{Queues: []string{"q"}, Max: 1})
		// claimWith fails if Allow was asked (and took) past Max.
		wantIDs(t, "claim of 1 with task x skipped", res[0], "y1")
		wantCounts(t, s, nsA, store.Counts{Pending: 3, Running: 1})
	})

	t.Run("AllowStopAtOnce", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, at(-time.Hour), newJob("j1"), newJob("j2"))
		before := listAll(t, s, nsA)
		res, _ := claimWith(t, s, func(string, string) store.ClaimVerdict { return store.ClaimStop },
			store.ClaimSpec{Queues: []string{"q"}, Max: 5},
			store.ClaimSpec{Queues: []string{"q"}, Max: 5},
		)
		wantIDs(t, "first claim", res[0])
		wantIDs(t, "second claim", res[1])
		wantUntouched(t, s, before...)
	})

	t.Run("ExcludeTasksNeverHandedOut", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, at(-time.Hour),
			with(newJob("x"), func(j *store.NewJob) { j.Task = "x"; j.Priority = 9 }),
			with(newJob("y"), func(j *store.NewJob) { j.Task = "y"; j.Priority = 5 }),
			with(newJob("z"), func(j *store.NewJob) { j.Task = "z"; j.Priority = 7 }),
		)
		res := claim(t, s, store.JobClaimManyParams{
			Namespace:    nsA,
			Now:          base,
			Claims:       []store.ClaimSpec{{Queues: []string{"q"}, Max: 10, LeaseUntil: at(time.Minute), Worker: "w"}},
			ExcludeTasks: []string{"x", "z"},
		})
		wantIDs(t, "claim excluding tasks x and z", res[0], "y")
		for _, id := range []string{"x", "z"} {
			if j := getJob(t, s, nsA, id); j.Status != api.StatusPending || j.Attempt != 0 {
				t.Errorf("excluded job %s: status %s attempt %d, want pending 0", id, j.Status, j.Attempt)
			}
		}
		wantIDs(t, "claim without exclusions", claimOnce(t, s, nsA, base, 10, "q"), "x", "z")
	})

	t.Run("ConcurrentClaimsNeverShareAJob", func(t *testing.T) {
		s := newStore(t, nil)
		const jobs, workers = 60, 6
		var batch []store.NewJob
		for i := range jobs {
			batch = append(batch, with(newJob(fmt.Sprintf("j%02d", i)), func(j *store.NewJob) {
				j.Queue = []string{"q1", "q2"}[i%2]
				j.Priority = int64(i % 3)
			}))
		}
		mustEnqueue(t, s, nsA, at(-time.Hour), batch...)
		mustEnqueue(t, s, nsB, at(-time.Hour), with(newJob("other-ns"), func(j *store.NewJob) { j.Queue = "q1" }))

		var (
			mu    sync.Mutex
			owner = map[string]string{}
			wg    sync.WaitGroup
		)
		for w := range workers {
			worker := fmt.Sprintf("w%d", w)
			wg.Go(func() {
				for {
					res, err := s.JobClaimMany(t.Context(), store.JobClaimManyParams{
						Namespace: nsA,
						Now:       base,
						Claims:    []store.ClaimSpec{{Queues: []string{"q1", "q2"}, Max: 1 + w%3, LeaseUntil: at(time.Minute), Worker: worker}},
					})
					if err != nil {
						t.Errorf("%s: JobClaimMany: %v", worker, err)
						return
					}
					if len(res) != 1 || len(res[0]) == 0 {
						return
					}
					mu.Lock()
					for _, j := range res[0] {
						if prev, dup := owner[j.ID]; dup {
							t.Errorf("job %s handed to both %s and %s", j.ID, prev, worker)
						}
						owner[j.ID] = worker
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(owner) != jobs {
			t.Errorf("concurrent claims handed out %d distinct jobs, want all %d", len(owner), jobs)
		}
		for _, j := range listAll(t, s, nsA) {
			if j.Status != api.StatusRunning || j.Attempt != 1 || j.Worker != owner[j.ID] {
				t.Errorf("job %s: status %s attempt %d worker %q, want running 1 %q", j.ID, j.Status, j.Attempt, j.Worker, owner[j.ID])
			}
		}
		wantCounts(t, s, nsB, store.Counts{Pending: 1})
	})
}

func listRunning(t testing.TB, s store.Store, ns string) []store.Job {
	t.Helper()
	jobs, err := s.JobListRunning(t.Context(), ns)
	if err != nil {
		t.Fatalf("JobListRunning(%q): %v", ns, err)
	}
	return jobs
}
