package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// exerciseCluster checks store.ClusterStore (membership, leases with
// epochs) and the Fence of job writes. A backend that does not implement
// ClusterStore (SQLite: one node owns it) skips those cases and must
// instead ignore a Fence: its writes land as if none were given.
func exerciseCluster(t *testing.T, newStore Factory) {
	// clusterStore returns a fresh store and its ClusterStore, or skips.
	clusterStore := func(t *testing.T) (store.Store, store.ClusterStore) {
		t.Helper()
		s := newStore(t, nil)
		cs, ok := s.(store.ClusterStore)
		if !ok {
			t.Skipf("%T does not implement store.ClusterStore", s)
		}
		return s, cs
	}

	t.Run("FenceIgnoredWithoutClusterStore", func(t *testing.T) {
		s := newStore(t, nil)
		if _, ok := s.(store.ClusterStore); ok {
			t.Skipf("%T implements store.ClusterStore: fences are checked", s)
		}
		// A fence naming a lease nobody ever took: a single-node store has
		// no leases, so it writes anyway.
		f := &store.Fence{Lease: "ns:" + nsA, Holder: "node-a", Epoch: 7}
		if _, err := s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: nsA, Now: base, Fence: f,
			Calls: []store.EnqueueCall{{Jobs: []store.NewJob{newJob("a")}}}}); err != nil {
			t.Fatalf("fenced JobEnqueueMany on a store without leases: %v", err)
		}
		got, err := s.JobClaimMany(t.Context(), store.JobClaimManyParams{Namespace: nsA, Now: base, Fence: f,
			Claims: []store.ClaimSpec{{Queues: []string{"q"}, Max: 1, LeaseUntil: at(time.Minute), Worker: "w"}}})
		if err != nil {
			t.Fatalf("fenced JobClaimMany on a store without leases: %v", err)
		}
		wantIDs(t, "fenced claim", got[0], "a")
		applied, err := s.JobUpdateMany(t.Context(), store.JobUpdateManyParams{Namespace: nsA, Now: base, Fence: f,
			Updates: []store.JobUpdate{{ID: "a", Attempt: 1, Kind: store.UpdateComplete}}})
		if err != nil || len(applied) != 1 || !applied[0] {
			t.Fatalf("fenced JobUpdateMany on a store without leases: %v, %v", applied, err)
		}
		wantCounts(t, s, nsA, store.Counts{Completed: 1})
	})

	t.Run("MemberHeartbeat", func(t *testing.T) {
		_, cs := clusterStore(t)
		infoA := store.MemberInfo{Maintenance: true, Ready: true, Owned: 3, Admin: "http://a:8081"}
		infoB := store.MemberInfo{Ready: true}
		got := heartbeat(t, cs, "node-b", infoB, base, 10*time.Second)
		wantMembers(t, "first heartbeat", got, store.Member{Node: "node-b", Info: infoB, Expires: at(10 * time.Second)})

		// Members come back by node, each with its info and expiry.
		got = heartbeat(t, cs, "node-a", infoA, at(time.Second), 10*time.Second)
		wantMembers(t, "two members", got,
			store.Member{Node: "node-a", Info: infoA, Expires: at(11 * time.Second)},
			store.Member{Node: "node-b", Info: infoB, Expires: at(10 * time.Second)})

		// A heartbeat replaces the node's info and expiry.
		infoB2 := store.MemberInfo{Ready: false, Owned: 9, Admin: "http://b:8081"}
		got = heartbeat(t, cs, "node-b", infoB2, at(2*time.Second), 5*time.Second)
		wantMembers(t, "refreshed", got,
			store.Member{Node: "node-a", Info: infoA, Expires: at(11 * time.Second)},
			store.Member{Node: "node-b", Info: infoB2, Expires: at(7 * time.Second)})

		// A member whose expiry is not after Now is not live.
		got = heartbeat(t, cs, "node-a", infoA, at(7*time.Second), 10*time.Second)
		wantMembers(t, "node-b expired at Now", got,
			store.Member{Node: "node-a", Info: infoA, Expires: at(17 * time.Second)})

		// It is back with its next heartbeat.
		got = heartbeat(t, cs, "node-b", infoB, at(8*time.Second), 10*time.Second)
		wantMembers(t, "node-b back", got,
			store.Member{Node: "node-a", Info: infoA, Expires: at(17 * time.Second)},
			store.Member{Node: "node-b", Info: infoB, Expires: at(18 * time.Second)})
	})

	t.Run("MemberLeave", func(t *testing.T) {
		_, cs := clusterStore(t)
		heartbeat(t, cs, "node-a", store.MemberInfo{Ready: true}, base, time.Minute)
		heartbeat(t, cs, "node-b", store.MemberInfo{Ready: true}, base, time.Minute)
		if err := cs.MemberLeave(t.Context(), "node-a"); err != nil {
			t.Fatalf("MemberLeave: %v", err)
		}
		got := heartbeat(t, cs, "node-c", store.MemberInfo{}, at(time.Second), time.Minute)
		wantMembers(t, "after node-a left", got,
			store.Member{Node: "node-b", Info: store.MemberInfo{Ready: true}, Expires: at(time.Minute)},
			store.Member{Node: "node-c", Expires: at(61 * time.Second)})
		// Leaving twice (a retried graceful leave) is not an error.
		if err := cs.MemberLeave(t.Context(), "node-a"); err != nil {
			t.Errorf("MemberLeave of a node without a row: %v", err)
		}
	})

	t.Run("LeaseAcquireNew", func(t *testing.T) {
		_, cs := clusterStore(t)
		got := acquire(t, cs, "node-a", base, 10*time.Second, "p2", "p1")
		wantLeases(t, "new leases", got,
			store.Lease{Name: "p1", Holder: "node-a", Epoch: 1, Expires: at(10 * time.Second)},
			store.Lease{Name: "p2", Holder: "node-a", Epoch: 1, Expires: at(10 * time.Second)})
		wantLeases(t, "LeaseList", leaseList(t, cs), got...)
		// A name given twice is one lease.
		got = acquire(t, cs, "node-b", base, 10*time.Second, "p3", "p3")
		wantLeases(t, "a name given twice", got, store.Lease{Name: "p3", Holder: "node-b", Epoch: 1, Expires: at(10 * time.Second)})
	})

	t.Run("LeaseRenewKeepsEpoch", func(t *testing.T) {
		_, cs := clusterStore(t)
		acquire(t, cs, "node-a", base, 10*time.Second, "p1")
		got := acquire(t, cs, "node-a", at(5*time.Second), 10*time.Second, "p1")
		wantLeases(t, "renewed", got, store.Lease{Name: "p1", Holder: "node-a", Epoch: 1, Expires: at(15 * time.Second)})
		// Its own lease, even once expired, is renewed, not taken: nobody
		// else held it in between, so the epoch need not move.
		got = acquire(t, cs, "node-a", at(time.Minute), 10*time.Second, "p1")
		wantLeases(t, "renewed after expiry", got, store.Lease{Name: "p1", Holder: "node-a", Epoch: 1, Expires: at(70 * time.Second)})
	})

	t.Run("LeaseTakenOnlyOnceExpired", func(t *testing.T) {
		_, cs := clusterStore(t)
		acquire(t, cs, "node-a", base, 10*time.Second, "p1")
		// Held until 10s: node-b gets nothing just before.
		got := acquire(t, cs, "node-b", at(10*time.Second-time.Millisecond), 10*time.Second, "p1")
		wantLeases(t, "node-b before expiry", got)
		wantLeases(t, "LeaseList while held", leaseList(t, cs), store.Lease{Name: "p1", Holder: "node-a", Epoch: 1, Expires: at(10 * time.Second)})
		// At the expiry it is free: taken, under the next epoch.
		got = acquire(t, cs, "node-b", at(10*time.Second), 10*time.Second, "p1")
		wantLeases(t, "node-b at expiry", got, store.Lease{Name: "p1", Holder: "node-b", Epoch: 2, Expires: at(20 * time.Second)})
		// The old holder no longer holds it.
		got = acquire(t, cs, "node-a", at(11*time.Second), 10*time.Second, "p1")
		wantLeases(t, "node-a after the take", got)
		wantLeases(t, "LeaseList after the take", leaseList(t, cs), store.Lease{Name: "p1", Holder: "node-b", Epoch: 2, Expires: at(20 * time.Second)})
	})

	t.Run("LeaseAcquireSome", func(t *testing.T) {
		_, cs := clusterStore(t)
		acquire(t, cs, "node-b", base, 10*time.Second, "p1")
		acquire(t, cs, "node-a", base, 10*time.Second, "p2")
		// One call: p1 is node-b's (left), p2 renewed, p3 new.
		got := acquire(t, cs, "node-a", at(time.Second), 10*time.Second, "p1", "p2", "p3")
		wantLeases(t, "held afterwards", got,
			store.Lease{Name: "p2", Holder: "node-a", Epoch: 1, Expires: at(11 * time.Second)},
			store.Lease{Name: "p3", Holder: "node-a", Epoch: 1, Expires: at(11 * time.Second)})
		wantLeases(t, "LeaseList", leaseList(t, cs),
			store.Lease{Name: "p1", Holder: "node-b", Epoch: 1, Expires: at(10 * time.Second)},
			store.Lease{Name: "p2", Holder: "node-a", Epoch: 1, Expires: at(11 * time.Second)},
			store.Lease{Name: "p3", Holder: "node-a", Epoch: 1, Expires: at(11 * time.Second)})
	})

	t.Run("LeaseRelease", func(t *testing.T) {
		_, cs := clusterStore(t)
		acquire(t, cs, "node-a", base, 10*time.Second, "p1", "p2")
		acquire(t, cs, "node-b", base, 10*time.Second, "p3")
		// node-a gives p1 up; p3, node-b's, is untouched though named.
		release(t, cs, "node-a", "p1", "p3")
		wantLeases(t, "LeaseList after the release", leaseList(t, cs),
			store.Lease{Name: "p1", Holder: "", Epoch: 1},
			store.Lease{Name: "p2", Holder: "node-a", Epoch: 1, Expires: at(10 * time.Second)},
			store.Lease{Name: "p3", Holder: "node-b", Epoch: 1, Expires: at(10 * time.Second)})
		// Released, p1 is free before its old expiry, and taking it moves
		// the epoch on, even for the node that released it.
		got := acquire(t, cs, "node-a", at(time.Second), 10*time.Second, "p1")
		wantLeases(t, "p1 taken back", got, store.Lease{Name: "p1", Holder: "node-a", Epoch: 2, Expires: at(11 * time.Second)})
		release(t, cs, "node-a", "p1")
		got = acquire(t, cs, "node-b", at(2*time.Second), 10*time.Second, "p1")
		wantLeases(t, "p1 handed over", got, store.Lease{Name: "p1", Holder: "node-b", Epoch: 3, Expires: at(12 * time.Second)})
		// Releasing what one does not hold changes nothing.
		release(t, cs, "node-a", "p1", "p3", "never-taken")
		wantLeases(t, "LeaseList after a release of others' leases", leaseList(t, cs),
			store.Lease{Name: "p1", Holder: "node-b", Epoch: 3, Expires: at(12 * time.Second)},
			store.Lease{Name: "p2", Holder: "node-a", Epoch: 1, Expires: at(10 * time.Second)},
			store.Lease{Name: "p3", Holder: "node-b", Epoch: 1, Expires: at(10 * time.Second)})
	})

	for _, w := range fencedWrites() {
		t.Run("Fence"+w.name, func(t *testing.T) {
			s, cs := clusterStore(t)
			const lease = "ns:" + nsA
			w.setup(t, s)
			i := 0
			// Writes run at now: every job of the case is due by then.
			now := at(2 * time.Second)
			// lands checks that write i with f lands.
			lands := func(what string, f store.Fence) {
				t.Helper()
				if err := w.write(t.Context(), s, i, &f, now); err != nil {
					t.Fatalf("%s: %s with fence %+v: %v", what, w.name, f, err)
				}
				if !w.landed(t, s, i) {
					t.Errorf("%s: %s with fence %+v returned no error but is not stored", what, w.name, f)
				}
				i++
			}
			// refused checks that write i with f is ErrFenced and writes
			// nothing.
			refused := func(what string, f store.Fence) {
				t.Helper()
				before := snapshot(t, s, nil) + w.state(t, s)
				err := w.write(t.Context(), s, i, &f, now)
				if !errors.Is(err, store.ErrFenced) {
					t.Errorf("%s: %s with fence %+v: error %v, want ErrFenced", what, w.name, f, err)
				}
				if after := snapshot(t, s, nil) + w.state(t, s); after != before {
					t.Errorf("%s: a refused %s changed the store:\n%s", what, w.name, lineDiff(before, after))
				}
				if w.landed(t, s, i) {
					t.Errorf("%s: a refused %s is stored", what, w.name)
				}
				i++
			}

			acquire(t, cs, "node-a", base, 10*time.Second, lease)
			lands("the holder at its epoch", store.Fence{Lease: lease, Holder: "node-a", Epoch: 1})
			refused("a lease never taken", store.Fence{Lease: "ns:" + nsB, Holder: "node-a", Epoch: 1})
			refused("another holder at the epoch", store.Fence{Lease: lease, Holder: "node-b", Epoch: 1})
			refused("the holder at another epoch", store.Fence{Lease: lease, Holder: "node-a", Epoch: 2})

			release(t, cs, "node-a", lease)
			refused("a released lease", store.Fence{Lease: lease, Holder: "node-a", Epoch: 1})
			refused("a released lease, holder empty", store.Fence{Lease: lease, Holder: "", Epoch: 1})

			// node-a takes it back: its fence of epoch 1 is stale now.
			acquire(t, cs, "node-a", at(time.Second), 10*time.Second, lease)
			refused("the holder's previous epoch", store.Fence{Lease: lease, Holder: "node-a", Epoch: 1})
			lands("the holder's new epoch", store.Fence{Lease: lease, Holder: "node-a", Epoch: 2})

			// It expires and node-b takes it: node-a's fence is stale, even
			// though node-a does not know yet.
			acquire(t, cs, "node-b", at(time.Minute), 10*time.Second, lease)
			refused("the old holder after a take", store.Fence{Lease: lease, Holder: "node-a", Epoch: 2})
			lands("the new holder", store.Fence{Lease: lease, Holder: "node-b", Epoch: 3})

			// The fence does not look at the expiry: node-b's lease ran out
			// at 70s, but nobody took it, so node-b still writes at 2m. The
			// epoch, not the clock, tells a stale owner.
			now = at(2 * time.Minute)
			lands("the holder past its expiry, not taken", store.Fence{Lease: lease, Holder: "node-b", Epoch: 3})
		})
	}

	// A claim asks Allow in the middle of its write: a take made then
	// either waits for the claim to land (the lease is locked by the
	// write, as in PostgreSQL) or, if it returns first, the claim is
	// refused (the fence is checked again at the write, as in Redis). A
	// take that returns while the claim is in flight, followed by the
	// claim landing, is a stale owner's write after the hand-over.
	t.Run("FenceTakeDuringAClaim", func(t *testing.T) {
		s, cs := clusterStore(t)
		const lease = "ns:" + nsA
		acquire(t, cs, "node-a", base, 10*time.Second, lease)
		mustEnqueue(t, s, nsA, base, newJob("a"))
		var (
			takeDone   = make(chan []store.Lease, 1)
			takeErr    error
			tookDuring bool
			asked      int
		)
		got, err := s.JobClaimMany(t.Context(), store.JobClaimManyParams{Namespace: nsA, Now: base,
			Fence:  &store.Fence{Lease: lease, Holder: "node-a", Epoch: 1},
			Claims: []store.ClaimSpec{{Queues: []string{"q"}, Max: 1, LeaseUntil: at(time.Minute), Worker: "w"}},
			Allow: func(queue, task string) store.ClaimVerdict {
				if asked++; asked == 1 {
					go func() {
						ls, err := cs.LeaseAcquire(t.Context(), store.LeaseAcquireParams{Holder: "node-b", Names: []string{lease},
							Now: at(time.Minute), TTL: 10 * time.Second})
						takeErr = err
						takeDone <- ls
					}()
					select {
					case ls := <-takeDone:
						tookDuring = true
						takeDone <- ls
					case <-time.After(300 * time.Millisecond):
					}
				}
				return store.ClaimTake
			}})
		var taken []store.Lease
		select {
		case taken = <-takeDone:
		case <-time.After(30 * time.Second):
			t.Fatal("the take did not return")
		}
		if takeErr != nil {
			t.Fatalf("LeaseAcquire: %v", takeErr)
		}
		wantLeases(t, "the take", taken, store.Lease{Name: lease, Holder: "node-b", Epoch: 2, Expires: at(70 * time.Second)})
		switch {
		case err == nil && tookDuring:
			t.Errorf("the take returned while the claim was in flight, and the claim still landed: %v", ids(got[0]))
		case err == nil:
			wantIDs(t, "the claim", got[0], "a")
			if j := getJob(t, s, nsA, "a"); j.Status != api.StatusRunning {
				t.Errorf("claimed job is %s, want running", j.Status)
			}
		case errors.Is(err, store.ErrFenced):
			if j := getJob(t, s, nsA, "a"); j.Status != api.StatusPending || j.Attempt != 0 {
				t.Errorf("a refused claim left job a %s at attempt %d, want pending at 0", j.Status, j.Attempt)
			}
		default:
			t.Fatalf("JobClaimMany: %v", err)
		}
		t.Logf("take returned during the claim: %t; claim error: %v", tookDuring, err)
	})

	t.Run("FenceRacesATake", func(t *testing.T) {
		s, cs := clusterStore(t)
		const lease = "ns:" + nsA
		acquire(t, cs, "node-a", base, 10*time.Second, lease)
		stale := &store.Fence{Lease: lease, Holder: "node-a", Epoch: 1}

		type attempt struct {
			id        string
			afterTake bool // started once the take had returned
			err       error
		}
		var (
			taken     atomic.Bool
			successes atomic.Int64
			attempts  []attempt
			done      = make(chan struct{})
			stop      atomic.Bool
		)
		go func() {
			defer close(done)
			fencedAfter := 0
			for i := 0; i < 100000 && !stop.Load(); i++ {
				a := attempt{id: fmt.Sprintf("race-%05d", i), afterTake: taken.Load()}
				_, a.err = s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: nsA, Now: base, Fence: stale,
					Calls: []store.EnqueueCall{{Jobs: []store.NewJob{newJob(a.id)}}}})
				attempts = append(attempts, a)
				if a.err == nil {
					successes.Add(1)
				}
				if a.afterTake {
					if fencedAfter++; fencedAfter >= 20 {
						return
					}
				}
			}
		}()
		deadline := time.Now().Add(30 * time.Second)
		for successes.Load() < 20 && time.Now().Before(deadline) {
			select {
			case <-done:
				t.Fatalf("the writer stopped before 20 writes landed: %v", attempts)
			case <-time.After(time.Millisecond):
			}
		}
		if successes.Load() < 20 {
			stop.Store(true)
			<-done
			t.Fatalf("only %d fenced writes landed in 30s", successes.Load())
		}
		// node-b takes the expired lease while node-a goes on writing.
		got := acquire(t, cs, "node-b", at(time.Minute), 10*time.Second, lease)
		taken.Store(true)
		wantLeases(t, "the take", got, store.Lease{Name: lease, Holder: "node-b", Epoch: 2, Expires: at(70 * time.Second)})
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			stop.Store(true)
			<-done
			t.Fatal("the writer did not finish")
		}

		var landed []string
		afterTake := 0
		for _, a := range attempts {
			switch {
			case a.err == nil:
				landed = append(landed, a.id)
				if a.afterTake {
					t.Errorf("write %s started after the take returned and landed under the stale epoch", a.id)
				}
			case errors.Is(a.err, store.ErrFenced):
			default:
				t.Errorf("write %s: %v, want nil or ErrFenced", a.id, a.err)
			}
			if a.afterTake {
				afterTake++
			}
		}
		if afterTake == 0 {
			t.Fatal("no write started after the take")
		}
		// What landed is exactly what was acknowledged: no refused write
		// left anything behind.
		stored := ids(listAll(t, s, nsA))
		slices.Sort(stored)
		if !slices.Equal(stored, landed) {
			t.Errorf("stored %d jobs, %d writes acknowledged; stored %v, acknowledged %v", len(stored), len(landed), stored, landed)
		}
		t.Logf("%d writes: %d landed, %d started after the take", len(attempts), len(landed), afterTake)
	})
}

