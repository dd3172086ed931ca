// Package storetest is the conformance suite every store backend runs: a
// behaviour of store.Store is specified once, here, and checked against
// each backend, in the manner of riverqueue/river's riverdrivertest.
//
// A backend's test calls Exercise once with a Factory:
//
//	func TestStore(t *testing.T) {
//		storetest.Exercise(t, func(t testing.TB, f store.Faults) store.Store {
//			return openTestStore(t, f)
//		})
//	}
//
// A backend that implements store.ClusterStore (a store several nodes
// share) also runs the cluster cases: membership, leases with epochs, and
// job writes refused with store.ErrFenced under a stale Fence; one that
// does not skips them, and must ignore a Fence instead.
//
// Every subtest asks the factory for a fresh, empty store. Times are fixed
// (the suite never reads the clock) and compared at microsecond precision,
// the least a backend must keep.
package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexiq/flexiq/admission"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// Factory returns a fresh, empty store for one test; faults may be nil.
// The factory registers the store's Close with t.Cleanup.
type Factory func(t testing.TB, faults store.Faults) store.Store

// Exercise runs the conformance suite against the backend newStore makes.
func Exercise(t *testing.T, newStore Factory) {
	t.Helper()
	t.Run("Ping", func(t *testing.T) {
		s := newStore(t, nil)
		if err := s.Ping(t.Context()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
	t.Run("JobEnqueueMany", func(t *testing.T) { exerciseEnqueue(t, newStore) })
	t.Run("JobEnqueueManyShed", func(t *testing.T) { exerciseShed(t, newStore) })
	t.Run("JobEnqueueManyReplay", func(t *testing.T) { exerciseReplay(t, newStore) })
	t.Run("JobClaimMany", func(t *testing.T) { exerciseClaim(t, newStore) })
	t.Run("JobUpdateMany", func(t *testing.T) { exerciseUpdate(t, newStore) })
	t.Run("JobRead", func(t *testing.T) { exerciseRead(t, newStore) })
	t.Run("JobNextRunAt", func(t *testing.T) { exerciseNextRunAt(t, newStore) })
	t.Run("JobTimes", func(t *testing.T) { exerciseTimes(t, newStore) })
	t.Run("JobDelete", func(t *testing.T) { exerciseDelete(t, newStore) })
	t.Run("Setting", func(t *testing.T) { exerciseSetting(t, newStore) })
	t.Run("Token", func(t *testing.T) { exerciseToken(t, newStore) })
	t.Run("Config", func(t *testing.T) { exerciseConfig(t, newStore) })
	t.Run("Atomicity", func(t *testing.T) { exerciseAtomicity(t, newStore) })
	t.Run("Cluster", func(t *testing.T) { exerciseCluster(t, newStore) })
}

// base is the suite's fixed "now"; at(d) is base shifted by d. Times are
// whole milliseconds, so a backend keeping microseconds stores them exactly
// and comparisons such as run_at <= now are never blurred by rounding.
var base = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

// Namespaces used throughout. nsB exists to prove isolation.
const (
	nsA = "acme"
	nsB = "globex"
)

// shedError is the error of a shed call, as the namespace actor builds it.
var shedError = admission.ShedError(admission.DepthError("q", 3, 3))

// newJob is a plain due job in queue "q", task "t", with a client id.
func newJob(id string) store.NewJob {
	return store.NewJob{
		ID:      id,
		Queue:   "q",
		Task:    "t",
		Payload: []byte(`{"id":"` + id + `"}`),
		RunAt:   at(-time.Minute),
	}
}

// with returns j changed by fn, so tests read as newJob("a") plus a tweak.
func with(j store.NewJob, fn func(*store.NewJob)) store.NewJob {
	fn(&j)
	return j
}

// enqueue runs one JobEnqueueMany and checks the result's shape.
func enqueue(t testing.TB, s store.Store, ns string, now time.Time, calls ...store.EnqueueCall) [][]api.EnqueueResult {
	t.Helper()
	res, err := s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: ns, Now: now, Calls: calls})
	if err != nil {
		t.Fatalf("JobEnqueueMany: %v", err)
	}
	if len(res) != len(calls) {
		t.Fatalf("JobEnqueueMany: %d result lists for %d calls", len(res), len(calls))
	}
	for i, c := range calls {
		n := len(c.Jobs) + len(c.ReplayIDs)
		if len(res[i]) != n {
			t.Fatalf("JobEnqueueMany: call %d has %d results for %d jobs/replays: %v", i, len(res[i]), n, res[i])
		}
	}
	return res
}

// enqueueOne enqueues one admitted job in its own call and returns its result.
func enqueueOne(t testing.TB, s store.Store, ns string, now time.Time, j store.NewJob) api.EnqueueResult {
	t.Helper()
	return enqueue(t, s, ns, now, store.EnqueueCall{Jobs: []store.NewJob{j}})[0][0]
}

// mustEnqueue enqueues admitted jobs (one call) and fails unless every one
// comes back enqueued under its own id.
func mustEnqueue(t testing.TB, s store.Store, ns string, now time.Time, jobs ...store.NewJob) {
	t.Helper()
	res := enqueue(t, s, ns, now, store.EnqueueCall{Jobs: jobs})[0]
	for i, r := range res {
		wantResult(t, fmt.Sprintf("setup enqueue %s", jobs[i].ID), r, jobs[i].ID, api.OutcomeEnqueued)
	}
}

// replay replays ids in one call and returns the results.
func replay(t testing.TB, s store.Store, ns string, now time.Time, call store.EnqueueCall) []api.EnqueueResult {
	t.Helper()
	return enqueue(t, s, ns, now, call)[0]
}

func wantResult(t testing.TB, what string, got api.EnqueueResult, id string, outcome api.Outcome) {
	t.Helper()
	if got.ID != id || got.Outcome != outcome {
		t.Errorf("%s: result %+v, want {ID:%s Outcome:%s}", what, got, id, outcome)
	}
}

func getJob(t testing.TB, s store.Store, ns, id string) store.Job {
	t.Helper()
	j, err := s.JobGet(t.Context(), ns, id)
	if err != nil {
		t.Fatalf("JobGet(%q, %q): %v", ns, id, err)
	}
	return j
}

func wantNoJob(t testing.TB, s store.Store, ns, id string) {
	t.Helper()
	j, err := s.JobGet(t.Context(), ns, id)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("JobGet(%q, %q) = %+v, %v; want ErrNotFound", ns, id, j, err)
	}
}

