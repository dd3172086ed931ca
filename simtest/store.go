package simtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
)

// ---------------------------------------------------------------------------
// Faults inside SQLite's transactions

// txFaults is SQLite's fault hook: armed, it fails the write transaction at
// one of its steps, and the store must roll back everything before it.
type txFaults struct {
	armed int
	fired bool
}

var errMidWrite = errors.New("simtest: injected fault inside the transaction")

func (t *txFaults) Fault(op string, step int) error {
	if t.armed > 0 && step == t.armed {
		t.armed, t.fired = 0, true
		return errMidWrite
	}
	return nil
}

// ---------------------------------------------------------------------------
// The fault layer

type faultKind int

const (
	faultNone faultKind = iota
	faultBefore
	faultAfter
	faultMid
	faultSlow
	faultRead
)

func (k faultKind) String() string {
	return [...]string{"none", "before-write", "after-write", "mid-write", "slow", "read"}[k]
}

type scriptedFault struct {
	op   string // enqueue, claim, update, or a read: JobCount, JobGet, SettingGet, …
	kind faultKind
	slow time.Duration
}

// faultStore injects store faults into the actors' (and caches') calls. It
// only acts inside an actor step: the admin door and the checks read and
// write the store as it is.
type faultStore struct {
	s     *Sim
	inner *recStore
	next  []scriptedFault
}

func (f *faultStore) scripted(op string) (scriptedFault, bool) {
	for i, sf := range f.next {
		if sf.op == op {
			f.next = slices.Delete(f.next, i, i+1)
			return sf, true
		}
	}
	return scriptedFault{}, false
}

// writeFault draws what happens to a write.
func (f *faultStore) writeFault(op string) (faultKind, time.Duration) {
	if f.s.cur == nil {
		return faultNone, 0
	}
	if sf, ok := f.scripted(op); ok {
		return sf.kind, sf.slow
	}
	c := f.s.cfg.Faults
	r := f.s.frng.Float64()
	switch {
	case r < c.BeforeWrite:
		return faultBefore, 0
	case r < c.BeforeWrite+c.AfterWrite:
		return faultAfter, 0
	case r < c.BeforeWrite+c.AfterWrite+c.MidWrite:
		return faultMid, 0
	case r < c.BeforeWrite+c.AfterWrite+c.MidWrite+c.Slow && c.SlowMax > 0:
		return faultSlow, time.Duration(f.s.frng.Int64N(int64(c.SlowMax))) + time.Millisecond
	}
	return faultNone, 0
}

func (f *faultStore) readFault(op, ns string) bool {
	st := f.s.cur
	if st == nil {
		return false
	}
	_, scripted := f.scripted(op)
	if !scripted && !(f.s.cfg.Faults.Read > 0 && f.s.frng.Float64() < f.s.cfg.Faults.Read) {
		return false
	}
	st.storeErr = true
	f.s.stat("fault read")
	if ns == st.ns && (op == "SettingGet" || op == "ConfigList") {
		st.readFault = true
	}
	f.s.logf("  fault read %s %s", op, ns)
	return true
}

// write runs one write under the fault drawn for it: before (nothing
// happens), mid (SQLite fails it part-way), after (it commits, the caller
// sees an error), slow (the step takes longer).
func (f *faultStore) write(op string, do func() error) error {
	return f.writeHiding(op, do, nil)
}

// writeHiding is write with hide marking the write an after-write fault
// hid from the actor (nil: the step's last recorded write).
func (f *faultStore) writeHiding(op string, do func() error, hide func()) error {
	kind, slow := f.writeFault(op)
	st := f.s.cur
	if kind != faultNone {
		f.s.stat("fault " + kind.String())
	}
	switch kind {
	case faultBefore:
		st.storeErr = true
		f.s.logf("  fault %s before the write", op)
		return errInjected
	case faultMid:
		f.s.txf.armed, f.s.txf.fired = 1+f.s.frng.IntN(4), false
		f.s.logf("  fault %s armed inside the transaction at step %d", op, f.s.txf.armed)
	case faultSlow:
		st.delay += slow
	}
	err := do()
	f.s.txf.armed = 0
	if kind == faultMid && f.s.txf.fired {
		f.s.stat("fault mid-write fired")
	}
	if err != nil {
		st.storeErr = true
		return err
	}
	if kind == faultAfter {
		st.storeErr = true
		if hide != nil {
			hide()
		} else if n := len(st.writes); n > 0 {
			st.writes[n-1].hide()
		}
		f.s.logf("  fault %s after the write: it committed, the actor sees an error", op)
		return errInjected
	}
	return nil
}

