package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

func exerciseEnqueue(t *testing.T, newStore Factory) {
	t.Run("InsertClientAndGeneratedIDs", func(t *testing.T) {
		s := newStore(t, nil)
		client := store.NewJob{
			ID:          "client-1",
			Queue:       "emails",
			Task:        "send.welcome",
			Payload:     []byte(`{"to":"a@example.com","n":[1,2,3]}`),
			Priority:    7,
			RunAt:       at(90 * time.Second),
			MaxAttempts: 5,
			UniqueKey:   "welcome:a",
		}
		generated := store.NewJob{
			ID:          "01JH0000000000000000000000",
			Generated:   true,
			Queue:       "emails",
			Task:        "send.digest",
			Priority:    -3,
			RunAt:       at(-time.Second),
			DebounceKey: "digest:a",
		}
		res := enqueue(t, s, nsA, base, store.EnqueueCall{Jobs: []store.NewJob{client, generated}})
		wantResult(t, "client id", res[0][0], client.ID, api.OutcomeEnqueued)
		wantResult(t, "generated id", res[0][1], generated.ID, api.OutcomeEnqueued)

		gc := getJob(t, s, nsA, client.ID)
		wantJob(t, "client-id job", gc, pendingJob(nsA, client, base, gc.Seq))
		gg := getJob(t, s, nsA, generated.ID)
		wantJob(t, "generated-id job", gg, pendingJob(nsA, generated, base, gg.Seq))
		if gg.Payload != nil {
			t.Errorf("job enqueued without payload: Payload = %s, want nil", showBytes(gg.Payload))
		}
		wantCounts(t, s, nsA, store.Counts{Pending: 2})
		wantCounts(t, s, nsB, store.Counts{})
	})

	t.Run("ResultsPerCallInOrder", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base, newJob("old"))
		res := enqueue(t, s, nsA, base,
			store.EnqueueCall{Jobs: []store.NewJob{newJob("c1a"), newJob("c1b")}},
			store.EnqueueCall{Jobs: []store.NewJob{newJob("old")}},
			store.EnqueueCall{Jobs: []store.NewJob{newJob("c3a"), newJob("old"), newJob("c3c")}},
		)
		wantResult(t, "call 0 job 0", res[0][0], "c1a", api.OutcomeEnqueued)
		wantResult(t, "call 0 job 1", res[0][1], "c1b", api.OutcomeEnqueued)
		wantResult(t, "call 1 job 0", res[1][0], "old", api.OutcomeDeduplicated)
		wantResult(t, "call 2 job 0", res[2][0], "c3a", api.OutcomeEnqueued)
		wantResult(t, "call 2 job 1", res[2][1], "old", api.OutcomeDeduplicated)
		wantResult(t, "call 2 job 2", res[2][2], "c3c", api.OutcomeEnqueued)
		wantCounts(t, s, nsA, store.Counts{Pending: 5})
	})

	t.Run("SeqFollowsEnqueueOrder", func(t *testing.T) {
		s := newStore(t, nil)
		// Ids sort differently from the enqueue order on purpose.
		order := []string{"z", "b", "y", "a", "x", "c"}
		enqueue(t, s, nsA, base,
			store.EnqueueCall{Jobs: []store.NewJob{newJob("z"), newJob("b")}},
			store.EnqueueCall{Jobs: []store.NewJob{newJob("y")}},
		)
		mustEnqueue(t, s, nsB, base, newJob("other"))
		enqueue(t, s, nsA, at(-time.Hour), // Now going backwards must not matter
			store.EnqueueCall{Jobs: []store.NewJob{newJob("a"), newJob("x")}},
		)
		mustEnqueue(t, s, nsA, base, newJob("c"))
		var prev int64
		for i, id := range order {
			j := getJob(t, s, nsA, id)
			if i > 0 && j.Seq <= prev {
				t.Errorf("Seq of %s = %d, not above the previous enqueue's %d", id, j.Seq, prev)
			}
			prev = j.Seq
		}
		wantIDs(t, "JobList (newest first)", listAll(t, s, nsA), "c", "x", "a", "y", "b", "z")
		// Seq orders the whole store, not one namespace.
		if o, y, a := getJob(t, s, nsB, "other").Seq, getJob(t, s, nsA, "y").Seq, getJob(t, s, nsA, "a").Seq; !(y < o && o < a) {
			t.Errorf("Seq of a job enqueued in another namespace in between = %d, want between %d and %d", o, y, a)
		}
	})

	t.Run("ManyJobsKeepTheirOwnFieldsAndOrder", func(t *testing.T) {
		// Large calls, most of whose jobs share their queue, task and
		// settings (a store may bind what rows share once) and some not:
		// each job is stored with its own fields, in the call's order.
		s := newStore(t, nil)
		mk := func(prefix string, n int, generated bool, vary func(i int, j *store.NewJob)) []store.NewJob {
			jobs := make([]store.NewJob, n)
			for i := range jobs {
				// Ids sort against the call's order.
				j := newJob(fmt.Sprintf("%s%03d", prefix, n-i))
				j.Generated = generated
				j.MaxAttempts = 20
				vary(i, &j)
				jobs[i] = j
			}
			return jobs
		}
		mixed := func(i int, j *store.NewJob) {
			switch {
			case i%50 == 7:
				j.Queue = "q2"
			case i%60 == 9:
				j.Priority = 5
			case i%70 == 11:
				j.RunAt = at(time.Duration(i) * time.Minute) // not due yet
			case i%80 == 13:
				j.MaxAttempts = 3
			case i%90 == 17:
				j.Task = "t2"
			}
		}
		// Calls of 16 jobs, each written alone, one of whose jobs differs
		// from the others in one field only.
		one := []func(j *store.NewJob){
			func(j *store.NewJob) { j.Queue = "q2" },
			func(j *store.NewJob) { j.Task = "t2" },
			func(j *store.NewJob) { j.Priority = -1 },
			func(j *store.NewJob) { j.RunAt = at(time.Hour) },
			func(j *store.NewJob) { j.RunAt = j.RunAt.Add(time.Microsecond) },
			func(j *store.NewJob) { j.MaxAttempts = 2 },
		}
		calls := []store.EnqueueCall{
			{Jobs: mk("c", 300, false, mixed)},
			{Jobs: mk("g", 90, true, mixed)},
			{Jobs: mk("s", 21, false, mixed), ShedError: shedError},
		}
		res := enqueue(t, s, nsA, base, calls...)
		// Shed jobs that share everything, written alone.
		sameShed := store.EnqueueCall{Jobs: mk("u", 20, false, func(int, *store.NewJob) {}), ShedError: shedError}
		calls = append(calls, sameShed)
		res = append(res, enqueue(t, s, nsA, base, sameShed)...)
		for k, f := range one {
			call := store.EnqueueCall{Jobs: mk(fmt.Sprintf("o%d-", k), 16, k%2 == 0, func(i int, j *store.NewJob) {
				if i == 5 {
					f(j)
				}
			})}
			calls = append(calls, call)
			res = append(res, enqueue(t, s, nsA, base, call)...)
		}
		var prev int64
		for c, call := range calls {
			for i, want := range call.Jobs {
				shed := call.ShedError != ""
				outcome := api.OutcomeEnqueued
				if shed {
					outcome = api.OutcomeShed
				}
				wantResult(t, fmt.Sprintf("call %d job %d", c, i), res[c][i], want.ID, outcome)
				got := getJob(t, s, nsA, want.ID)
				if got.Queue != want.Queue || got.Task != want.Task || got.Priority != want.Priority ||
					!got.RunAt.Equal(want.RunAt) || got.MaxAttempts != want.MaxAttempts || !sameJSON(got.Payload, want.Payload) {
					t.Errorf("%s stored as queue %s task %s priority %d run_at %v max_attempts %d payload %s, want %s %s %d %v %d %s",
						want.ID, got.Queue, got.Task, got.Priority, got.RunAt, got.MaxAttempts, got.Payload,
						want.Queue, want.Task, want.Priority, want.RunAt, want.MaxAttempts, want.Payload)
				}
				if got.Shed != shed || (got.Status == api.StatusDead) != shed {
					t.Errorf("%s: status %s, shed %v; want shed %v", want.ID, got.Status, got.Shed, shed)
				}
				if shed && (got.Error != shedError || !got.FinishedAt.Equal(base)) {
					t.Errorf("%s: error %q, finished at %v; want %q, %v", want.ID, got.Error, got.FinishedAt, shedError, base)
				}
				if !shed && got.Status != api.StatusPending {
					t.Errorf("%s: status %s, want pending", want.ID, got.Status)
				}
				if got.Seq <= prev {
					t.Errorf("%s (call %d job %d): seq %d, not above the job before's %d", want.ID, c, i, got.Seq, prev)
				}
				prev = got.Seq
			}
		}
		wantCounts(t, s, nsA, store.Counts{Pending: int64(390 + 16*len(one)), Dead: 41})
	})

	t.Run("JobsAroundKeysAndReplaysKeepTheirOwnFields", func(t *testing.T) {
		// A store may send a job's settings once for the jobs after it
		// that share them: a job that shares them with a keyed job holds
		// no key, and one after a replay in the same group, or after a
		// shed call, takes nothing from them.
		s := newStore(t, nil)
		dead := killJob(t, s, nsA, at(-30*time.Minute), with(newJob("dead"), func(j *store.NewJob) { j.Queue = "qd"; j.Task = "td" }), false)
		keyed := with(newJob("keyed"), func(j *store.NewJob) { j.UniqueKey = "u1"; j.Priority = 4; j.MaxAttempts = 7 })
		plain := func(id string) store.NewJob {
			return with(newJob(id), func(j *store.NewJob) { j.Priority = 4; j.MaxAttempts = 7 })
		}
		debounced := with(plain("debounced"), func(j *store.NewJob) { j.DebounceKey = "d1" })
		calls := []store.EnqueueCall{
			{Jobs: []store.NewJob{keyed, plain("after-keyed"), debounced, plain("after-debounced")}},
			{ReplayIDs: []string{dead.ID}},
			{Jobs: []store.NewJob{plain("after-replay")}},
			{Jobs: []store.NewJob{plain("shed")}, ShedError: shedError},
			{Jobs: []store.NewJob{plain("after-shed")}},
		}
		res := enqueue(t, s, nsA, base, calls...)
		wantResult(t, "the replay", res[1][0], dead.ID, api.OutcomeEnqueued)
		wantResult(t, "the shed job", res[3][0], "shed", api.OutcomeShed)
		for c, call := range calls {
			for i, want := range call.Jobs {
				if call.ShedError == "" {
					wantResult(t, want.ID, res[c][i], want.ID, api.OutcomeEnqueued)
				}
				got := getJob(t, s, nsA, want.ID)
				if got.Queue != want.Queue || got.Task != want.Task || got.Priority != want.Priority || !got.RunAt.Equal(want.RunAt) ||
					got.MaxAttempts != want.MaxAttempts || got.UniqueKey != want.UniqueKey || got.DebounceKey != want.DebounceKey ||
					!sameJSON(got.Payload, want.Payload) || got.Shed != (call.ShedError != "") {
					t.Errorf("%s stored as %+v, want %+v", want.ID, got, want)
				}
			}
		}
		if got := getJob(t, s, nsA, dead.ID); got.Status != api.StatusPending || got.Queue != "qd" || got.Task != "td" {
			t.Errorf("the replayed job: status %s queue %s task %s, want pending qd td", got.Status, got.Queue, got.Task)
		}
		// The keys are held by the jobs that carry them, and only by them.
		again := enqueue(t, s, nsA, base, store.EnqueueCall{Jobs: []store.NewJob{
			with(plain("u-again"), func(j *store.NewJob) { j.UniqueKey = "u1" }),
			with(plain("d-again"), func(j *store.NewJob) { j.DebounceKey = "d1" }),
		}})[0]
		wantResult(t, "the unique key again", again[0], "keyed", api.OutcomeDeduplicated)
		wantResult(t, "the debounce key again", again[1], "debounced", api.OutcomeCoalesced)
	})

	t.Run("LargePayload", func(t *testing.T) {
		s := newStore(t, nil)
		big := []byte(`{"blob":"` + strings.Repeat("x", 1<<20-12) + `"}`)
		mustEnqueue(t, s, nsA, base, with(newJob("big"), func(j *store.NewJob) { j.Payload = big }))
		if got := getJob(t, s, nsA, "big").Payload; !sameJSON(got, big) {
			t.Errorf("1 MiB payload came back as %d bytes, not equal", len(got))
		}
	})

	t.Run("RepeatedIDDeduplicatedInAnyStatus", func(t *testing.T) {
		s := newStore(t, nil)
		completed := completeJob(t, s, nsA, at(-50*time.Minute), with(newJob("completed"), func(j *store.NewJob) { j.Queue = "qc" }))
		dead := killJob(t, s, nsA, at(-40*time.Minute), with(newJob("dead"), func(j *store.NewJob) { j.Queue = "qd" }), false)
		shed := shedJob(t, s, nsA, at(-30*time.Minute), newJob("shed"))
		running := runJob(t, s, nsA, at(-20*time.Minute), with(newJob("running"), func(j *store.NewJob) { j.Queue = "qr" }))
		running = getJob(t, s, nsA, running.ID)
		mustEnqueue(t, s, nsA, at(-10*time.Minute), with(newJob("pending"), func(j *store.NewJob) { j.RunAt = at(time.Hour) }))
		pending := getJob(t, s, nsA, "pending")
		before := counts(t, s, nsA)

		for _, old := range []store.Job{pending, running, completed, dead, shed} {
			again := with(newJob(old.ID), func(j *store.NewJob) {
				j.Queue = "elsewhere"
				j.Payload = []byte(`{"second":true}`)
				j.Priority = 99
			})
			r := enqueueOne(t, s, nsA, base, again)
			wantResult(t, "repeat of "+string(old.Status)+" id", r, old.ID, api.OutcomeDeduplicated)
			wantUnchanged(t, s, old)
		}
		wantCounts(t, s, nsA, before)
		if n := len(list(t, s, store.JobListParams{Namespace: nsA, Queue: "elsewhere"})); n != 0 {
			t.Errorf("deduplicated jobs were written: %d jobs in queue elsewhere", n)
		}
	})

	t.Run("RepeatedIDInOneCall", func(t *testing.T) {
		s := newStore(t, nil)
		first := newJob("x")
		second := with(newJob("x"), func(j *store.NewJob) { j.Payload = []byte(`{"second":true}`) })
		res := enqueue(t, s, nsA, base, store.EnqueueCall{Jobs: []store.NewJob{first, second}})[0]
		wantResult(t, "first", res[0], "x", api.OutcomeEnqueued)
		wantResult(t, "repeat in the same call", res[1], "x", api.OutcomeDeduplicated)
		got := getJob(t, s, nsA, "x")
		wantJob(t, "stored job", got, pendingJob(nsA, first, base, got.Seq))
		wantCounts(t, s, nsA, store.Counts{Pending: 1})
	})

	t.Run("RepeatedIDAcrossCallsOfOneGroup", func(t *testing.T) {
		s := newStore(t, nil)
		first := newJob("x")
		second := with(newJob("x"), func(j *store.NewJob) { j.Payload = []byte(`{"second":true}`) })
		res := enqueue(t, s, nsA, base,
			store.EnqueueCall{Jobs: []store.NewJob{first}},
			store.EnqueueCall{Jobs: []store.NewJob{second}},
		)
		wantResult(t, "first call", res[0][0], "x", api.OutcomeEnqueued)
		wantResult(t, "second call", res[1][0], "x", api.OutcomeDeduplicated)
		got := getJob(t, s, nsA, "x")
		wantJob(t, "stored job", got, pendingJob(nsA, first, base, got.Seq))
		wantCounts(t, s, nsA, store.Counts{Pending: 1})
	})

	t.Run("RepeatedIDsInALargeCall", func(t *testing.T) {
		// A store may write a large call's rows in one statement: a
		// repeated id is still deduplicated row by row, the first kept.
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base, newJob("stored"))
		jobs := make([]store.NewJob, 20)
		for i := range jobs {
			jobs[i] = newJob(fmt.Sprintf("r%02d", i))
		}
		jobs[3].ID, jobs[10].ID = "r01", "r01"
		jobs[15].ID = "stored"
		res := enqueue(t, s, nsA, base, store.EnqueueCall{Jobs: jobs})[0]
		for i, r := range res {
			want := api.OutcomeEnqueued
			if i == 3 || i == 10 || i == 15 {
				want = api.OutcomeDeduplicated
			}
			wantResult(t, fmt.Sprintf("job %d", i), r, jobs[i].ID, want)
		}
		if got := getJob(t, s, nsA, "r01"); !sameJSON(got.Payload, jobs[1].Payload) {
			t.Errorf("r01 holds %s, want the first job's %s", got.Payload, jobs[1].Payload)
		}
		wantCounts(t, s, nsA, store.Counts{Pending: 18})
	})

	t.Run("IDsArePerNamespace", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base, newJob("same"))
		r := enqueueOne(t, s, nsB, base, with(newJob("same"), func(j *store.NewJob) { j.Queue = "qb" }))
		wantResult(t, "same id in another namespace", r, "same", api.OutcomeEnqueued)
		if a, b := getJob(t, s, nsA, "same"), getJob(t, s, nsB, "same"); a.Queue != "q" || b.Queue != "qb" || a.Namespace != nsA || b.Namespace != nsB {
			t.Errorf("jobs %q mixed up across namespaces: %s/%s and %s/%s", "same", a.Namespace, a.Queue, b.Namespace, b.Queue)
		}
		wantCounts(t, s, nsA, store.Counts{Pending: 1})
		wantCounts(t, s, nsB, store.Counts{Pending: 1})
	})

	t.Run("UniqueKeyHeldByPending", func(t *testing.T) {
		s := newStore(t, nil)
		holder := with(newJob("holder"), func(j *store.NewJob) { j.UniqueKey = "uk"; j.RunAt = at(time.Hour) })
		mustEnqueue(t, s, nsA, base, holder)
		before := getJob(t, s, nsA, "holder")
		r := enqueueOne(t, s, nsA, base, with(newJob("newcomer"), func(j *store.NewJob) { j.UniqueKey = "uk" }))
		wantResult(t, "unique key held by a pending (delayed) job", r, "holder", api.OutcomeDeduplicated)
		wantNoJob(t, s, nsA, "newcomer")
		wantUnchanged(t, s, before)
		wantCounts(t, s, nsA, store.Counts{Pending: 1})

		// A generated id is deduplicated the same way.
		r = enqueueOne(t, s, nsA, base, with(newJob("01JH0000000000000000000001"), func(j *store.NewJob) { j.Generated = true; j.UniqueKey = "uk" }))
		wantResult(t, "generated id, unique key held", r, "holder", api.OutcomeDeduplicated)
		wantCounts(t, s, nsA, store.Counts{Pending: 1})
	})

	t.Run("UniqueKeyHeldByRunning", func(t *testing.T) {
		s := newStore(t, nil)
		runJob(t, s, nsA, base, with(newJob("holder"), func(j *store.NewJob) { j.UniqueKey = "uk" }))
		before := getJob(t, s, nsA, "holder")
		r := enqueueOne(t, s, nsA, base, with(newJob("newcomer"), func(j *store.NewJob) { j.UniqueKey = "uk" }))
		wantResult(t, "unique key held by a running job", r, "holder", api.OutcomeDeduplicated)
		wantNoJob(t, s, nsA, "newcomer")
		wantUnchanged(t, s, before)
	})

	t.Run("UniqueKeyOfFinishedJobDoesNotBlock", func(t *testing.T) {
		s := newStore(t, nil)
		completeJob(t, s, nsA, at(-2*time.Minute), with(newJob("done"), func(j *store.NewJob) { j.UniqueKey = "uk-c" }))
		killJob(t, s, nsA, at(-time.Minute), with(newJob("dead"), func(j *store.NewJob) { j.UniqueKey = "uk-d" }), false)
		r := enqueueOne(t, s, nsA, base, with(newJob("after-completed"), func(j *store.NewJob) { j.UniqueKey = "uk-c" }))
		wantResult(t, "unique key of a completed job", r, "after-completed", api.OutcomeEnqueued)
		r = enqueueOne(t, s, nsA, base, with(newJob("after-dead"), func(j *store.NewJob) { j.UniqueKey = "uk-d" }))
		wantResult(t, "unique key of a dead job", r, "after-dead", api.OutcomeEnqueued)
		// The new jobs hold the keys now.
		r = enqueueOne(t, s, nsA, base, with(newJob("third"), func(j *store.NewJob) { j.UniqueKey = "uk-c" }))
		wantResult(t, "unique key held by the new job", r, "after-completed", api.OutcomeDeduplicated)
		wantCounts(t, s, nsA, store.Counts{Pending: 2, Completed: 1, Dead: 1})
	})

	t.Run("UniqueKeyReleasedWhenHolderFinishes", func(t *testing.T) {
		s := newStore(t, nil)
		r := runJob(t, s, nsA, base, with(newJob("holder"), func(j *store.NewJob) { j.UniqueKey = "uk" }))
		update(t, s, nsA, base, store.JobUpdate{ID: r.ID, Attempt: r.Attempt, Kind: store.UpdateComplete})
		res := enqueueOne(t, s, nsA, at(time.Second), with(newJob("next"), func(j *store.NewJob) { j.UniqueKey = "uk" }))
		wantResult(t, "unique key after its holder completed", res, "next", api.OutcomeEnqueued)
	})

	t.Run("UniqueKeyWithinOneGroup", func(t *testing.T) {
		s := newStore(t, nil)
		res := enqueue(t, s, nsA, base,
			store.EnqueueCall{Jobs: []store.NewJob{
				with(newJob("u1"), func(j *store.NewJob) { j.UniqueKey = "uk" }),
				with(newJob("u2"), func(j *store.NewJob) { j.UniqueKey = "uk" }),
			}},
			store.EnqueueCall{Jobs: []store.NewJob{
				with(newJob("u3"), func(j *store.NewJob) { j.UniqueKey = "uk" }),
				with(newJob("u4"), func(j *store.NewJob) { j.UniqueKey = "other" }),
			}},
		)
		wantResult(t, "first holder", res[0][0], "u1", api.OutcomeEnqueued)
		wantResult(t, "same call", res[0][1], "u1", api.OutcomeDeduplicated)
		wantResult(t, "later call", res[1][0], "u1", api.OutcomeDeduplicated)
		wantResult(t, "other key", res[1][1], "u4", api.OutcomeEnqueued)
		wantNoJob(t, s, nsA, "u2")
		wantNoJob(t, s, nsA, "u3")
		wantCounts(t, s, nsA, store.Counts{Pending: 2})
	})

	t.Run("UniqueKeyIsPerNamespace", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base, with(newJob("a"), func(j *store.NewJob) { j.UniqueKey = "uk" }))
		r := enqueueOne(t, s, nsB, base, with(newJob("b"), func(j *store.NewJob) { j.UniqueKey = "uk" }))
		wantResult(t, "unique key held in another namespace", r, "b", api.OutcomeEnqueued)
	})

	t.Run("DebounceCoalescesIntoPending", func(t *testing.T) {
		s := newStore(t, nil)
		first := with(newJob("first"), func(j *store.NewJob) {
			j.DebounceKey = "dk"
			j.RunAt = at(time.Minute)
			j.Payload = []byte(`{"v":1}`)
			j.Priority = 4
			j.MaxAttempts = 3
		})
		mustEnqueue(t, s, nsA, base, first)
		orig := getJob(t, s, nsA, "first")

		second := with(newJob("second"), func(j *store.NewJob) {
			j.DebounceKey = "dk"
			j.RunAt = at(90 * time.Second)
			j.Payload = []byte(`{"v":2}`)
			j.Priority = 9
			j.MaxAttempts = 8
		})
		r := enqueueOne(t, s, nsA, at(30*time.Second), second)
		wantResult(t, "debounce key held by a pending job", r, "first", api.OutcomeCoalesced)
		wantNoJob(t, s, nsA, "second")
		want := orig
		want.Payload = second.Payload
		want.RunAt = second.RunAt
		wantJob(t, "coalesced job (payload and run_at replaced, nothing else)", getJob(t, s, nsA, "first"), want)
		wantCounts(t, s, nsA, store.Counts{Pending: 1})

		// Not due before its new run_at.
		if got := claimOnce(t, s, nsA, at(time.Minute), 10, "q"); len(got) != 0 {
			t.Errorf("claim at the old run_at got %v; the coalesced job moved to the new one", ids(got))
		}
	})

	t.Run("DebounceHolderRunningEnqueuesNew", func(t *testing.T) {
		s := newStore(t, nil)
		runJob(t, s, nsA, base, with(newJob("first"), func(j *store.NewJob) { j.DebounceKey = "dk" }))
		running := getJob(t, s, nsA, "first")
		second := with(newJob("second"), func(j *store.NewJob) { j.DebounceKey = "dk"; j.RunAt = at(time.Minute) })
		r := enqueueOne(t, s, nsA, base, second)
		wantResult(t, "debounce key of a running job", r, "second", api.OutcomeEnqueued)
		wantUnchanged(t, s, running)
		got := getJob(t, s, nsA, "second")
		wantJob(t, "new debounced job", got, pendingJob(nsA, second, base, got.Seq))

		// The new pending job holds the key now.
		third := with(newJob("third"), func(j *store.NewJob) {
			j.DebounceKey = "dk"
			j.RunAt = at(2 * time.Minute)
			j.Payload = []byte(`{"v":3}`)
		})
		r = enqueueOne(t, s, nsA, at(time.Second), third)
		wantResult(t, "debounce key of the new pending job", r, "second", api.OutcomeCoalesced)
		got = getJob(t, s, nsA, "second")
		wantJSON(t, "coalesced payload", got.Payload, `{"v":3}`)
		wantTime(t, "coalesced run_at", got.RunAt, at(2*time.Minute))
		wantUnchanged(t, s, running)
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Running: 1})
	})

	t.Run("DebounceRetryTakesKeyBackOnlyIfFree", func(t *testing.T) {
		s := newStore(t, nil)
		r1 := runJob(t, s, nsA, base, with(newJob("a"), func(j *store.NewJob) { j.DebounceKey = "dk" }))
		// While a runs, b takes the key.
		wantResult(t, "b", enqueueOne(t, s, nsA, base, with(newJob("b"), func(j *store.NewJob) { j.DebounceKey = "dk" })), "b", api.OutcomeEnqueued)
		// a's retry must not fail (nor steal the key): it keeps none.
		if applied := update(t, s, nsA, base, store.JobUpdate{ID: "a", Attempt: r1.Attempt, Kind: store.UpdateRetry, RunAt: at(time.Minute), Error: "x"}); !applied[0] {
			t.Fatal("retry of a job whose debounce key was taken was not applied")
		}
		if got := getJob(t, s, nsA, "a"); got.Status != api.StatusPending || got.DebounceKey != "" {
			t.Fatalf("retried job: status %s debounce key %q, want pending with no key", got.Status, got.DebounceKey)
		}
		wantResult(t, "c coalesces into the holder", enqueueOne(t, s, nsA, base, with(newJob("c"), func(j *store.NewJob) { j.DebounceKey = "dk" })), "b", api.OutcomeCoalesced)
		// With the key free, a retried job takes it back.
		r2 := runJob(t, s, nsA, base, with(newJob("d"), func(j *store.NewJob) { j.DebounceKey = "dk2"; j.Queue = "q2" }))
		update(t, s, nsA, base, store.JobUpdate{ID: "d", Attempt: r2.Attempt, Kind: store.UpdateRetry, RunAt: at(time.Minute), Error: "x"})
		wantResult(t, "e coalesces into the retried job", enqueueOne(t, s, nsA, base, with(newJob("e"), func(j *store.NewJob) { j.DebounceKey = "dk2" })), "d", api.OutcomeCoalesced)
	})

	t.Run("DebounceFinishedHolderEnqueuesNew", func(t *testing.T) {
		s := newStore(t, nil)
		completeJob(t, s, nsA, at(-time.Minute), with(newJob("done"), func(j *store.NewJob) { j.DebounceKey = "dk-c" }))
		killJob(t, s, nsA, at(-time.Minute), with(newJob("dead"), func(j *store.NewJob) { j.DebounceKey = "dk-d" }), false)
		r := enqueueOne(t, s, nsA, base, with(newJob("n1"), func(j *store.NewJob) { j.DebounceKey = "dk-c" }))
		wantResult(t, "debounce key of a completed job", r, "n1", api.OutcomeEnqueued)
		r = enqueueOne(t, s, nsA, base, with(newJob("n2"), func(j *store.NewJob) { j.DebounceKey = "dk-d" }))
		wantResult(t, "debounce key of a dead job", r, "n2", api.OutcomeEnqueued)
	})

	t.Run("DebounceWithinOneGroup", func(t *testing.T) {
		s := newStore(t, nil)
		res := enqueue(t, s, nsA, base,
			store.EnqueueCall{Jobs: []store.NewJob{
				with(newJob("d1"), func(j *store.NewJob) { j.DebounceKey = "dk"; j.Payload = []byte(`1`) }),
				with(newJob("d2"), func(j *store.NewJob) { j.DebounceKey = "dk"; j.Payload = []byte(`2`); j.RunAt = at(time.Minute) }),
			}},
			store.EnqueueCall{Jobs: []store.NewJob{
				with(newJob("d3"), func(j *store.NewJob) { j.DebounceKey = "dk"; j.Payload = []byte(`3`); j.RunAt = at(2 * time.Minute) }),
			}},
		)
		wantResult(t, "first", res[0][0], "d1", api.OutcomeEnqueued)
		wantResult(t, "same call", res[0][1], "d1", api.OutcomeCoalesced)
		wantResult(t, "later call", res[1][0], "d1", api.OutcomeCoalesced)
		got := getJob(t, s, nsA, "d1")
		wantJSON(t, "payload after two coalesces", got.Payload, `3`)
		wantTime(t, "run_at after two coalesces", got.RunAt, at(2*time.Minute))
		wantNoJob(t, s, nsA, "d2")
		wantNoJob(t, s, nsA, "d3")
		wantCounts(t, s, nsA, store.Counts{Pending: 1})
	})

	t.Run("DebounceKeyIsPerNamespace", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base, with(newJob("a"), func(j *store.NewJob) { j.DebounceKey = "dk" }))
		r := enqueueOne(t, s, nsB, base, with(newJob("b"), func(j *store.NewJob) { j.DebounceKey = "dk" }))
		wantResult(t, "debounce key held in another namespace", r, "b", api.OutcomeEnqueued)
		wantJSON(t, "payload in the first namespace", getJob(t, s, nsA, "a").Payload, `{"id":"a"}`)
	})

	t.Run("ManyJobsInOneCall", func(t *testing.T) {
		s := newStore(t, nil)
		var jobs []store.NewJob
		for i := range 250 {
			jobs = append(jobs, with(newJob(fmt.Sprintf("bulk-%03d", i)), func(j *store.NewJob) { j.Generated = i%2 == 0 }))
		}
		mustEnqueue(t, s, nsA, base, jobs...)
		wantCounts(t, s, nsA, store.Counts{Pending: 250})
		all := listAll(t, s, nsA)
		if len(all) != 250 || all[0].ID != "bulk-249" || all[249].ID != "bulk-000" {
			t.Errorf("JobList after a 250-job call: %d jobs, newest %v", len(all), ids(all[:min(3, len(all))]))
		}
	})
}

