package simtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/store"
)

// The invariants. Each violation names one.
const (
	// InvRunningCap: no claim makes running exceed max_running, a queue's
	// or a task's max_concurrent in force when it was made.
	InvRunningCap = "running-cap"
	// InvPendingCap: no admission makes pending exceed the max_pending in
	// force when it was admitted (exact on one node).
	InvPendingCap = "pending-cap"
	// InvRate: the jobs admitted in any window never exceed what the token
	// bucket allows.
	InvRate = "rate"
	// InvShedClaimed: no shed job is ever claimed.
	InvShedClaimed = "shed-claimed"
	// InvBatchWhole: every call (batch, event, replay) lands whole or not
	// at all, once; a failed write leaves nothing behind.
	InvBatchWhole = "batch-whole"
	// InvLost: every acknowledged enqueue exists, and no job is lost.
	InvLost = "job-lost"
	// InvTTL: a quota change is enforced within the cache TTL, broadcast
	// or not.
	InvTTL = "quota-ttl"
	// InvFailClosed: a namespace whose quota cannot be read admits and
	// dispatches nothing.
	InvFailClosed = "fail-closed"
	// InvIsolation: a stopped namespace stops no other.
	InvIsolation = "fail-closed-isolation"
	// InvAttempt: a job's attempt moves only when a worker receives it: a
	// held-back job's attempt never moves; max_attempts holds.
	InvAttempt = "attempt"
	// InvCounts: an actor's pending and running counts equal the store's.
	InvCounts = "counts"
	// InvLease: a lease that ran out is expired at the actor's next step,
	// and never earlier or revived.
	InvLease = "lease"
	// InvBackoff: a retry waits 1 s × 2^(attempt−1) ±20 %, capped at 1 h.
	InvBackoff = "backoff"
	// InvReply: what an actor answers agrees with what it wrote.
	InvReply = "reply"
	// InvStore: the store's answers follow its contract (the model's
	// prediction of outcomes, claims and updates).
	InvStore = "store"
	// InvPanic: no actor panics.
	InvPanic = "panic"
	// InvAnswered: a call an actor took and held (a refusal the pace
	// holds) is answered, unless its actor was lost in a crash.
	InvAnswered = "answered"
)

// stepCtx is what one actor step did, gathered while it runs.
type stepCtx struct {
	id   int
	sa   *simActor
	ns   string
	now  time.Time
	msgs []*msgRec

	snap       cachebust.Snapshot
	snapOK     bool
	readFault  bool
	stopped    bool
	stopReason string
	storeErr   bool
	delay      time.Duration

	writes  []*writeRec
	replies []*msgRec
	// acksBehind: an overlapped ack write came back but its acksDone
	// message waits behind a full drain, so the counts lag the store.
	acksBehind bool
	claimed    map[string]*claimRec
	updated    map[string][]*updRec
	// before holds the model's view, at the start of the step, of the jobs
	// its acks and nacks name.
	before map[string]*mjob
	// acking are the acks being written beside the steps when the step
	// began, by job: an update of that job that lands inside the step is
	// theirs.
	acking map[string]*msgRec
	// fence is what the node's cluster gave the actor this step (cluster
	// mode; nil when it does not own the namespace now).
	fence      *store.Fence
	fenceAsked bool
}

// snapRec records the quota snapshot each step decides under, and checks
// it: fresh within the TTL, failing closed exactly when it must.
type snapRec struct {
	s     *Sim
	n     *node
	inner actors.Snapshots
}