func (f *faultStore) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	var out [][]api.EnqueueResult
	err := f.write("enqueue", func() (err error) { out, err = f.inner.JobEnqueueMany(ctx, p); return err })
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *faultStore) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	var out [][]store.Job
	err := f.write("claim", func() (err error) { out, err = f.inner.JobClaimMany(ctx, p); return err })
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *faultStore) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	var out []bool
	err := f.write("update", func() (err error) { out, err = f.inner.JobUpdateMany(ctx, p); return err })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// jobReader is what an actor reads of jobs: the store, or a step's
// transaction.
type jobReader interface {
	JobGet(ctx context.Context, ns, id string) (store.Job, error)
	JobCount(ctx context.Context, ns string) (store.Counts, error)
	JobListRunning(ctx context.Context, ns string) ([]store.Job, error)
	JobNextRunAt(ctx context.Context, ns string, queues []string) (time.Time, bool, error)
}

// faultReads fails reads of r as the fault layer draws them.
type faultReads struct {
	f *faultStore
	r jobReader
}

func (fr faultReads) JobGet(ctx context.Context, ns, id string) (store.Job, error) {
	if fr.f.readFault("JobGet", ns) {
		return store.Job{}, errInjected
	}
	return fr.r.JobGet(ctx, ns, id)
}

func (fr faultReads) JobCount(ctx context.Context, ns string) (store.Counts, error) {
	if fr.f.readFault("JobCount", ns) {
		return store.Counts{}, errInjected
	}
	return fr.r.JobCount(ctx, ns)
}

func (fr faultReads) JobListRunning(ctx context.Context, ns string) ([]store.Job, error) {
	if fr.f.readFault("JobListRunning", ns) {
		return nil, errInjected
	}
	return fr.r.JobListRunning(ctx, ns)
}

func (fr faultReads) JobNextRunAt(ctx context.Context, ns string, queues []string) (time.Time, bool, error) {
	if fr.f.readFault("JobNextRunAt", ns) {
		return time.Time{}, false, errInjected
	}
	return fr.r.JobNextRunAt(ctx, ns, queues)
}

func (f *faultStore) JobGet(ctx context.Context, ns, id string) (store.Job, error) {
	return faultReads{f, f.inner}.JobGet(ctx, ns, id)
}

func (f *faultStore) JobCount(ctx context.Context, ns string) (store.Counts, error) {
	return faultReads{f, f.inner}.JobCount(ctx, ns)
}

func (f *faultStore) JobListRunning(ctx context.Context, ns string) ([]store.Job, error) {
	return faultReads{f, f.inner}.JobListRunning(ctx, ns)
}

func (f *faultStore) JobNextRunAt(ctx context.Context, ns string, queues []string) (time.Time, bool, error) {
	return faultReads{f, f.inner}.JobNextRunAt(ctx, ns, queues)
}

func (f *faultStore) SettingGet(ctx context.Context, key string) (store.Setting, error) {
	ns, _ := quota.NamespaceFromKey(key)
	if f.readFault("SettingGet", ns) {
		return store.Setting{}, errInjected
	}
	return f.inner.SettingGet(ctx, key)
}

func (f *faultStore) ConfigList(ctx context.Context, ns, kind string) ([]store.ConfigItem, error) {
	if f.readFault("ConfigList", ns) {
		return nil, errInjected
	}
	return f.inner.ConfigList(ctx, ns, kind)
}

// ---------------------------------------------------------------------------
// The recording layer: what committed, applied to the model

// recStore sits right above SQLite: every write that reaches it and
// commits is applied to the model, after checking it follows the rules.
type recStore struct {
	s  *Sim
	db *sqlite.Store
}

// writeRec is one committed write of a step.
type writeRec struct {
	op      string
	hidden  bool // the fault layer reported an error for it
	batches []*batchRec
}

// hide marks a write (and its batches) as one the actor was told failed.
func (w *writeRec) hide() {
	w.hidden = true
	for _, b := range w.batches {
		b.hidden = true
	}
}

// claimRec is a job handed out by a committed claim.
type claimRec struct {
	worker    string
	attempt   int64
	w         *writeRec
	delivered int
}

// updRec is an update of a committed (or refused) write.
type updRec struct {
	u       store.JobUpdate
	applied bool
	w       *writeRec
}

const leaseExpired = "lease expired"

func (r *recStore) JobGet(ctx context.Context, ns, id string) (store.Job, error) {
	return r.db.JobGet(ctx, ns, id)
}

