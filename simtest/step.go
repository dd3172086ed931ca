package simtest

import (
	"context"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// Step transactions (Config.StepTx): the actors see a store that runs a
// whole step as one SQLite transaction (sqlite.Store.BeginStep), as a node
// on SQLite does. What a step writes reaches the model only when the step
// commits, in the order it was written; a failed call or commit rolls the
// whole step back, and nothing of it reaches the model.

// faultStepper is the fault layer of a world with step transactions.
type faultStepper struct{ *faultStore }

// BeginStep starts a step transaction under the fault layer.
func (f faultStepper) BeginStep(ctx context.Context) store.StepTx {
	rec := &recStep{r: f.inner, tx: f.inner.db.BeginStep(ctx)}
	var tx store.StepTx = &faultStep{faultReads: faultReads{f.faultStore, rec.tx}, f: f.faultStore, rec: rec}
	if w := f.s.cfg.WrapStep; w != nil {
		tx = w(tx)
	}
	return tx
}

// faultStep draws faults for the calls of one step, like faultStore, and
// for its commit.
type faultStep struct {
	faultReads // through the step's transaction
	f          *faultStore
	rec        *recStep
}

func (fs *faultStep) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	var out [][]api.EnqueueResult
	err := fs.f.writeHiding("enqueue", func() (err error) { out, err = fs.rec.JobEnqueueMany(ctx, p); return err }, fs.rec.hideLast)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (fs *faultStep) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	var out [][]store.Job
	err := fs.f.writeHiding("claim", func() (err error) { out, err = fs.rec.JobClaimMany(ctx, p); return err }, fs.rec.hideLast)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (fs *faultStep) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	var out []bool
	err := fs.f.writeHiding("update", func() (err error) { out, err = fs.rec.JobUpdateMany(ctx, p); return err }, fs.rec.hideLast)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Commit fails, as often as a write fails part-way, before anything of the
// step is durable.
func (fs *faultStep) Commit(ctx context.Context) error {
	s := fs.f.s
	if s.cur != nil && fs.rec.writes() && s.cfg.Faults.MidWrite > 0 && s.frng.Float64() < s.cfg.Faults.MidWrite {
		s.stat("fault commit")
		s.logf("  fault the step's commit: it rolls back")
		s.cur.storeErr = true
		fs.rec.Rollback()
		return errInjected
	}
	return fs.rec.Commit(ctx)
}

func (fs *faultStep) Rollback() { fs.rec.Rollback() }

// recStep records a step's writes and applies them to the model once the
// step commits.
type recStep struct {
	r       *recStore
	tx      store.StepTx
	pending []*pendingWrite
}

// pendingWrite is a write of the step not yet committed.
type pendingWrite struct {
	op     string
	hidden bool
	apply  func(st *stepCtx, w *writeRec)
}

func (rs *recStep) writes() bool { return len(rs.pending) > 0 }

func (rs *recStep) hideLast() {
	if n := len(rs.pending); n > 0 {
		rs.pending[n-1].hidden = true
	}
}

func (rs *recStep) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	res, err := rs.tx.JobEnqueueMany(ctx, p)
	return res, rs.r.recordEnqueue(rs, p, res, err)
}

func (rs *recStep) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	res, err := rs.tx.JobClaimMany(ctx, p)
	return res, rs.r.recordClaim(rs, p, res, err)
}

func (rs *recStep) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	applied, err := rs.tx.JobUpdateMany(ctx, p)
	return applied, rs.r.recordUpdate(rs, p, applied, err)
}

// Commit commits the step and applies its writes to the model in order.
func (rs *recStep) Commit(ctx context.Context) error {
	s := rs.r.s
	pending := rs.pending
	rs.pending = nil
	if err := rs.tx.Commit(ctx); err != nil {
		if len(pending) > 0 {
			s.logf("  store commit of %d writes: %v (the step rolled back)", len(pending), err)
		}
		return err
	}
	st := s.cur
	if st == nil {
		if len(pending) > 0 {
			s.violate(InvStore, "a step committed %d writes outside an actor step", len(pending))
		}
		return nil
	}
	for _, pw := range pending {
		w := &writeRec{op: pw.op}
		st.writes = append(st.writes, w)
		pw.apply(st, w)
		if pw.hidden {
			w.hide()
		}
	}
	return nil
}

func (rs *recStep) Rollback() {
	rs.tx.Rollback()
	rs.pending = nil
}