// fencedWrite is one of the three job writes a Fence guards, made
// repeatable: write i touches only its own job, and landed(i) tells
// whether it is stored.
type fencedWrite struct {
	name   string
	setup  func(t *testing.T, s store.Store)
	write  func(ctx context.Context, s store.Store, i int, f *store.Fence, now time.Time) error
	landed func(t *testing.T, s store.Store, i int) bool
	// state renders what snapshot does not show and the write may change.
	state func(t *testing.T, s store.Store) string
}

// fencedWriteJobs bounds the writes of one fenced-write case.
const fencedWriteJobs = 16

func fencedWrites() []fencedWrite {
	noState := func(*testing.T, store.Store) string { return "" }
	qOf := func(i int) string { return fmt.Sprintf("q%02d", i) }
	idOf := func(i int) string { return fmt.Sprintf("j%02d", i) }
	return []fencedWrite{
		{
			name:  "JobEnqueueMany",
			setup: func(*testing.T, store.Store) {},
			write: func(ctx context.Context, s store.Store, i int, f *store.Fence, now time.Time) error {
				_, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: nsA, Now: now, Fence: f,
					Calls: []store.EnqueueCall{{Jobs: []store.NewJob{newJob(idOf(i))}}}})
				return err
			},
			landed: func(t *testing.T, s store.Store, i int) bool {
				_, err := s.JobGet(t.Context(), nsA, idOf(i))
				return err == nil
			},
			state: noState,
		},
		{
			// Each job is scheduled in its own queue and due by the claim:
			// a claim first makes it available, which a refused claim must
			// not do either (JobNextRunAt still reports it).
			name: "JobClaimMany",
			setup: func(t *testing.T, s store.Store) {
				for i := range fencedWriteJobs {
					mustEnqueue(t, s, nsA, base, with(newJob(idOf(i)), func(j *store.NewJob) {
						j.Queue = qOf(i)
						j.RunAt = at(time.Second)
					}))
				}
			},
			write: func(ctx context.Context, s store.Store, i int, f *store.Fence, now time.Time) error {
				_, err := s.JobClaimMany(ctx, store.JobClaimManyParams{Namespace: nsA, Now: now, Fence: f,
					Claims: []store.ClaimSpec{{Queues: []string{qOf(i)}, Max: 1, LeaseUntil: now.Add(time.Minute), Worker: "w"}}})
				return err
			},
			landed: func(t *testing.T, s store.Store, i int) bool {
				return getJob(t, s, nsA, idOf(i)).Status == api.StatusRunning
			},
			state: func(t *testing.T, s store.Store) string {
				var b strings.Builder
				for i := range fencedWriteJobs {
					next, ok, err := s.JobNextRunAt(t.Context(), nsA, []string{qOf(i)})
					if err != nil {
						t.Fatalf("JobNextRunAt: %v", err)
					}
					fmt.Fprintf(&b, "next %s %t %s\n", qOf(i), ok, canonTime(next))
				}
				return b.String()
			},
		},
		{
			name: "JobUpdateMany",
			setup: func(t *testing.T, s store.Store) {
				for i := range fencedWriteJobs {
					runJob(t, s, nsA, base, with(newJob(idOf(i)), func(j *store.NewJob) { j.Queue = qOf(i) }))
				}
			},
			write: func(ctx context.Context, s store.Store, i int, f *store.Fence, now time.Time) error {
				_, err := s.JobUpdateMany(ctx, store.JobUpdateManyParams{Namespace: nsA, Now: now, Fence: f,
					Updates: []store.JobUpdate{{ID: idOf(i), Attempt: 1, Kind: store.UpdateComplete, Result: []byte(`"ok"`)}}})
				return err
			},
			landed: func(t *testing.T, s store.Store, i int) bool {
				return getJob(t, s, nsA, idOf(i)).Status == api.StatusCompleted
			},
			state: noState,
		},
	}
}