func (r *recStore) JobCount(ctx context.Context, ns string) (store.Counts, error) {
	return r.db.JobCount(ctx, ns)
}

func (r *recStore) JobListRunning(ctx context.Context, ns string) ([]store.Job, error) {
	return r.db.JobListRunning(ctx, ns)
}

func (r *recStore) JobNextRunAt(ctx context.Context, ns string, queues []string) (time.Time, bool, error) {
	return r.db.JobNextRunAt(ctx, ns, queues)
}

func (r *recStore) SettingGet(ctx context.Context, key string) (store.Setting, error) {
	return r.db.SettingGet(ctx, key)
}

func (r *recStore) ConfigList(ctx context.Context, ns, kind string) ([]store.ConfigItem, error) {
	return r.db.ConfigList(ctx, ns, kind)
}

func (r *recStore) step(op string) *stepCtx {
	if r.s.cur == nil {
		r.s.violate(InvStore, "%s written outside an actor step", op)
	}
	return r.s.cur
}

func (r *recStore) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	res, err := r.db.JobEnqueueMany(ctx, p)
	if err == nil {
		r.s.checkLanded("enqueue", p.Namespace, p.Fence)
	}
	return res, r.recordEnqueue(nil, p, res, err)
}

func (r *recStore) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	res, err := r.db.JobClaimMany(ctx, p)
	if err == nil {
		r.s.checkLanded("claim", p.Namespace, p.Fence)
	}
	return res, r.recordClaim(nil, p, res, err)
}

func (r *recStore) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	applied, err := r.db.JobUpdateMany(ctx, p)
	if err == nil {
		r.s.checkLanded("update", p.Namespace, p.Fence)
	}
	return applied, r.recordUpdate(nil, p, applied, err)
}

func (r *recStore) recordEnqueue(rs *recStep, p store.JobEnqueueManyParams, res [][]api.EnqueueResult, err error) error {
	return r.recorded(rs, "enqueue", fmt.Sprintf("%d calls", len(p.Calls)), err,
		func() { r.s.verifyEnqueueFailed(p) },
		func(st *stepCtx, w *writeRec) { r.s.applyEnqueue(st, w, p, res) })
}

func (r *recStore) recordClaim(rs *recStep, p store.JobClaimManyParams, res [][]store.Job, err error) error {
	return r.recorded(rs, "claim", fmt.Sprintf("%d claims", len(p.Claims)), err,
		func() { r.s.verifyCounts(p.Namespace, "a failed claim") },
		func(st *stepCtx, w *writeRec) { r.s.applyClaims(st, w, p, res) })
}

func (r *recStore) recordUpdate(rs *recStep, p store.JobUpdateManyParams, applied []bool, err error) error {
	return r.recorded(rs, "update", fmt.Sprintf("%d updates", len(p.Updates)), err,
		func() { r.s.verifyUpdatesFailed(p) },
		func(st *stepCtx, w *writeRec) { r.s.applyUpdates(st, w, p, applied) })
}

// recorded takes a write that reached SQLite into the model. A failed one
// must have left the store as the model holds it (with rs, the whole step
// rolled back: nothing of it reaches the model). A successful one is
// applied now, or with rs when the step commits.
func (r *recStore) recorded(rs *recStep, op, what string, err error, verify func(), apply func(st *stepCtx, w *writeRec)) error {
	st := r.step(op)
	if st == nil {
		return err
	}
	if err != nil {
		note := ""
		if rs != nil {
			rs.pending = nil
			note = " (the step rolled back)"
		}
		r.s.logf("  store %s %s: %v%s", op, what, err, note)
		verify()
		return err
	}
	if rs != nil {
		rs.pending = append(rs.pending, &pendingWrite{op: op, apply: apply})
		return nil
	}
	w := &writeRec{op: op}
	st.writes = append(st.writes, w)
	apply(st, w)
	return nil
}

// ---------------------------------------------------------------------------
// Applying committed writes to the model