func (r *snapRec) Get(ctx context.Context, ns string, now time.Time) cachebust.Snapshot {
	s := r.s
	// An armed ack write lands here: the step has taken its messages and
	// not yet read its counts (above the store's layers and their locks).
	s.land("inside the step")
	st := s.cur
	if st != nil {
		st.readFault = false
	}
	snap := r.inner.Get(ctx, ns, now)
	if st == nil || st.ns != ns {
		return snap
	}
	st.snap, st.snapOK = snap, true
	nm := s.m.ns[ns]
	q, known := nm.quotaAt(snap.Revision)
	switch {
	case st.readFault:
		s.stat("step stopped: quota unreadable (store)")
		st.stopped, st.stopReason = true, "its quota could not be read"
		if snap.Err == nil {
			s.violate(InvFailClosed, "%s: the store failed reading its quota, yet it runs", ns)
		}
	case !known:
		s.violate(InvTTL, "%s: a snapshot at quota revision %d, which was never written", ns, snap.Revision)
	default:
		if q.corrupt {
			s.stat("step stopped: quota corrupt")
			st.stopped, st.stopReason = true, fmt.Sprintf("quota rev %d does not decode", q.rev)
			if snap.Err == nil {
				s.violate(InvFailClosed, "%s: quota rev %d (%s) does not decode, yet the namespace runs", ns, q.rev, q.raw)
			}
		} else if snap.Err != nil {
			s.violate(InvIsolation, "%s stopped (%s) though its quota rev %d reads fine", ns, snap.Err.Message, snap.Revision)
		}
		if req := nm.requiredRev(now.Add(-s.cfg.TTL)); snap.Revision < req {
			w, _ := nm.quotaAt(req)
			s.violate(InvTTL, "%s decides at +%s under quota rev %d; rev %d was written at +%s, more than the TTL %s before",
				ns, fmtDur(now.Sub(epoch)), snap.Revision, req, fmtDur(w.at.Sub(epoch)), s.cfg.TTL)
		}
	}
	if n := r.n; snap.Revision > n.seen[ns] {
		if snap.Revision > n.bcastRev[ns] && n.seen[ns] > 0 {
			s.stat("quota change reached a node by TTL (broadcast lost)")
		}
		n.seen[ns] = snap.Revision
	}
	if !st.stopped {
		rate := q.doc.EnqueueRate
		inc := st.sa.inc
		// A new actor starts with a full bucket (BugBucketForgotten).
		forgot := nm.stretch != nil && nm.stretch.inc != inc && s.cfg.Tolerate[BugBucketForgotten]
		switch {
		case rate == nil:
			nm.stretch = nil
		case nm.stretch == nil || forgot || nm.stretch.rate.Count != rate.Count || nm.stretch.rate.Unit != rate.Unit:
			nm.stretch = &stretch{inc: inc, rate: *rate}
		}
	}
	return snap
}

// namedOnce reports whether only one ack or nack of the step names id (so
// an update of id is that message's).
func (st *stepCtx) namedOnce(id string) bool {
	n := 0
	for _, m := range st.msgs {
		switch b := m.body.(type) {
		case *api.AckRequest:
			if b.ID == id {
				n++
			}
		case *api.NackRequest:
			if b.ID == id {
				n++
			}
		}
	}
	return n == 1
}

// captureBefore keeps the model's view of the jobs the step's acks and
// nacks name, to judge the answers against.
// ackedOut says whether another call's ack of job id was being written
// beside the steps when st began.
func (st *stepCtx) ackedOut(id string, m *msgRec) bool {
	o := st.acking[id]
	return o != nil && o != m
}

func (s *Sim) captureBefore(st *stepCtx) {
	nm := s.m.ns[st.ns]
	for _, m := range st.msgs {
		var id string
		switch b := m.body.(type) {
		case *api.AckRequest:
			id = b.ID
		case *api.NackRequest:
			id = b.ID
		default:
			continue
		}
		if j := nm.jobs[id]; j != nil {
			c := *j
			st.before[id] = &c
			m.taken, m.takenAt, m.takenOnce, m.takenOwned = &c, st.now, st.namedOnce(id), s.stepOwns(st)
		}
	}
}