func heartbeat(t testing.TB, cs store.ClusterStore, node string, info store.MemberInfo, now time.Time, ttl time.Duration) []store.Member {
	t.Helper()
	ms, err := cs.MemberHeartbeat(t.Context(), store.MemberHeartbeatParams{Node: node, Info: info, Now: now, TTL: ttl})
	if err != nil {
		t.Fatalf("MemberHeartbeat(%s): %v", node, err)
	}
	return ms
}

func wantMembers(t testing.TB, what string, got []store.Member, want ...store.Member) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].Node == want[i].Node && got[i].Info == want[i].Info && sameTime(got[i].Expires, want[i].Expires)
	}
	if !ok {
		t.Errorf("%s: members\n\t%s\nwant (by node)\n\t%s", what, fmtMembers(got), fmtMembers(want))
	}
}

func fmtMembers(ms []store.Member) string {
	if len(ms) == 0 {
		return "none"
	}
	var b []string
	for _, m := range ms {
		b = append(b, fmt.Sprintf("%s %+v until %s", m.Node, m.Info, fmtTime(m.Expires)))
	}
	return strings.Join(b, "\n\t")
}

func acquire(t testing.TB, cs store.ClusterStore, holder string, now time.Time, ttl time.Duration, names ...string) []store.Lease {
	t.Helper()
	ls, err := cs.LeaseAcquire(t.Context(), store.LeaseAcquireParams{Holder: holder, Names: names, Now: now, TTL: ttl})
	if err != nil {
		t.Fatalf("LeaseAcquire(%s, %v): %v", holder, names, err)
	}
	return ls
}