func exerciseShed(t *testing.T, newStore Factory) {
	shedWant := func(ns string, j store.NewJob, now time.Time, seq int64) store.Job {
		w := pendingJob(ns, j, now, seq)
		w.Status = api.StatusDead
		w.Error = shedError
		w.DeadMeta = []byte(`{"shed":"quota"}`)
		w.Shed = true
		w.FinishedAt = now
		w.UniqueKey = ""
		w.DebounceKey = ""
		return w
	}

	t.Run("WrittenDead", func(t *testing.T) {
		s := newStore(t, nil)
		j1 := with(newJob("s1"), func(j *store.NewJob) { j.UniqueKey = "uk"; j.Priority = 3; j.MaxAttempts = 2 })
		j2 := with(newJob("s2"), func(j *store.NewJob) { j.DebounceKey = "dk"; j.RunAt = at(time.Hour) })
		j3 := with(newJob("01JH0000000000000000000009"), func(j *store.NewJob) { j.Generated = true })
		res := enqueue(t, s, nsA, base, store.EnqueueCall{Jobs: []store.NewJob{j1, j2, j3}, ShedError: shedError})[0]
		for i, j := range []store.NewJob{j1, j2, j3} {
			wantResult(t, "shed job", res[i], j.ID, api.OutcomeShed)
			got := getJob(t, s, nsA, j.ID)
			wantJob(t, "shed job "+j.ID, got, shedWant(nsA, j, base, got.Seq))
		}
		wantCounts(t, s, nsA, store.Counts{Dead: 3})
		if got := claimOnce(t, s, nsA, at(24*time.Hour), 10, "q"); len(got) != 0 {
			t.Errorf("shed jobs were claimed: %v", ids(got))
		}
	})

	t.Run("HoldsNoKeys", func(t *testing.T) {
		s := newStore(t, nil)
		enqueue(t, s, nsA, base, store.EnqueueCall{ShedError: shedError, Jobs: []store.NewJob{
			with(newJob("s1"), func(j *store.NewJob) { j.UniqueKey = "uk" }),
			with(newJob("s2"), func(j *store.NewJob) { j.DebounceKey = "dk" }),
		}})
		r := enqueueOne(t, s, nsA, base, with(newJob("a1"), func(j *store.NewJob) { j.UniqueKey = "uk" }))
		wantResult(t, "unique key of a shed job", r, "a1", api.OutcomeEnqueued)
		r = enqueueOne(t, s, nsA, base, with(newJob("a2"), func(j *store.NewJob) { j.DebounceKey = "dk" }))
		wantResult(t, "debounce key of a shed job", r, "a2", api.OutcomeEnqueued)
		wantCounts(t, s, nsA, store.Counts{Pending: 2, Dead: 2})
	})

	t.Run("ShedWithinOneCallHoldsNoKeys", func(t *testing.T) {
		// Within one shed call, a second job with the same keys is shed
		// too (the first holds nothing to deduplicate or coalesce into).
		s := newStore(t, nil)
		res := enqueue(t, s, nsA, base, store.EnqueueCall{ShedError: shedError, Jobs: []store.NewJob{
			with(newJob("s1"), func(j *store.NewJob) { j.UniqueKey = "uk" }),
			with(newJob("s2"), func(j *store.NewJob) { j.UniqueKey = "uk" }),
			with(newJob("s3"), func(j *store.NewJob) { j.DebounceKey = "dk" }),
			with(newJob("s4"), func(j *store.NewJob) { j.DebounceKey = "dk" }),
		}})[0]
		for i, id := range []string{"s1", "s2", "s3", "s4"} {
			wantResult(t, "shed job with a repeated key", res[i], id, api.OutcomeShed)
		}
		wantCounts(t, s, nsA, store.Counts{Dead: 4})
	})

	t.Run("KeyHeldByLiveJobStillShed", func(t *testing.T) {
		// Admission comes before deduplication (docs/quotas.md): a duplicate of
		// a live job's keys is shed, and the live job is left alone.
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base,
			with(newJob("uholder"), func(j *store.NewJob) { j.UniqueKey = "uk" }),
			with(newJob("dholder"), func(j *store.NewJob) { j.DebounceKey = "dk"; j.RunAt = at(time.Hour) }),
		)
		uh, dh := getJob(t, s, nsA, "uholder"), getJob(t, s, nsA, "dholder")
		res := enqueue(t, s, nsA, base, store.EnqueueCall{ShedError: shedError, Jobs: []store.NewJob{
			with(newJob("s1"), func(j *store.NewJob) { j.UniqueKey = "uk" }),
			with(newJob("s2"), func(j *store.NewJob) { j.DebounceKey = "dk"; j.Payload = []byte(`{"shed":1}`) }),
		}})[0]
		wantResult(t, "shed duplicate of a unique key", res[0], "s1", api.OutcomeShed)
		wantResult(t, "shed duplicate of a debounce key", res[1], "s2", api.OutcomeShed)
		wantUnchanged(t, s, uh)
		wantUnchanged(t, s, dh)
		if got := getJob(t, s, nsA, "s1"); got.Status != api.StatusDead || !got.Shed {
			t.Errorf("shed duplicate stored as %s shed=%t, want a shed dead letter", got.Status, got.Shed)
		}
		wantCounts(t, s, nsA, store.Counts{Pending: 2, Dead: 2})
	})

	t.Run("IDAlreadyStoredWritesNothing", func(t *testing.T) {
		s := newStore(t, nil)
		mustEnqueue(t, s, nsA, base, newJob("p"))
		dead := killJob(t, s, nsA, base, with(newJob("d"), func(j *store.NewJob) { j.Queue = "qd" }), false)
		pending := getJob(t, s, nsA, "p")
		res := enqueue(t, s, nsA, at(time.Minute), store.EnqueueCall{ShedError: shedError, Jobs: []store.NewJob{
			with(newJob("p"), func(j *store.NewJob) { j.Payload = []byte(`{"shed":1}`) }),
			with(newJob("d"), func(j *store.NewJob) { j.Payload = []byte(`{"shed":1}`) }),
		}})[0]
		wantResult(t, "shed job repeating a pending id", res[0], "p", api.OutcomeShed)
		wantResult(t, "shed job repeating a dead id", res[1], "d", api.OutcomeShed)
		wantUnchanged(t, s, pending)
		wantUnchanged(t, s, dead)
		wantCounts(t, s, nsA, store.Counts{Pending: 1, Dead: 1})
	})

	t.Run("IDRepeatedInOneGroupWritesOnce", func(t *testing.T) {
		// An id new to the store, shed and then repeated within one group
		// (shed again, then admitted): the first writes the dead letter,
		// the others find it and write nothing.
		s := newStore(t, nil)
		first := with(newJob("x"), func(j *store.NewJob) { j.Payload = []byte(`{"first":1}`) })
		again := with(newJob("x"), func(j *store.NewJob) { j.Payload = []byte(`{"again":1}`); j.Queue = "q2" })
		res := enqueue(t, s, nsA, base,
			store.EnqueueCall{ShedError: shedError, Jobs: []store.NewJob{first}},
			store.EnqueueCall{ShedError: shedError, Jobs: []store.NewJob{again}},
			store.EnqueueCall{Jobs: []store.NewJob{again}},
		)
		wantResult(t, "shed job", res[0][0], "x", api.OutcomeShed)
		wantResult(t, "shed job repeating its id", res[1][0], "x", api.OutcomeShed)
		wantResult(t, "admitted job repeating its id", res[2][0], "x", api.OutcomeDeduplicated)
		got := getJob(t, s, nsA, "x")
		wantJob(t, "the job", got, shedWant(nsA, first, base, got.Seq))
		wantCounts(t, s, nsA, store.Counts{Dead: 1})
		wantIDs(t, "JobList", listAll(t, s, nsA), "x")
	})

	t.Run("MixedWithAdmittedCalls", func(t *testing.T) {
		s := newStore(t, nil)
		res := enqueue(t, s, nsA, base,
			store.EnqueueCall{Jobs: []store.NewJob{newJob("a1")}},
			store.EnqueueCall{ShedError: shedError, Jobs: []store.NewJob{newJob("s1"), newJob("s2")}},
			store.EnqueueCall{Jobs: []store.NewJob{newJob("a2")}},
		)
		wantResult(t, "admitted call before", res[0][0], "a1", api.OutcomeEnqueued)
		wantResult(t, "shed call", res[1][0], "s1", api.OutcomeShed)
		wantResult(t, "shed call", res[1][1], "s2", api.OutcomeShed)
		wantResult(t, "admitted call after", res[2][0], "a2", api.OutcomeEnqueued)
		wantCounts(t, s, nsA, store.Counts{Pending: 2, Dead: 2})
		wantIDs(t, "JobList shed=true", list(t, s, store.JobListParams{Namespace: nsA, Shed: boolPtr(true)}), "s2", "s1")
	})
}