// checkStep checks what the step answered against what it wrote, and the
// actor's counts and leases against the model.
func (s *Sim) checkStep(st *stepCtx) {
	if s.halted {
		return
	}
	for _, m := range st.replies {
		switch m.op {
		case actors.OpEnqueue, actors.OpEvent, actors.OpReplay:
			s.checkEnqueueReply(st, m)
		case actors.OpClaim:
			s.checkClaimReply(st, m)
		case actors.OpAck, actors.OpNack:
			s.checkUpdateReply(st, m)
		case actors.OpHeartbeat:
			s.checkHeartbeatReply(st, m)
		}
	}
	for _, id := range sortedKeys(st.claimed) {
		c := st.claimed[id]
		if !c.w.hidden && c.delivered == 0 {
			s.violate(InvAttempt, "%s was claimed (attempt %d) but no worker received it: its attempt moved while it was held back", s.alias(id), c.attempt)
		}
	}
	nm := s.m.ns[st.ns]
	core := st.sa.a.Core()
	if core.Loaded() && s.stepOwns(st) {
		if !st.acksBehind && (core.Pending() != nm.pending || core.Running() != nm.running) {
			s.violate(InvCounts, "%s#%d counts pending=%d running=%d, the store holds pending=%d running=%d",
				st.ns, st.sa.inc, core.Pending(), core.Running(), nm.pending, nm.running)
		}
		if !st.storeErr {
			for _, j := range nm.order {
				// An ack taken before the lease ran out and still being
				// written completes the job: its lease no longer counts.
				if j.status == api.StatusRunning && !j.leaseUntil.After(st.now) && !st.sa.ackOut(j.id, nil) {
					s.violate(InvLease, "%s still running after a step at +%s; its lease ran out at +%s",
						s.alias(j.id), fmtDur(st.now.Sub(epoch)), fmtDur(j.leaseUntil.Sub(epoch)))
					break
				}
			}
		}
	}
	if s.now.Sub(s.lastRecon) >= s.cfg.ReconcileEvery {
		s.reconcile("periodic")
	}
}

// relinkReplay gives m the batch of an identical replay answered in the
// same step when that is what their answers say. A written replay carries
// only its ids, so linkCall gives it to the first request that asked for
// them; but the actor may have refused that one (a read that failed) and
// written the other. The two asked for the same thing, so either may own
// the write: only the answers tell which did.
func (s *Sim) relinkReplay(st *stepCtx, m *msgRec) {
	agrees := func(m *msgRec) bool { return (m.err == nil) == (m.batch.committed && !m.batch.hidden) }
	if agrees(m) {
		return
	}
	for _, o := range st.replies {
		ob := o.batch
		if o == m || ob == nil || ob.kind != kindReplay || o.ns != m.ns || ob.autoRetry != m.batch.autoRetry ||
			!slices.Equal(ob.replayIDs, m.batch.replayIDs) || ob.committed == m.batch.committed || agrees(o) {
			continue
		}
		s.logf("  relink m%d to b%d, m%d to b%d: identical replays, the answers say which was written", m.id, ob.id, o.id, m.batch.id)
		m.batch, o.batch = ob, m.batch
		m.batch.msg, o.batch.msg = m, o
		return
	}
}