func (s *Sim) applyEnqueue(st *stepCtx, w *writeRec, p store.JobEnqueueManyParams, res [][]api.EnqueueResult) {
	nm := s.m.ns[p.Namespace]
	if nm == nil {
		s.violate(InvStore, "enqueue into unknown namespace %q", p.Namespace)
		return
	}
	if st.stopped {
		s.violate(InvFailClosed, "namespace %s is stopped (%s) but an enqueue was written", p.Namespace, st.stopReason)
	}
	if len(res) != len(p.Calls) {
		s.violate(InvStore, "enqueue of %d calls answered %d results", len(p.Calls), len(res))
		return
	}
	grew := false
	for i, c := range p.Calls {
		shed := c.ShedError != ""
		b := s.linkCall(st, c)
		var want []api.EnqueueResult
		if len(c.ReplayIDs) > 0 {
			for _, id := range c.ReplayIDs {
				want = append(want, s.replayOne(nm, id, shed, p.Now))
			}
		} else {
			for k := range c.Jobs {
				want = append(want, s.newOne(nm, &c.Jobs[k], shed, p.Now))
			}
		}
		verdict := "admit"
		if shed {
			verdict = "shed"
			if !strings.HasPrefix(c.ShedError, "quota: ") {
				s.violate(InvReply, "shed error %q does not start with \"quota: \"", c.ShedError)
			}
		}
		parts := make([]string, len(res[i]))
		for k, r := range res[i] {
			s.stat("job " + string(r.Outcome))
			parts[k] = s.alias(r.ID) + ":" + string(r.Outcome)
			if r.Outcome == api.OutcomeEnqueued && !shed {
				grew = true
			}
		}
		bid := 0
		if b != nil {
			bid = b.id
		}
		s.logf("  store enqueue b%d %s %s", bid, verdict, strings.Join(parts, ","))
		if !sameResults(want, res[i]) {
			s.violate(InvStore, "enqueue b%d: the store answered %s, the model expected %s", bid, strings.Join(parts, ","), s.resultsText(want))
		}
		if b != nil {
			if b.committed {
				s.violate(InvBatchWhole, "b%d written twice (steps %d and %d)", b.id, b.step, st.id)
			}
			b.committed, b.step, b.results = true, st.id, res[i]
			w.batches = append(w.batches, b)
		}
		if !shed {
			n := int64(len(c.Jobs))
			if len(c.ReplayIDs) > 0 {
				n = int64(len(c.ReplayIDs))
			}
			s.rateAdmit(nm, st, w, p.Now, n, bid)
		}
	}
	if grew && st.snapOK {
		q, _ := nm.quotaAt(st.snap.Revision)
		if mp := q.doc.MaxPending; mp != nil && nm.pending > *mp {
			s.violate(InvPendingCap, "%s: an admission made pending %d > max_pending %d (quota rev %d)", nm.name, nm.pending, *mp, st.snap.Revision)
		}
	}
}

func (s *Sim) resultsText(rs []api.EnqueueResult) string {
	parts := make([]string, len(rs))
	for k, r := range rs {
		parts[k] = s.alias(r.ID) + ":" + string(r.Outcome)
	}
	return strings.Join(parts, ",")
}

func sameResults(a, b []api.EnqueueResult) bool {
	return slices.Equal(a, b)
}

// linkCall finds the producer's batch a written call came from and checks
// it came whole: every job of the batch, in order, and nothing else.
func (s *Sim) linkCall(st *stepCtx, c store.EnqueueCall) *batchRec {
	if len(c.ReplayIDs) > 0 {
		for _, m := range st.msgs {
			b := m.batch
			if b != nil && b.kind == kindReplay && !m.replied && !b.committed && b.autoRetry == c.AutoRetry && slices.Equal(b.replayIDs, c.ReplayIDs) {
				return b
			}
		}
		s.violate(InvBatchWhole, "a replay of %s was written that no pending request asked for", s.aliasList(c.ReplayIDs))
		return nil
	}
	var b *batchRec
	for k := range c.Jobs {
		t, ok := parseTag(c.Jobs[k].Payload)
		if !ok {
			s.violate(InvBatchWhole, "job %s written without its batch tag", s.alias(c.Jobs[k].ID))
			return nil
		}
		var id, idx int
		if t.E != nil {
			id, idx = *t.E, k
		} else {
			id = *t.B
			if t.I != nil {
				idx = *t.I
			}
		}
		if b == nil {
			b = s.batches[id]
			if b == nil {
				s.violate(InvBatchWhole, "job tagged with unknown batch %d", id)
				return nil
			}
		} else if b.id != id {
			s.violate(InvBatchWhole, "one call mixes batches b%d and b%d", b.id, id)
			return b
		}
		if idx != k {
			s.violate(InvBatchWhole, "b%d: job %d of the call is job %d of the batch", b.id, k, idx)
			return b
		}
	}
	if b == nil {
		s.violate(InvBatchWhole, "an empty call was written")
		return nil
	}
	want := len(b.jobs)
	if b.kind == kindEvent {
		want = len(b.triggers)
		for k := range c.Jobs {
			if k < len(b.triggers) && (c.Jobs[k].Queue != b.triggers[k][0] || c.Jobs[k].Task != b.triggers[k][1]) {
				s.violate(InvBatchWhole, "b%d: event job %d is %s/%s, trigger order says %s/%s", b.id, k, c.Jobs[k].Queue, c.Jobs[k].Task, b.triggers[k][0], b.triggers[k][1])
			}
		}
	}
	if len(c.Jobs) != want {
		s.violate(InvBatchWhole, "b%d: %d of its %d jobs were written as one call", b.id, len(c.Jobs), want)
	}
	return b
}