func release(t testing.TB, cs store.ClusterStore, holder string, names ...string) {
	t.Helper()
	if err := cs.LeaseRelease(t.Context(), store.LeaseReleaseParams{Holder: holder, Names: names}); err != nil {
		t.Fatalf("LeaseRelease(%s, %v): %v", holder, names, err)
	}
}

func leaseList(t testing.TB, cs store.ClusterStore) []store.Lease {
	t.Helper()
	ls, err := cs.LeaseList(t.Context())
	if err != nil {
		t.Fatalf("LeaseList: %v", err)
	}
	return ls
}

// wantLeases compares leases as a set (the order is not part of the
// contract); want is by name.
func wantLeases(t testing.TB, what string, got []store.Lease, want ...store.Lease) {
	t.Helper()
	g := slices.Clone(got)
	slices.SortFunc(g, func(a, b store.Lease) int { return strings.Compare(a.Name, b.Name) })
	ok := len(g) == len(want)
	for i := 0; ok && i < len(g); i++ {
		ok = g[i].Name == want[i].Name && g[i].Holder == want[i].Holder && g[i].Epoch == want[i].Epoch &&
			sameTime(g[i].Expires, want[i].Expires)
	}
	if !ok {
		t.Errorf("%s: leases\n\t%s\nwant\n\t%s", what, fmtLeases(g), fmtLeases(want))
	}
}

func fmtLeases(ls []store.Lease) string {
	if len(ls) == 0 {
		return "none"
	}
	var b []string
	for _, l := range ls {
		b = append(b, fmt.Sprintf("%s holder=%q epoch=%d expires=%s", l.Name, l.Holder, l.Epoch, fmtTime(l.Expires)))
	}
	return strings.Join(b, "\n\t")
}