func (s *Sim) checkEnqueueReply(st *stepCtx, m *msgRec) {
	if m.batch.kind == kindReplay {
		s.relinkReplay(st, m)
	}
	b := m.batch
	nm := s.m.ns[st.ns]
	// A refusal is decided under the quota of the step that took the
	// call, though the pace may answer it in a later one.
	snap, snapOK := st.snap, st.snapOK
	if m.decided {
		snap, snapOK = m.decidedSnap, true
	}
	if m.err == nil {
		rep, ok := m.reply.(api.EnqueueReply)
		if !ok {
			s.violate(InvReply, "m%d answered %T", m.id, m.reply)
			return
		}
		if !b.committed {
			if len(rep.Results) > 0 || b.kind != kindEvent || len(b.triggers) > 0 {
				s.violate(InvLost, "m%d (b%d) acknowledged %s, but nothing was written", m.id, b.id, s.resultsText(rep.Results))
			}
			return
		}
		if b.hidden {
			s.violate(InvReply, "m%d answered ok, but its write reported an error", m.id)
		}
		if !sameResults(rep.Results, b.results) {
			s.violate(InvReply, "m%d answered %s, the store wrote %s", m.id, s.resultsText(rep.Results), s.resultsText(b.results))
		}
		sheds, outcomes := 0, 0
		for _, r := range rep.Results {
			switch r.Outcome {
			case api.OutcomeShed:
				sheds++
			case "":
				s.violate(InvReply, "m%d answered outcome \"\" for %s", m.id, s.alias(r.ID))
				continue
			}
			outcomes++
			if nm.jobs[r.ID] == nil {
				s.violate(InvLost, "m%d acknowledged %s (%s), which the store does not hold", m.id, s.alias(r.ID), r.Outcome)
			}
		}
		if sheds != 0 && sheds != outcomes {
			s.violate(InvBatchWhole, "m%d: %d of %d jobs shed", m.id, sheds, len(rep.Results))
		}
		if sheds > 0 && snapOK {
			if q, _ := nm.quotaAt(snap.Revision); q.doc.Excess() != "drop" {
				s.violate(InvReply, "m%d shed under on_excess %s", m.id, q.doc.Excess())
			}
		}
		return
	}
	if b.committed && !b.hidden {
		s.violate(InvReply, "m%d answered %s, but its write committed and was reported ok", m.id, m.err.Code)
	}
	n := int64(len(b.jobs))
	switch b.kind {
	case kindEvent:
		n = int64(len(b.triggers))
	case kindReplay:
		n = int64(len(b.replayIDs))
	}
	q, _ := nm.quotaAt(snap.Revision)
	switch m.err.Reason {
	case api.ReasonQueueFull:
		var pending, cap int64
		_, msg, _ := strings.Cut(m.err.Message, " is full: ")
		if _, err := fmt.Sscanf(msg, "%d pending >= max_pending %d", &pending, &cap); err != nil {
			s.violate(InvReply, "m%d: QUEUE_FULL message %q", m.id, m.err.Message)
			return
		}
		switch {
		case q.doc.MaxPending == nil || *q.doc.MaxPending != cap:
			s.violate(InvReply, "m%d refused for max_pending %d, quota rev %d says %v", m.id, cap, snap.Revision, q.doc.MaxPending)
		case pending+n <= cap:
			s.violate(InvReply, "m%d refused: %d pending + %d jobs fit max_pending %d", m.id, pending, n, cap)
		case q.doc.Excess() != "reject":
			s.violate(InvReply, "m%d rejected under on_excess %s", m.id, q.doc.Excess())
		}
	case api.ReasonRateLimited:
		if q.doc.EnqueueRate == nil || q.doc.Excess() != "reject" {
			s.violate(InvReply, "m%d rate-limited under quota rev %d (%s)", m.id, snap.Revision, q.raw)
		}
	case api.ReasonQuotaUnreadable:
		if snap.Err == nil {
			s.violate(InvIsolation, "m%d refused QUOTA_UNREADABLE though %s runs", m.id, st.ns)
		}
	default:
		if m.err.Code == api.CodeUnavailable && !st.storeErr && (snap.Err == nil || snap.Err.Code != api.CodeUnavailable) {
			s.violate(InvReply, "m%d answered UNAVAILABLE without a store error", m.id)
		}
	}
}

func (s *Sim) checkClaimReply(st *stepCtx, m *msgRec) {
	if m.err != nil {
		if m.err.Code != api.CodeUnavailable || !st.storeErr {
			s.violate(InvReply, "claim m%d answered %s without a store error", m.id, m.err.Code)
		}
		return
	}
	rep, ok := m.reply.(api.ClaimReply)
	if !ok {
		s.violate(InvReply, "m%d answered %T", m.id, m.reply)
		return
	}
	req := m.body.(*api.ClaimRequest)
	nm := s.m.ns[st.ns]
	for _, j := range rep.Jobs {
		mj := nm.jobs[j.ID]
		if mj == nil {
			s.violate(InvLost, "m%d handed out %s, which the store does not hold", m.id, s.alias(j.ID))
			continue
		}
		if mj.shed {
			s.violate(InvShedClaimed, "m%d handed out shed job %s", m.id, s.alias(j.ID))
		}
		c := st.claimed[j.ID]
		switch {
		case c == nil:
			s.violate(InvReply, "m%d handed out %s, which no committed claim of this step took", m.id, s.alias(j.ID))
		case c.w.hidden:
			s.violate(InvReply, "m%d handed out %s from a claim that reported an error", m.id, s.alias(j.ID))
		case c.worker != req.Worker:
			s.violate(InvReply, "m%d handed %s to %s, claimed for %s", m.id, s.alias(j.ID), req.Worker, c.worker)
		}
		if c != nil {
			c.delivered++
			if c.delivered > 1 {
				s.violate(InvReply, "%s handed out twice in one step", s.alias(j.ID))
			}
		}
		if j.Attempt != mj.attempt {
			s.violate(InvAttempt, "m%d handed out %s at attempt %d, the store says %d", m.id, s.alias(j.ID), j.Attempt, mj.attempt)
		}
	}
}