func claim(t testing.TB, s store.Store, p store.JobClaimManyParams) [][]store.Job {
	t.Helper()
	res, err := s.JobClaimMany(t.Context(), p)
	if err != nil {
		t.Fatalf("JobClaimMany: %v", err)
	}
	if len(res) != len(p.Claims) {
		t.Fatalf("JobClaimMany: %d job lists for %d claims", len(res), len(p.Claims))
	}
	for i, jobs := range res {
		if len(jobs) > p.Claims[i].Max {
			t.Errorf("JobClaimMany: claim %d got %d jobs, Max %d", i, len(jobs), p.Claims[i].Max)
		}
	}
	return res
}

// claimOnce is one claim of up to max jobs from queues at now.
func claimOnce(t testing.TB, s store.Store, ns string, now time.Time, max int, queues ...string) []store.Job {
	t.Helper()
	return claim(t, s, store.JobClaimManyParams{
		Namespace: ns,
		Now:       now,
		Claims:    []store.ClaimSpec{{Queues: queues, Max: max, LeaseUntil: now.Add(30 * time.Second), Worker: "w1"}},
	})[0]
}

func update(t testing.TB, s store.Store, ns string, now time.Time, ups ...store.JobUpdate) []bool {
	t.Helper()
	applied, err := s.JobUpdateMany(t.Context(), store.JobUpdateManyParams{Namespace: ns, Now: now, Updates: ups})
	if err != nil {
		t.Fatalf("JobUpdateMany: %v", err)
	}
	if len(applied) != len(ups) {
		t.Fatalf("JobUpdateMany: %d results for %d updates", len(applied), len(ups))
	}
	return applied
}

// runJob enqueues j (moving its run_at back to now if it is later) and
// claims it. The job's queue must hold no other due job that would go out
// first.
func runJob(t testing.TB, s store.Store, ns string, now time.Time, j store.NewJob) store.Job {
	t.Helper()
	if j.RunAt.After(now) {
		j.RunAt = now
	}
	mustEnqueue(t, s, ns, now, j)
	return claimJob(t, s, ns, now, j.ID, j.Queue)
}

// claimJob claims one job from queue and fails unless it is id.
func claimJob(t testing.TB, s store.Store, ns string, now time.Time, id, queue string) store.Job {
	t.Helper()
	got := claimOnce(t, s, ns, now, 1, queue)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("setup: claiming %s from queue %s got %v", id, queue, ids(got))
	}
	return got[0]
}

