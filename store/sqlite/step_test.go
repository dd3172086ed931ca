package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
)

// failAt fails the first time op reaches step n (the store's fault points).
type failAt struct {
	op    string
	n     int
	fired bool
}

var errInjected = errors.New("injected fault")

func (f *failAt) Fault(op string, step int) error {
	if !f.fired && op == f.op && step == f.n {
		f.fired = true
		return errInjected
	}
	return nil
}

func openStep(t *testing.T, faults store.Faults) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "flexiq.db"), sqlite.Options{Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func enqueueParams(now time.Time, ids ...string) store.JobEnqueueManyParams {
	jobs := make([]store.NewJob, len(ids))
	for i, id := range ids {
		jobs[i] = store.NewJob{ID: id, Queue: "q", Task: "t", RunAt: now}
	}
	return store.JobEnqueueManyParams{Namespace: "acme", Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}
}

func claimParams(now time.Time, max int) store.JobClaimManyParams {
	return store.JobClaimManyParams{Namespace: "acme", Now: now,
		Claims: []store.ClaimSpec{{Queues: []string{"q"}, Max: max, LeaseUntil: now.Add(time.Minute), Worker: "w"}}}
}

// A step's writes are one transaction: invisible outside until Commit,
// visible to the step's own reads, all durable after Commit.
func TestStepCommitsWritesAsOne(t *testing.T) {
	ctx := context.Background()
	s := openStep(t, nil)
	now := time.Unix(1000, 0)
	if _, err := s.JobEnqueueMany(ctx, enqueueParams(now, "a", "b")); err != nil {
		t.Fatal(err)
	}
	st := s.BeginStep(ctx)
	if _, err := st.JobEnqueueMany(ctx, enqueueParams(now, "c")); err != nil {
		t.Fatal(err)
	}
	claimed, err := st.JobClaimMany(ctx, claimParams(now, 1))
	if err != nil || len(claimed[0]) != 1 || claimed[0][0].ID != "a" {
		t.Fatalf("claim in step = %v, %v; want job a", claimed, err)
	}
	if _, err := st.JobUpdateMany(ctx, store.JobUpdateManyParams{Namespace: "acme", Now: now,
		Updates: []store.JobUpdate{{ID: "a", Attempt: 1, Kind: store.UpdateComplete}}}); err != nil {
		t.Fatal(err)
	}
	// The step sees its own writes.
	if c, err := st.JobCount(ctx, "acme"); err != nil || c != (store.Counts{Pending: 2, Completed: 1}) {
		t.Errorf("JobCount inside the step = %+v, %v; want 2 pending, 1 completed", c, err)
	}
	if j, err := st.JobGet(ctx, "acme", "c"); err != nil || j.ID != "c" {
		t.Errorf("JobGet c inside the step = %v; want the job", err)
	}
	// Nothing is visible outside before the commit.
	if c, err := s.JobCount(ctx, "acme"); err != nil || c != (store.Counts{Pending: 2}) {
		t.Errorf("JobCount outside before commit = %+v, %v; want 2 pending", c, err)
	}
	if err := st.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := s.JobCount(ctx, "acme"); err != nil || c != (store.Counts{Pending: 2, Completed: 1}) {
		t.Errorf("JobCount after commit = %+v, %v; want 2 pending, 1 completed", c, err)
	}
	// The write lock is free again.
	if _, err := s.JobEnqueueMany(ctx, enqueueParams(now, "d")); err != nil {
		t.Fatalf("write after the step: %v", err)
	}
}

// A call that fails undoes the whole step, earlier calls included, and
// every later call and the commit fail with it.
func TestStepFailureUndoesTheWholeStep(t *testing.T) {
	for _, op := range []string{"JobClaimMany", "Commit"} {
		t.Run(op, func(t *testing.T) {
			ctx := context.Background()
			f := &failAt{op: op, n: 1}
			s := openStep(t, f)
			now := time.Unix(1000, 0)
			if _, err := s.JobEnqueueMany(ctx, enqueueParams(now, "a")); err != nil {
				t.Fatal(err)
			}
			st := s.BeginStep(ctx)
			if _, err := st.JobEnqueueMany(ctx, enqueueParams(now, "b")); err != nil {
				t.Fatal(err)
			}
			_, claimErr := st.JobClaimMany(ctx, claimParams(now, 2))
			if op == "JobClaimMany" {
				if !errors.Is(claimErr, errInjected) {
					t.Fatalf("claim error = %v, want the injected fault", claimErr)
				}
				if _, err := st.JobGet(ctx, "acme", "a"); !errors.Is(err, errInjected) {
					t.Errorf("read after the failure = %v, want the same error", err)
				}
			} else if claimErr != nil {
				t.Fatal(claimErr)
			}
			if err := st.Commit(ctx); !errors.Is(err, errInjected) {
				t.Fatalf("Commit = %v, want the injected fault", err)
			}
			if !f.fired {
				t.Fatal("fault never fired")
			}
			if c, err := s.JobCount(ctx, "acme"); err != nil || c != (store.Counts{Pending: 1}) {
				t.Errorf("JobCount after the failed step = %+v, %v; want job a alone, pending", c, err)
			}
			if _, err := s.JobGet(ctx, "acme", "b"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("job b of the failed step: %v, want not found", err)
			}
			// The write lock is free again.
			if _, err := s.JobEnqueueMany(ctx, enqueueParams(now, "c")); err != nil {
				t.Fatalf("write after the failed step: %v", err)
			}
		})
	}
}

// A step that only reads takes no write lock, and a rollback after a
// commit does nothing.
func TestStepWithoutWrites(t *testing.T) {
	ctx := context.Background()
	s := openStep(t, nil)
	now := time.Unix(1000, 0)
	st := s.BeginStep(ctx)
	if _, err := st.JobCount(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	// Were the write lock held, this write would wait for the step.
	wrote := make(chan error, 1)
	go func() {
		_, err := s.JobEnqueueMany(ctx, enqueueParams(now, "a"))
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		st.Rollback() // let the write through so the test can end
		<-wrote
		t.Fatal("a write outside the step waited for a step that only read")
	}
	if j, err := st.JobGet(ctx, "acme", "a"); err != nil || j.ID != "a" {
		t.Errorf("JobGet in a read-only step = %v; want the committed job", err)
	}
	if err := st.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st.Rollback()
	if _, err := st.JobGet(ctx, "acme", "a"); err == nil {
		t.Error("JobGet after the step ended: no error")
	}
}

// The checkpointer copies the WAL into the database file in the
// background, long before the writer's own automatic checkpoint would.
func TestCheckpointerCopiesTheWALInTheBackground(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flexiq.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		_ = s.Close() // a second Close must not panic (it reports the connections closed)
	}()
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	now := time.Unix(1000, 0)
	for i := 0; i < 20; i++ {
		ids := make([]string, 100)
		for k := range ids {
			ids[k] = fmt.Sprintf("job-%d-%d", i, k)
		}
		if _, err := s.JobEnqueueMany(ctx, enqueueParams(now, ids...)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for size() <= before {
		if time.Now().After(deadline) {
			t.Fatalf("database file still %d bytes 10 s after 2000 jobs were written: nothing checkpointed", size())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