func (s *Sim) checkUpdateReply(st *stepCtx, m *msgRec) {
	// The update this message caused, if any: an ack completes, a nack
	// fails with its error (a lease expiry of the job is not this message's),
	// under the attempt it names, when it names one (another call's update
	// of the job's next attempt is not this message's).
	var (
		id      string
		attempt int64
	)
	mine := func(u store.JobUpdate) bool { return u.Kind == store.UpdateComplete }
	switch b := m.body.(type) {
	case *api.AckRequest:
		id, attempt = b.ID, b.Attempt
	case *api.NackRequest:
		id, attempt = b.ID, b.Attempt
		mine = func(u store.JobUpdate) bool {
			return (u.Kind == store.UpdateRetry || u.Kind == store.UpdateDead) && u.Error == b.Error
		}
		if b.Release {
			mine = func(u store.JobUpdate) bool { return u.Kind == store.UpdateRelease }
		}
	}
	var done *updRec
	for _, u := range st.updated[id] {
		if u.applied && mine(u.u) && (attempt == 0 || u.u.Attempt == attempt) {
			done = u
		}
	}
	if m.err == nil {
		want := store.UpdateComplete
		var runAt *time.Time
		if r, ok := m.reply.(api.NackReply); ok {
			want, runAt = store.UpdateDead, r.RunAt
			if r.Status == api.StatusPending {
				want = store.UpdateRetry
				if b, _ := m.body.(*api.NackRequest); b != nil && b.Release {
					want = store.UpdateRelease
				}
			}
		}
		switch {
		case done == nil || done.u.Kind != want:
			s.violate(InvReply, "m%d (%s) answered ok without writing it", m.id, m.op)
		case done.w.hidden:
			s.violate(InvReply, "m%d answered ok, but its write reported an error", m.id)
		case want == store.UpdateRetry && (runAt == nil || !runAt.Equal(done.u.RunAt)):
			s.violate(InvReply, "m%d answered run_at %v, the store wrote %v", m.id, runAt, done.u.RunAt)
		}
		return
	}
	if done != nil && !done.w.hidden && st.namedOnce(id) && !st.ackedOut(id, m) {
		s.violate(InvReply, "m%d answered %s, but its update committed and was reported ok", m.id, m.err.Code)
	}
	// The job as the step that took the call saw it: this one, or, for an
	// ack written beside the steps, the one that took it.
	b, at, once, owned := st.before[id], st.now, st.namedOnce(id), s.stepOwns(st)
	if !slices.Contains(st.msgs, m) && m.taken != nil {
		b, at, once, owned = m.taken, m.takenAt, m.takenOnce, m.takenOwned && owned
	}
	switch m.err.Reason {
	case api.ReasonLeaseLost, api.ReasonUnknownJob:
		if m.err.Reason == api.ReasonUnknownJob && b != nil {
			s.violate(InvReply, "m%d: UNKNOWN_JOB for %s, which exists", m.id, s.alias(id))
		}
		// Another ack of the job being written refuses this one.
		if !st.storeErr && owned && once && !st.sa.ackOut(id, m) && !st.ackedOut(id, m) && b != nil && b.status == api.StatusRunning && b.attempt == m.attempt && b.leaseUntil.After(at) {
			s.violate(InvReply, "m%d: %s refused for %s, whose lease (attempt %d) ran to +%s when it was taken at +%s", m.id, m.err.Reason, s.alias(id), b.attempt, fmtDur(b.leaseUntil.Sub(epoch)), fmtDur(at.Sub(epoch)))
		}
	default:
		if !st.storeErr {
			s.violate(InvReply, "m%d answered %s without a store error", m.id, m.err.Code)
		}
	}
}

func (s *Sim) checkHeartbeatReply(st *stepCtx, m *msgRec) {
	if m.err != nil {
		if !st.storeErr {
			s.violate(InvReply, "m%d answered %s without a store error", m.id, m.err.Code)
		}
		return
	}
	rep, ok := m.reply.(api.HeartbeatReply)
	if !ok {
		s.violate(InvReply, "m%d answered %T", m.id, m.reply)
		return
	}
	for _, id := range rep.Extended {
		var ok bool
		for _, u := range st.updated[id] {
			ok = ok || (u.applied && !u.w.hidden && u.u.Kind == store.UpdateExtend)
		}
		if !ok {
			s.violate(InvReply, "m%d says %s was extended, but no extension committed", m.id, s.alias(id))
		}
	}
}