// newOne applies one new job of a written call and returns the outcome the
// model expects (docs/quotas.md, docs/protocol.md: repeated ids, unique and debounce keys).
func (s *Sim) newOne(nm *nsModel, j *store.NewJob, shed bool, now time.Time) api.EnqueueResult {
	mk := func(st api.Status) *mjob {
		return &mjob{id: j.ID, queue: j.Queue, task: j.Task, status: st, maxAttempts: j.MaxAttempts,
			priority: j.Priority, runAt: storedRunAt(j.RunAt), payload: string(j.Payload)}
	}
	if shed {
		if nm.jobs[j.ID] == nil {
			mj := mk(api.StatusDead)
			mj.shed = true
			nm.add(mj)
		}
		return api.EnqueueResult{ID: j.ID, Outcome: api.OutcomeShed}
	}
	if !j.Generated && nm.jobs[j.ID] != nil {
		return api.EnqueueResult{ID: j.ID, Outcome: api.OutcomeDeduplicated}
	}
	if j.UniqueKey != "" {
		if h := nm.liveUnique(j.UniqueKey); h != nil {
			return api.EnqueueResult{ID: h.id, Outcome: api.OutcomeDeduplicated}
		}
	}
	if j.DebounceKey != "" {
		if h := nm.pendingDebounce(j.DebounceKey); h != nil {
			h.payload, h.runAt = string(j.Payload), storedRunAt(j.RunAt)
			return api.EnqueueResult{ID: h.id, Outcome: api.OutcomeCoalesced}
		}
	}
	if nm.jobs[j.ID] != nil {
		s.violate(InvStore, "generated id %s repeats a stored job", s.alias(j.ID))
		return api.EnqueueResult{ID: j.ID, Outcome: api.OutcomeEnqueued}
	}
	mj := mk(api.StatusPending)
	mj.uniqueKey, mj.debounceKey = j.UniqueKey, j.DebounceKey
	nm.add(mj)
	return api.EnqueueResult{ID: j.ID, Outcome: api.OutcomeEnqueued}
}

// replayOne applies one replayed dead letter.
func (s *Sim) replayOne(nm *nsModel, id string, shed bool, now time.Time) api.EnqueueResult {
	j := nm.jobs[id]
	if j == nil || j.status != api.StatusDead {
		return api.EnqueueResult{ID: id}
	}
	if shed {
		j.shed, j.uniqueKey, j.debounceKey = true, "", ""
		return api.EnqueueResult{ID: id, Outcome: api.OutcomeShed}
	}
	if j.uniqueKey != "" {
		if h := nm.liveUnique(j.uniqueKey); h != nil {
			return api.EnqueueResult{ID: h.id, Outcome: api.OutcomeDeduplicated}
		}
	}
	nm.setStatus(j, api.StatusPending)
	j.attempt, j.runAt, j.shed, j.noRetry, j.debounceKey, j.leaseUntil = 0, storedRunAt(now), false, false, "", time.Time{}
	return api.EnqueueResult{ID: id, Outcome: api.OutcomeEnqueued}
}

// rateAdmit records an admitted call of n jobs at t and checks the token
// bucket: under one rate C per U, the jobs admitted from any admission at
// t0 through t never exceed C + ⌊C·(t−t0)/U⌋ (a full bucket, plus what
// refills). A change of rate starts a new stretch (the bucket is capped at
// the new capacity); so does a new actor while BugBucketForgotten is
// tolerated.
func (s *Sim) rateAdmit(nm *nsModel, st *stepCtx, w *writeRec, t time.Time, n int64, bid int) {
	sr := nm.stretch
	if sr == nil || (sr.inc != st.sa.inc && s.cfg.Tolerate[BugBucketForgotten]) {
		return
	}
	sr.admits = append(sr.admits, admit{at: t, n: n, w: w})
	c, u := sr.rate.Count, int64(sr.rate.Unit)
	var sum int64
	for i := len(sr.admits) - 1; i >= 0; i-- {
		a := sr.admits[i]
		sum += a.n
		allowed := c + c*int64(t.Sub(a.at))/u
		if sum > allowed {
			s.violate(InvRate, "%s: %d jobs admitted in %s (b%d last) under enqueue_rate %s: the bucket allows %d",
				nm.name, sum, t.Sub(a.at), bid, sr.rate.Text, allowed)
			return
		}
	}
}