func exerciseReplay(t *testing.T, newStore Factory) {
	t.Run("AdmittedBecomesPending", func(t *testing.T) {
		s := newStore(t, nil)
		dead := killJob(t, s, nsA, at(-time.Hour), with(newJob("d"), func(j *store.NewJob) {
			j.Priority = 2
			j.MaxAttempts = 4
			j.Payload = []byte(`{"keep":true}`)
		}), false)
		if dead.Attempt != 1 || dead.Error != "boom" {
			t.Fatalf("setup: dead letter has attempt %d error %q", dead.Attempt, dead.Error)
		}
		res := replay(t, s, nsA, base, store.EnqueueCall{ReplayIDs: []string{"d"}})
		wantResult(t, "replay", res[0], "d", api.OutcomeEnqueued)
		got := getJob(t, s, nsA, "d")
		want := dead
		want.Seq = got.Seq // a replay may or may not take a new place in line
		want.Status = api.StatusPending
		want.Attempt = 0
		want.RunAt = base
		want.Error = ""
		want.DeadMeta = nil
		want.FinishedAt = time.Time{}
		want.LeaseUntil = time.Time{}
		want.Worker = got.Worker   // not part of the contract
		want.Result = got.Result   // not part of the contract
		want.NoRetry = got.NoRetry // not part of the contract
		wantJob(t, "replayed job", got, want)
		wantCounts(t, s, nsA, store.Counts{Pending: 1})

		// It runs again, from attempt 1.
		c := claimOnce(t, s, nsA, base, 1, "q")
		if len(c) != 1 || c[0].ID != "d" || c[0].Attempt != 1 {
			t.Errorf("claim after replay got %+v, want d at attempt 1", c)
		}
	})

	t.Run("ManualReplayDoesNotCountAgainstMax", func(t *testing.T) {
		s := newStore(t, nil)
		killJob(t, s, nsA, at(-time.Hour), newJob("d"), false)
		replay(t, s, nsA, base, store.EnqueueCall{ReplayIDs: []string{"d"}})
		if got := getJob(t, s, nsA, "d"); got.DeadReplays != 0 {
			t.Errorf("DeadReplays after a manual replay = %d, want 0", got.DeadReplays)
		}
	})

	t.Run("AutoRetryCountsReplays", func(t *testing.T) {
		s := newStore(t, nil)
		killJob(t, s, nsA, at(-3*time.Hour), newJob("d"), false)
		for i := int64(1); i <= 2; i++ {
			now := at(time.Duration(-3+i) * time.Hour)
			res := replay(t, s, nsA, now, store.EnqueueCall{ReplayIDs: []string{"d"}, AutoRetry: true})
			wantResult(t, "auto-retry replay", res[0], "d", api.OutcomeEnqueued)
			got := getJob(t, s, nsA, "d")
			if got.DeadReplays != i || got.Status != api.StatusPending {
				t.Errorf("after auto-retry replay %d: DeadReplays %d status %s, want %d pending", i, got.DeadReplays, got.Status, i)
			}
			r := claimJob(t, s, nsA, now, "d", "q")
			killRunning(t, s, nsA, now.Add(time.Minute), r, false)
			if got := getJob(t, s, nsA, "d"); got.DeadReplays != i {
				t.Errorf("DeadReplays after dying again = %d, want %d (kept)", got.DeadReplays, i)
			}
		}
	})

	t.Run("ShedReplayStaysDeadMarkedShed", func(t *testing.T) {
		s := newStore(t, nil)
		dead := killJob(t, s, nsA, at(-time.Hour), with(newJob("d"), func(j *store.NewJob) {
			j.UniqueKey = "uk"
			j.DebounceKey = "dk"
		}), false)
		res := replay(t, s, nsA, base, store.EnqueueCall{ReplayIDs: []string{"d"}, ShedError: shedError, AutoRetry: true})
		wantResult(t, "shed replay", res[0], "d", api.OutcomeShed)
		got := getJob(t, s, nsA, "d")
		want := dead
		want.Shed = true
		want.DeadMeta = []byte(`{"shed":"quota"}`)
		want.Error = shedError
		want.UniqueKey = ""
		want.DebounceKey = ""
		want.FinishedAt = got.FinishedAt // kept or moved to Now: not part of the contract
		want.Seq = got.Seq
		wantJob(t, "dead letter after a shed replay (DeadReplays counts admitted replays only)", got, want)
		wantCounts(t, s, nsA, store.Counts{Dead: 1})
		wantIDs(t, "JobList shed=true", list(t, s, store.JobListParams{Namespace: nsA, Shed: boolPtr(true)}), "d")

		// Stripped of keys: it blocks nothing.
		r := enqueueOne(t, s, nsA, base, with(newJob("n"), func(j *store.NewJob) { j.UniqueKey = "uk" }))
		wantResult(t, "unique key of a shed dead letter", r, "n", api.OutcomeEnqueued)
	})

	t.Run("AdmittedReplayOfShedJob", func(t *testing.T) {
		// A shed dead letter replayed by hand and admitted is pending
		// again: its dead metadata, and so its shed mark, are cleared.
		s := newStore(t, nil)
		shedJob(t, s, nsA, at(-time.Hour), newJob("s"))
		res := replay(t, s, nsA, base, store.EnqueueCall{ReplayIDs: []string{"s"}})
		wantResult(t, "replay of a shed job", res[0], "s", api.OutcomeEnqueued)
		got := getJob(t, s, nsA, "s")
		if got.Status != api.StatusPending || got.Shed || got.DeadMeta != nil || got.Error != "" || !got.FinishedAt.IsZero() {
			t.Errorf("replayed shed job: status %s shed %t dead_meta %s error %q finished_at %s; want pending, not shed, cleared",
				got.Status, got.Shed, showBytes(got.DeadMeta), got.Error, fmtTime(got.FinishedAt))
		}
		wantIDs(t, "claim", claimOnce(t, s, nsA, base, 1, "q"), "s")
	})

	t.Run("NotDeadOrUnknownWritesNothing", func(t *testing.T) {
		s := newStore(t, nil)
		completed := completeJob(t, s, nsA, at(-time.Hour), with(newJob("c"), func(j *store.NewJob) { j.Queue = "qc" }))
		running := runJob(t, s, nsA, at(-time.Hour), with(newJob("r"), func(j *store.NewJob) { j.Queue = "qr" }))
		running = getJob(t, s, nsA, running.ID)
		mustEnqueue(t, s, nsA, base, newJob("p"))
		pending := getJob(t, s, nsA, "p")
		killJob(t, s, nsB, at(-time.Hour), newJob("other-ns"), false)
		before := counts(t, s, nsA)

		for _, shed := range []string{"", shedError} {
			res := replay(t, s, nsA, base, store.EnqueueCall{ReplayIDs: []string{"p", "r", "c", "nope", "other-ns"}, ShedError: shed})
			for i, id := range []string{"p", "r", "c", "nope", "other-ns"} {
				if res[i].Outcome != "" || (res[i].ID != id && res[i].ID != "") {
					t.Errorf("replay (shed=%t) of %s: result %+v, want outcome \"\"", shed != "", id, res[i])
				}
			}
			wantUnchanged(t, s, pending)
			wantUnchanged(t, s, running)
			wantUnchanged(t, s, completed)
			wantNoJob(t, s, nsA, "nope")
			wantNoJob(t, s, nsA, "other-ns")
			wantCounts(t, s, nsA, before)
		}
		if got := getJob(t, s, nsB, "other-ns"); got.Status != api.StatusDead {
			t.Errorf("dead letter of another namespace replayed: status %s", got.Status)
		}
	})

	t.Run("TwiceInOneGroup", func(t *testing.T) {
		s := newStore(t, nil)
		killJob(t, s, nsA, at(-time.Hour), newJob("d"), false)
		res := enqueue(t, s, nsA, base,
			store.EnqueueCall{ReplayIDs: []string{"d", "d"}, AutoRetry: true},
			store.EnqueueCall{ReplayIDs: []string{"d"}, AutoRetry: true},
		)
		wantResult(t, "first replay", res[0][0], "d", api.OutcomeEnqueued)
		for _, r := range []api.EnqueueResult{res[0][1], res[1][0]} {
			if r.Outcome != "" {
				t.Errorf("replay of a job already replayed in the group: %+v, want outcome \"\"", r)
			}
		}
		if got := getJob(t, s, nsA, "d"); got.Status != api.StatusPending || got.DeadReplays != 1 {
			t.Errorf("after the group: status %s DeadReplays %d, want pending 1", got.Status, got.DeadReplays)
		}
	})

	t.Run("UniqueKeyHeldByAnotherJob", func(t *testing.T) {
		s := newStore(t, nil)
		dead := killJob(t, s, nsA, at(-time.Hour), with(newJob("d"), func(j *store.NewJob) { j.UniqueKey = "uk" }), false)
		mustEnqueue(t, s, nsA, base, with(newJob("holder"), func(j *store.NewJob) { j.UniqueKey = "uk"; j.Queue = "q2" }))
		res := replay(t, s, nsA, base, store.EnqueueCall{ReplayIDs: []string{"d"}, AutoRetry: true})
		wantResult(t, "replay whose unique key is held", res[0], "holder", api.OutcomeDeduplicated)
		wantUnchanged(t, s, dead)

		// Held by a running job: same.
		claimJob(t, s, nsA, base, "holder", "q2")
		res = replay(t, s, nsA, base, store.EnqueueCall{ReplayIDs: []string{"d"}})
		wantResult(t, "replay whose unique key is held by a running job", res[0], "holder", api.OutcomeDeduplicated)
		wantUnchanged(t, s, dead)
	})

	t.Run("UniqueKeyTakenEarlierInGroup", func(t *testing.T) {
		s := newStore(t, nil)
		dead := killJob(t, s, nsA, at(-time.Hour), with(newJob("d"), func(j *store.NewJob) { j.UniqueKey = "uk" }), false)
		res := enqueue(t, s, nsA, base,
			store.EnqueueCall{Jobs: []store.NewJob{with(newJob("n"), func(j *store.NewJob) { j.UniqueKey = "uk" })}},
			store.EnqueueCall{ReplayIDs: []string{"d"}},
		)
		wantResult(t, "new job", res[0][0], "n", api.OutcomeEnqueued)
		wantResult(t, "replay after it in the group", res[1][0], "n", api.OutcomeDeduplicated)
		wantUnchanged(t, s, dead)
	})

	t.Run("ReplayedJobHoldsItsUniqueKey", func(t *testing.T) {
		s := newStore(t, nil)
		killJob(t, s, nsA, at(-time.Hour), with(newJob("d"), func(j *store.NewJob) { j.UniqueKey = "uk" }), false)
		res := enqueue(t, s, nsA, base,
			store.EnqueueCall{ReplayIDs: []string{"d"}},
			store.EnqueueCall{Jobs: []store.NewJob{with(newJob("n"), func(j *store.NewJob) { j.UniqueKey = "uk" })}},
		)
		wantResult(t, "replay", res[0][0], "d", api.OutcomeEnqueued)
		wantResult(t, "new job after it in the group", res[1][0], "d", api.OutcomeDeduplicated)
		wantNoJob(t, s, nsA, "n")
		if got := getJob(t, s, nsA, "d"); got.UniqueKey != "uk" {
			t.Errorf("replayed job's UniqueKey = %q, want uk", got.UniqueKey)
		}
	})

	t.Run("MixedResults", func(t *testing.T) {
		s := newStore(t, nil)
		killJob(t, s, nsA, at(-3*time.Hour), newJob("d1"), false)
		killJob(t, s, nsA, at(-2*time.Hour), newJob("d2"), true)
		res := replay(t, s, nsA, base, store.EnqueueCall{ReplayIDs: []string{"d2", "gone", "d1"}})
		wantResult(t, "replay of a retry:false dead letter", res[0], "d2", api.OutcomeEnqueued)
		if res[1].Outcome != "" {
			t.Errorf("replay of an unknown id: %+v, want outcome \"\"", res[1])
		}
		wantResult(t, "replay", res[2], "d1", api.OutcomeEnqueued)
		wantCounts(t, s, nsA, store.Counts{Pending: 2})
	})
}