// reconcile compares the whole store with the model: every job the model
// knows is there as the model says, and nothing else is.
func (s *Sim) reconcile(why string) {
	s.lastRecon = s.now
	if s.halted {
		return
	}
	total := 0
	for _, ns := range s.m.order {
		nm := s.m.ns[ns]
		jobs, err := s.db.JobList(context.Background(), store.JobListParams{Namespace: ns})
		if err != nil {
			s.violate(InvStore, "list %s: %v", ns, err)
			return
		}
		seen := make(map[string]bool, len(jobs))
		for i := range jobs {
			sj := &jobs[i]
			seen[sj.ID] = true
			mj := nm.jobs[sj.ID]
			if mj == nil {
				s.violate(InvBatchWhole, "%s holds %s (%s), which no committed write made", ns, s.alias(sj.ID), sj.Status)
				continue
			}
			if d := s.diffJob(mj, sj); d != "" {
				s.violate(InvStore, "%s: %s differs from the model: %s", ns, s.alias(sj.ID), d)
			}
		}
		for _, mj := range nm.order {
			if !seen[mj.id] {
				s.violate(InvLost, "%s: job %s (%s) is gone", ns, s.alias(mj.id), mj.status)
			}
		}
		s.verifyCounts(ns, why)
		total += len(jobs)
	}
	s.logf("reconcile %s: %d jobs agree", why, total)
}

// diffJob says how a stored job differs from the model ("" when it does
// not).
func (s *Sim) diffJob(mj *mjob, sj *store.Job) string {
	var d []string
	if mj.status != sj.Status {
		d = append(d, fmt.Sprintf("status %s, model %s", sj.Status, mj.status))
	}
	if mj.attempt != sj.Attempt {
		d = append(d, fmt.Sprintf("attempt %d, model %d", sj.Attempt, mj.attempt))
	}
	if mj.shed != sj.Shed {
		d = append(d, fmt.Sprintf("shed %v, model %v", sj.Shed, mj.shed))
	}
	if mj.queue != sj.Queue || mj.task != sj.Task {
		d = append(d, fmt.Sprintf("%s/%s, model %s/%s", sj.Queue, sj.Task, mj.queue, mj.task))
	}
	if mj.payload != string(sj.Payload) {
		d = append(d, fmt.Sprintf("payload %s, model %s", sj.Payload, mj.payload))
	}
	if mj.uniqueKey != sj.UniqueKey || mj.debounceKey != sj.DebounceKey {
		d = append(d, fmt.Sprintf("keys %q/%q, model %q/%q", sj.UniqueKey, sj.DebounceKey, mj.uniqueKey, mj.debounceKey))
	}
	if mj.status == api.StatusPending && !mj.runAt.Equal(sj.RunAt) {
		d = append(d, fmt.Sprintf("run_at +%s, model +%s", fmtDur(sj.RunAt.Sub(epoch)), fmtDur(mj.runAt.Sub(epoch))))
	}
	if mj.status == api.StatusRunning && !mj.leaseUntil.Equal(sj.LeaseUntil) {
		d = append(d, fmt.Sprintf("lease +%s, model +%s", fmtDur(sj.LeaseUntil.Sub(epoch)), fmtDur(mj.leaseUntil.Sub(epoch))))
	}
	if mj.shed && (!strings.HasPrefix(sj.Error, "quota: ") || !bytes.Equal(sj.DeadMeta, []byte(`{"shed":"quota"}`))) {
		d = append(d, fmt.Sprintf("shed job with error %q and dead_meta %s", sj.Error, sj.DeadMeta))
	}
	if mj.status == api.StatusDead && mj.noRetry != sj.NoRetry {
		d = append(d, fmt.Sprintf("no_retry %v, model %v", sj.NoRetry, mj.noRetry))
	}
	return strings.Join(d, "; ")
}

// checkAnswered: every call a step took and held is answered by the end,
// unless a crash lost its actor (its client timed out) or its hold
// (Pace.MaxHold) has not run out yet: clients call until the end.
func (s *Sim) checkAnswered() {
	if s.halted {
		return
	}
	for _, m := range s.held {
		if !m.replied && !m.decidedBy.lost && s.now.Sub(m.decidedAt) > s.cfg.Pace.MaxHold {
			s.violate(InvAnswered, "m%d (%s) taken by %s#%d and never answered", m.id, m.op, m.ns, m.decidedBy.inc)
			return
		}
	}
}