// completeJob enqueues, claims and acks j; it finishes at finished.
func completeJob(t testing.TB, s store.Store, ns string, finished time.Time, j store.NewJob) store.Job {
	t.Helper()
	r := runJob(t, s, ns, finished, j)
	applied := update(t, s, ns, finished, store.JobUpdate{ID: r.ID, Attempt: r.Attempt, Kind: store.UpdateComplete, Result: []byte(`"ok"`)})
	if !applied[0] {
		t.Fatalf("setup: completing %s not applied", j.ID)
	}
	return getJob(t, s, ns, j.ID)
}

// killJob enqueues, claims and fails j for good; it dies at died.
func killJob(t testing.TB, s store.Store, ns string, died time.Time, j store.NewJob, noRetry bool) store.Job {
	t.Helper()
	r := runJob(t, s, ns, died, j)
	return killRunning(t, s, ns, died, r, noRetry)
}

func killRunning(t testing.TB, s store.Store, ns string, died time.Time, r store.Job, noRetry bool) store.Job {
	t.Helper()
	applied := update(t, s, ns, died, store.JobUpdate{ID: r.ID, Attempt: r.Attempt, Kind: store.UpdateDead, Error: "boom", NoRetry: noRetry})
	if !applied[0] {
		t.Fatalf("setup: killing %s not applied", r.ID)
	}
	return getJob(t, s, ns, r.ID)
}

// shedJob writes j as a shed dead letter at now.
func shedJob(t testing.TB, s store.Store, ns string, now time.Time, j store.NewJob) store.Job {
	t.Helper()
	res := enqueue(t, s, ns, now, store.EnqueueCall{Jobs: []store.NewJob{j}, ShedError: shedError})[0]
	wantResult(t, "setup shed "+j.ID, res[0], j.ID, api.OutcomeShed)
	return getJob(t, s, ns, j.ID)
}

func counts(t testing.TB, s store.Store, ns string) store.Counts {
	t.Helper()
	c, err := s.JobCount(t.Context(), ns)
	if err != nil {
		t.Fatalf("JobCount(%q): %v", ns, err)
	}
	return c
}

func wantCounts(t testing.TB, s store.Store, ns string, want store.Counts) {
	t.Helper()
	if got := counts(t, s, ns); got != want {
		t.Errorf("JobCount(%q) = %+v, want %+v", ns, got, want)
	}
}

func list(t testing.TB, s store.Store, p store.JobListParams) []store.Job {
	t.Helper()
	jobs, err := s.JobList(t.Context(), p)
	if err != nil {
		t.Fatalf("JobList(%+v): %v", p, err)
	}
	return jobs
}

// listAll lists every job of ns, newest first, with a generous limit.
func listAll(t testing.TB, s store.Store, ns string) []store.Job {
	t.Helper()
	return list(t, s, store.JobListParams{Namespace: ns, Limit: 100000})
}

func ids(jobs []store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func wantIDs(t testing.TB, what string, got []store.Job, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if g := ids(got); !slices.Equal(g, want) {
		t.Errorf("%s: ids %q, want %q", what, g, want)
	}
}

// wantSameIDs compares ids as sets, for results whose order is not part of
// the contract.
func wantSameIDs(t testing.TB, what string, got []store.Job, want ...string) {
	t.Helper()
	g := ids(got)
	slices.Sort(g)
	w := slices.Clone(want)
	slices.Sort(w)
	if w == nil {
		w = []string{}
	}
	if !slices.Equal(g, w) {
		t.Errorf("%s: ids %q, want (any order) %q", what, g, w)
	}
}

// sameTime compares at microsecond precision; zero only equals zero.
func sameTime(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() == b.IsZero()
	}
	return a.Truncate(time.Microsecond).Equal(b.Truncate(time.Microsecond))
}

func wantTime(t testing.TB, what string, got, want time.Time) {
	t.Helper()
	if !sameTime(got, want) {
		t.Errorf("%s = %v, want %v", what, fmtTime(got), fmtTime(want))
	}
}

func fmtTime(x time.Time) string {
	if x.IsZero() {
		return "zero"
	}
	return x.UTC().Format(time.RFC3339Nano)
}

// sameJSON reports whether a and b hold equal JSON values; a backend may
// store JSON normalised (jsonb), so bytes need not match. Empty and nil are
// the same (absent); anything that is not JSON is compared byte for byte.
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

func wantJSON(t testing.TB, what string, got []byte, want string) {
	t.Helper()
	var w []byte
	if want != "" {
		w = []byte(want)
	}
	if !sameJSON(got, w) {
		t.Errorf("%s = %s, want %s", what, showBytes(got), showBytes(w))
	}
}

func showBytes(b []byte) string {
	if b == nil {
		return "nil"
	}
	return "`" + string(b) + "`"
}