func (s *Sim) applyClaims(st *stepCtx, w *writeRec, p store.JobClaimManyParams, res [][]store.Job) {
	nm := s.m.ns[p.Namespace]
	if len(res) != len(p.Claims) {
		s.violate(InvStore, "claim of %d claims answered %d results", len(p.Claims), len(res))
		return
	}
	s.checkHead(nm, p)
	total := 0
	queues, tasks := map[string]bool{}, map[string]bool{}
	for ci, spec := range p.Claims {
		if len(res[ci]) > spec.Max {
			s.violate(InvStore, "claim max %d handed out %d", spec.Max, len(res[ci]))
		}
		var names []string
		for _, sj := range res[ci] {
			s.stat("job claimed")
			names = append(names, fmt.Sprintf("%s@%d", s.alias(sj.ID), sj.Attempt))
			total++
			j := nm.jobs[sj.ID]
			switch {
			case j == nil:
				s.violate(InvStore, "claimed job %s the model does not know", s.alias(sj.ID))
				continue
			case j.shed:
				s.violate(InvShedClaimed, "shed job %s was claimed", s.alias(sj.ID))
			case j.status != api.StatusPending:
				s.violate(InvStore, "claimed job %s is %s, not pending", s.alias(sj.ID), j.status)
			case j.runAt.After(p.Now):
				s.violate(InvStore, "claimed job %s is not due until +%s", s.alias(sj.ID), fmtDur(j.runAt.Sub(epoch)))
			case !slices.Contains(spec.Queues, j.queue):
				s.violate(InvStore, "claimed job %s of queue %s for queues %v", s.alias(sj.ID), j.queue, spec.Queues)
			case slices.Contains(p.ExcludeTasks, j.task):
				s.violate(InvRunningCap, "claimed job %s of task %s, which the claim excluded", s.alias(sj.ID), j.task)
			}
			if sj.Attempt != j.attempt+1 {
				s.violate(InvAttempt, "job %s claimed at attempt %d after attempt %d", s.alias(sj.ID), sj.Attempt, j.attempt)
			}
			nm.setStatus(j, api.StatusRunning)
			j.attempt, j.leaseUntil, j.seq = sj.Attempt, spec.LeaseUntil, sj.Seq
			queues[j.queue], tasks[j.task] = true, true
			st.claimed[sj.ID] = &claimRec{worker: spec.Worker, attempt: sj.Attempt, w: w}
		}
		if len(names) > 0 {
			s.logf("  store claim %s %s", spec.Worker, strings.Join(names, ","))
		}
	}
	if total == 0 {
		return
	}
	if st.stopped {
		s.violate(InvFailClosed, "namespace %s is stopped (%s) but handed out %d jobs", nm.name, st.stopReason, total)
	}
	if !st.snapOK {
		return
	}
	q, _ := nm.quotaAt(st.snap.Revision)
	if mr := q.doc.MaxRunning; mr != nil && nm.running == *mr {
		s.stat("claim reached max_running")
	}
	if mr := q.doc.MaxRunning; mr != nil && nm.running > *mr {
		s.violate(InvRunningCap, "%s: a claim made running %d > max_running %d (quota rev %d)", nm.name, nm.running, *mr, st.snap.Revision)
	}
	for _, qn := range sortedKeys(queues) {
		if qs, ok := st.snap.Queues[qn]; ok && qs.MaxConcurrent != nil && nm.runQ[qn] > *qs.MaxConcurrent {
			s.violate(InvRunningCap, "%s: a claim made queue %s run %d > max_concurrent %d", nm.name, qn, nm.runQ[qn], *qs.MaxConcurrent)
		}
	}
	for _, tn := range sortedKeys(tasks) {
		if ts, ok := st.snap.Tasks[tn]; ok && ts.MaxConcurrent != nil && nm.runT[tn] > *ts.MaxConcurrent {
			s.violate(InvRunningCap, "%s: a claim made task %s run %d > max_concurrent %d", nm.name, tn, nm.runT[tn], *ts.MaxConcurrent)
		}
	}
}

