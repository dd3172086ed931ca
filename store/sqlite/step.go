package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// txRunner runs fn as (part of) a write transaction: Store.tx opens and
// commits its own, Step.tx joins the step's.
type txRunner func(ctx context.Context, op string, fn func(tx *wtx, step func() error) error) error

// querier reads: the read pool, a read transaction, or the write
// connection inside a step.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Step is one write transaction over the calls of a namespace actor's
// step, so a step costs one commit however many kinds of writes it holds.
// It begins at the first write; reads before that go to the read pool
// (they see what the transaction would), reads after it go through the
// transaction so they see its writes. A failed call rolls everything back
// and every later call fails with the same error. A Step is used by one
// goroutine.
type Step struct {
	s     *Store
	ctx   context.Context
	began bool
	err   error
}

// BeginStep starts a step. Nothing is locked until its first write.
func (s *Store) BeginStep(ctx context.Context) store.StepTx {
	return &Step{s: s, ctx: ctx}
}

var errStepDone = errors.New("sqlite: step already ended")

func (st *Step) tx(ctx context.Context, op string, fn func(tx *wtx, step func() error) error) error {
	if st.err != nil {
		return st.err
	}
	s := st.s
	if !st.began {
		s.wmu.Lock()
		if _, err := s.exec(ctx, "BEGIN IMMEDIATE"); err != nil {
			s.wmu.Unlock()
			st.err = fmt.Errorf("sqlite: %s: begin: %w", op, err)
			return st.err
		}
		st.began = true
	}
	n := 0
	step := func() error {
		if s.faults == nil {
			return nil
		}
		n++
		return s.faults.Fault(op, n)
	}
	err := fn(&wtx{s: s, ctx: ctx}, step)
	if err == nil {
		err = step()
	}
	if err != nil {
		st.Rollback()
		if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
			err = fmt.Errorf("sqlite: %s: %w", op, err)
		}
		st.err = err
		return err
	}
	return nil
}

// reader is where the step reads: through the transaction once it began.
func (st *Step) reader() querier {
	if st.began {
		return &wtx{s: st.s, ctx: st.ctx}
	}
	return st.s.r
}

// Commit ends the step, making its writes durable. A step without writes
// commits nothing; a failed step returns its error.
func (st *Step) Commit(ctx context.Context) error {
	if st.err != nil {
		return st.err
	}
	if !st.began {
		st.err = errStepDone
		return nil
	}
	s := st.s
	st.began = false
	st.err = errStepDone
	defer s.wmu.Unlock()
	if st.s.faults != nil {
		if err := st.s.faults.Fault("Commit", 1); err != nil {
			_, _ = s.wc.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			st.err = fmt.Errorf("sqlite: step: commit: %w", err)
			return st.err
		}
	}
	if _, err := s.exec(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		_, _ = s.wc.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		st.err = fmt.Errorf("sqlite: step: commit: %w", err)
		return st.err
	}
	return nil
}

// Rollback ends the step, undoing its writes. It is safe after Commit.
func (st *Step) Rollback() {
	if !st.began {
		return
	}
	st.began = false
	// A rollback on a dead context would fail and leave the transaction
	// open on the connection: use one that cannot end.
	_, _ = st.s.wc.ExecContext(context.WithoutCancel(st.ctx), "ROLLBACK")
	st.s.wmu.Unlock()
}

// JobEnqueueMany is Store.JobEnqueueMany inside the step.
func (st *Step) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	return st.s.jobEnqueueMany(ctx, st.tx, p)
}

// JobClaimMany is Store.JobClaimMany inside the step.
func (st *Step) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	return st.s.jobClaimMany(ctx, st.tx, p)
}

// JobUpdateMany is Store.JobUpdateMany inside the step.
func (st *Step) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	return st.s.jobUpdateMany(ctx, st.tx, p)
}

// JobGet is Store.JobGet, seeing the step's writes.
func (st *Step) JobGet(ctx context.Context, namespace, id string) (store.Job, error) {
	if st.err != nil {
		return store.Job{}, st.err
	}
	return st.s.jobGet(ctx, st.reader(), namespace, id)
}

// JobCount is Store.JobCount, seeing the step's writes.
func (st *Step) JobCount(ctx context.Context, namespace string) (store.Counts, error) {
	if st.err != nil {
		return store.Counts{}, st.err
	}
	if !st.began {
		return st.s.JobCount(ctx, namespace)
	}
	c, err := jobCount(ctx, st.reader(), namespace)
	if err != nil {
		return c, fmt.Errorf("sqlite: JobCount: %w", err)
	}
	return c, nil
}

// JobListRunning is Store.JobListRunning, seeing the step's writes.
func (st *Step) JobListRunning(ctx context.Context, namespace string) ([]store.Job, error) {
	if st.err != nil {
		return nil, st.err
	}
	return queryJobs(ctx, st.reader(), "JobListRunning", listRunningSQL, namespace)
}

// JobNextRunAt is Store.JobNextRunAt, seeing the step's writes.
func (st *Step) JobNextRunAt(ctx context.Context, namespace string, queues []string) (time.Time, bool, error) {
	if st.err != nil {
		return time.Time{}, false, st.err
	}
	return jobNextRunAt(ctx, st.reader(), namespace, queues)
}