// jobDiff lists the fields in which got differs from want.
func jobDiff(got, want store.Job) []string {
	var d []string
	str := func(name, g, w string) {
		if g != w {
			d = append(d, fmt.Sprintf("%s: %q, want %q", name, g, w))
		}
	}
	num := func(name string, g, w int64) {
		if g != w {
			d = append(d, fmt.Sprintf("%s: %d, want %d", name, g, w))
		}
	}
	tm := func(name string, g, w time.Time) {
		if !sameTime(g, w) {
			d = append(d, fmt.Sprintf("%s: %s, want %s", name, fmtTime(g), fmtTime(w)))
		}
	}
	js := func(name string, g, w []byte) {
		if !sameJSON(g, w) {
			d = append(d, fmt.Sprintf("%s: %s, want %s", name, showBytes(g), showBytes(w)))
		}
	}
	flag := func(name string, g, w bool) {
		if g != w {
			d = append(d, fmt.Sprintf("%s: %t, want %t", name, g, w))
		}
	}
	str("Namespace", got.Namespace, want.Namespace)
	str("ID", got.ID, want.ID)
	num("Seq", got.Seq, want.Seq)
	str("Queue", got.Queue, want.Queue)
	str("Task", got.Task, want.Task)
	js("Payload", got.Payload, want.Payload)
	num("Priority", got.Priority, want.Priority)
	tm("RunAt", got.RunAt, want.RunAt)
	num("MaxAttempts", got.MaxAttempts, want.MaxAttempts)
	num("Attempt", got.Attempt, want.Attempt)
	str("Status", string(got.Status), string(want.Status))
	str("UniqueKey", got.UniqueKey, want.UniqueKey)
	str("DebounceKey", got.DebounceKey, want.DebounceKey)
	tm("LeaseUntil", got.LeaseUntil, want.LeaseUntil)
	str("Worker", got.Worker, want.Worker)
	str("Error", got.Error, want.Error)
	js("Result", got.Result, want.Result)
	js("DeadMeta", got.DeadMeta, want.DeadMeta)
	tm("CreatedAt", got.CreatedAt, want.CreatedAt)
	tm("FinishedAt", got.FinishedAt, want.FinishedAt)
	flag("Shed", got.Shed, want.Shed)
	flag("NoRetry", got.NoRetry, want.NoRetry)
	num("DeadReplays", got.DeadReplays, want.DeadReplays)
	return d
}

// wantJob fails t where got differs from want.
func wantJob(t testing.TB, what string, got, want store.Job) {
	t.Helper()
	if d := jobDiff(got, want); len(d) > 0 {
		t.Errorf("%s differs:\n\t%s", what, strings.Join(d, "\n\t"))
	}
}

// wantUnchanged fails t unless the stored job still equals before.
func wantUnchanged(t testing.TB, s store.Store, before store.Job) {
	t.Helper()
	wantJob(t, "job "+before.ID+" (should be untouched)", getJob(t, s, before.Namespace, before.ID), before)
}

// pendingJob is what enqueuing j at now stores (Seq taken from got).
func pendingJob(ns string, j store.NewJob, now time.Time, seq int64) store.Job {
	return store.Job{
		Namespace:   ns,
		ID:          j.ID,
		Seq:         seq,
		Queue:       j.Queue,
		Task:        j.Task,
		Payload:     j.Payload,
		Priority:    j.Priority,
		RunAt:       j.RunAt,
		MaxAttempts: j.MaxAttempts,
		Status:      api.StatusPending,
		UniqueKey:   j.UniqueKey,
		DebounceKey: j.DebounceKey,
		CreatedAt:   now,
	}
}

func wantErrIs(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want %v", what, err, target)
	}
}

func i64(v int64) *int64 { return &v }

func boolPtr(v bool) *bool { return &v }

// faultInjector is a store.Faults that, while armed, fails the failAt-th
// call to Fault (counting from 0) and records every call.
type faultInjector struct {
	mu     sync.Mutex
	armed  bool
	failAt int
	calls  []string
	fired  bool
}

var errInjected = errors.New("storetest: injected fault")

func (f *faultInjector) Fault(op string, step int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.armed {
		return nil
	}
	n := len(f.calls)
	f.calls = append(f.calls, fmt.Sprintf("%s#%d", op, step))
	if n == f.failAt {
		f.fired = true
		return fmt.Errorf("%w at %s step %d", errInjected, op, step)
	}
	return nil
}

// arm starts counting and fails call failAt (-1: none).
func (f *faultInjector) arm(failAt int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.failAt, f.calls, f.fired = true, failAt, nil, false
}

// disarm stops counting and returns what was seen while armed.
func (f *faultInjector) disarm() (calls []string, fired bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
	return f.calls, f.fired
}