// checkHead checks a claim's head (JobClaimManyParams.Head): no job of
// its queue that the claim could hand out sorts before it. SQLite does
// not use it; PostgreSQL starts its scan there, so a head past a job
// would leave that job behind.
func (s *Sim) checkHead(nm *nsModel, p store.JobClaimManyParams) {
	h := p.Head
	if h == nil {
		return
	}
	q, ok := p.OneQueueUngated()
	if !ok || len(p.ExcludeTasks) > 0 || !p.NoPromote {
		s.violate(InvStore, "a claim head on a group that may not use one")
		return
	}
	s.stat("claim from a known head")
	// The job at the head, if a claim returned it: seq ties break by the
	// creation order, which is the store's seq order.
	at := -1
	if h.Seq != 0 {
		for _, j := range nm.order {
			if j.seq == h.Seq {
				at = j.n
				break
			}
		}
	}
	for _, j := range nm.order {
		if j.queue != q || j.status != api.StatusPending || j.shed || j.runAt.After(p.Now) {
			continue
		}
		before := j.priority > h.Priority ||
			j.priority == h.Priority && (j.runAt.Before(h.RunAt) || j.runAt.Equal(h.RunAt) && h.Seq != 0 && (at < 0 || j.n < at))
		if before {
			s.violate(InvStore, "a claim of queue %s starts at its head (priority %d, run_at +%s, seq %d), past %s (priority %d, run_at +%s), which is available",
				q, h.Priority, fmtDur(h.RunAt.Sub(epoch)), h.Seq, s.alias(j.id), j.priority, fmtDur(j.runAt.Sub(epoch)))
			return
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// backoffBounds is the range docs/protocol.md (fq.v1.nack) allows before attempt+1.
func backoffBounds(attempt int64) (lo, hi time.Duration) {
	if attempt < 1 {
		attempt = 1
	}
	d := time.Hour
	if attempt <= 13 {
		d = min(time.Second<<(attempt-1), time.Hour)
	}
	lo = time.Duration(float64(d)*0.8) - time.Microsecond
	hi = min(time.Duration(float64(d)*1.2), time.Hour) + time.Microsecond
	return lo, hi
}

func (s *Sim) applyUpdates(st *stepCtx, w *writeRec, p store.JobUpdateManyParams, applied []bool) {
	nm := s.m.ns[p.Namespace]
	if len(applied) != len(p.Updates) {
		s.violate(InvStore, "update of %d answered %d", len(p.Updates), len(applied))
		return
	}
	for i, u := range p.Updates {
		j := nm.jobs[u.ID]
		expect := j != nil && j.status == api.StatusRunning && j.attempt == u.Attempt
		st.updated[u.ID] = append(st.updated[u.ID], &updRec{u: u, applied: applied[i], w: w})
		kind := [...]string{"?", "complete", "retry", "dead", "extend", "release"}[u.Kind]
		s.logf("  store update %s %s@%d applied=%v", kind, s.alias(u.ID), u.Attempt, applied[i])
		if applied[i] != expect {
			s.violate(InvStore, "update %s of %s@%d: store applied=%v, the model expected %v", kind, s.alias(u.ID), u.Attempt, applied[i], expect)
		}
		if !applied[i] || j == nil {
			continue
		}
		failure := u.Kind == store.UpdateRetry || u.Kind == store.UpdateDead
		if failure && u.Error == leaseExpired {
			s.stat("lease expired")
		}
		if failure && u.Error == leaseExpired && j.leaseUntil.After(p.Now) {
			s.violate(InvLease, "%s expired at +%s, its lease runs to +%s", s.alias(u.ID), fmtDur(p.Now.Sub(epoch)), fmtDur(j.leaseUntil.Sub(epoch)))
		}
		maxA := nm.maxAttempts(j)
		// While its settings cannot be read the core retries a job that
		// has no max_attempts of its own rather than bury it on a guess.
		unread := st.snapOK && st.snap.Err != nil && j.maxAttempts == 0
		switch u.Kind {
		case store.UpdateComplete:
			nm.setStatus(j, api.StatusCompleted)
			j.leaseUntil = time.Time{}
		case store.UpdateRetry:
			if u.Attempt >= maxA && !unread {
				s.violate(InvAttempt, "%s retried after attempt %d of max_attempts %d", s.alias(u.ID), u.Attempt, maxA)
			}
			if lo, hi := backoffBounds(u.Attempt); u.RunAt.Sub(p.Now) < lo || u.RunAt.Sub(p.Now) > hi {
				s.violate(InvBackoff, "%s retries after %s at attempt %d: outside [%s, %s]", s.alias(u.ID), u.RunAt.Sub(p.Now), u.Attempt, lo, hi)
			}
			// It takes its debounce key back only if no other pending
			// job took it while it ran (store.UpdateRetry).
			if j.debounceKey != "" && nm.pendingDebounce(j.debounceKey) != nil {
				j.debounceKey = ""
			}
			nm.setStatus(j, api.StatusPending)
			j.runAt, j.leaseUntil = storedRunAt(u.RunAt), time.Time{}
		case store.UpdateDead:
			if !u.NoRetry && u.Attempt < maxA {
				s.violate(InvAttempt, "%s dead after attempt %d of max_attempts %d", s.alias(u.ID), u.Attempt, maxA)
			}
			nm.setStatus(j, api.StatusDead)
			j.noRetry, j.leaseUntil = u.NoRetry, time.Time{}
		case store.UpdateRelease:
			// Given back unstarted: pending as before its claim, the
			// attempt not spent, run_at and error as they were; the
			// debounce key as for a retry.
			if j.debounceKey != "" && nm.pendingDebounce(j.debounceKey) != nil {
				j.debounceKey = ""
			}
			nm.setStatus(j, api.StatusPending)
			j.attempt--
			j.leaseUntil = time.Time{}
			s.stat("released")
		case store.UpdateExtend:
			if !j.leaseUntil.After(p.Now) {
				s.violate(InvLease, "%s: a lease that ran out at +%s was extended", s.alias(u.ID), fmtDur(j.leaseUntil.Sub(epoch)))
			}
			j.leaseUntil = u.LeaseUntil
		}
	}
}

// ---------------------------------------------------------------------------
// Failed writes must leave nothing behind

func (s *Sim) verifyEnqueueFailed(p store.JobEnqueueManyParams) {
	nm := s.m.ns[p.Namespace]
	ctx := context.Background()
	for _, c := range p.Calls {
		for k := range c.Jobs {
			id := c.Jobs[k].ID
			if nm.jobs[id] != nil {
				continue
			}
			if _, err := s.db.JobGet(ctx, p.Namespace, id); !errors.Is(err, store.ErrNotFound) {
				s.violate(InvBatchWhole, "a failed enqueue left job %s behind (err %v)", s.alias(id), err)
			}
		}
		for _, id := range c.ReplayIDs {
			s.verifyJob(nm, id, "a failed replay")
		}
	}
	s.verifyCounts(p.Namespace, "a failed enqueue")
}

func (s *Sim) verifyUpdatesFailed(p store.JobUpdateManyParams) {
	nm := s.m.ns[p.Namespace]
	for _, u := range p.Updates {
		s.verifyJob(nm, u.ID, "a failed update")
	}
	s.verifyCounts(p.Namespace, "a failed update")
}

// verifyJob compares one stored job with the model.
func (s *Sim) verifyJob(nm *nsModel, id, after string) {
	sj, err := s.db.JobGet(context.Background(), nm.name, id)
	mj := nm.jobs[id]
	switch {
	case errors.Is(err, store.ErrNotFound) && mj == nil:
	case err != nil && mj != nil:
		s.violate(InvLost, "after %s job %s is gone (%v)", after, s.alias(id), err)
	case err == nil && mj == nil:
		s.violate(InvBatchWhole, "after %s job %s exists though nothing committed it", after, s.alias(id))
	case err == nil:
		if d := s.diffJob(mj, &sj); d != "" {
			s.violate(InvBatchWhole, "after %s job %s differs from the model: %s", after, s.alias(id), d)
		}
	}
}

// verifyCounts compares the store's counts of ns with the model's.
func (s *Sim) verifyCounts(ns, after string) {
	c, err := s.db.JobCount(context.Background(), ns)
	if err != nil {
		s.violate(InvStore, "count %s: %v", ns, err)
		return
	}
	nm := s.m.ns[ns]
	var completed, dead int64
	for _, j := range nm.order {
		switch j.status {
		case api.StatusCompleted:
			completed++
		case api.StatusDead:
			dead++
		}
	}
	if c.Pending != nm.pending || c.Running != nm.running || c.Completed != completed || c.Dead != dead {
		s.violate(InvBatchWhole, "after %s %s holds pending=%d running=%d completed=%d dead=%d, the model pending=%d running=%d completed=%d dead=%d",
			after, ns, c.Pending, c.Running, c.Completed, c.Dead, nm.pending, nm.running, completed, dead)
	}
}
