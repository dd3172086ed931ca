package actors

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/flexiq/flexiq/admission"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/dispatch"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// Core is a namespace actor's state machine. It does no IO and reads no
// clock: the loop around it (actor.go) reads the store, passes the time in,
// writes what the core planned and tells it how the write went, in the
// manner of etcd-io/raft's RawNode. Everything it knows can be rebuilt from
// the store (Load), so an actor can stop, restart or move at any time.
//
// The core is the only writer of its namespace's counts: pending (delayed
// jobs included) and running per namespace, queue and task. They are loaded
// once and kept exact in memory, so admission never counts the backlog.
type Core struct {
	ns   string
	rng  *rand.Rand
	ids  *IDGen
	snap cachebust.Snapshot

	loaded bool
	// loadFailed: the last Load could not be made (LoadFailed). Until one
	// is, the running jobs the store holds are unknown here, and so are
	// their leases.
	loadFailed bool
	pending    int64
	bucket     admission.Bucket
	counts     dispatch.Counts
	running    map[string]*runInfo
	// loads counts Load calls: a plan of acks written beside later steps
	// applies to the counts only if they were not read again meanwhile.
	loads uint64

	// leaseCheck is when the next lease may run out: no running job's
	// lease ends before it (heartbeats only move leases later).
	leaseCheck time.Time

	waiters []*ClaimCall
	// nextWake is the earliest known run_at of a job that is not due yet;
	// zero when none is known.
	nextWake time.Time
	// promoteAt is the earliest run_at of this namespace's delayed jobs,
	// so claims can skip looking for due ones before it; promoteKnown is
	// false until the loop has read it from the store (after Load, and
	// after each claim that promoted).
	promoteAt    time.Time
	promoteKnown bool
	// heads holds, per queue, a place in dispatch order no available job
	// of the queue sorts before (store.JobClaimManyParams.Head): a claim
	// that took the queue's head moves it past what it took, and only an
	// enqueue can put a job before it, which moves it back. Anything else
	// that makes a job available (a claim's promotion of due delayed
	// jobs, a release, a retry, a replay, a coalesced debounce), a failed
	// write or a reload forgets it.
	heads map[string]store.JobPos
	// dirty says something may have made a parked claim satisfiable.
	dirty      bool
	lastActive time.Time
	// pace holds the client calls' quota refusals past their burst
	// (pace.go).
	pace pacer
}

// runInfo is what the core keeps of a running job: enough to free its
// slot, apply the nack rule and expire its lease without a read.
type runInfo struct {
	queue, task string
	attempt     int64
	// ownMax is the job's own max_attempts (0: its queue's or the
	// default, resolved when an attempt fails, under the settings then).
	ownMax     int64
	leaseUntil time.Time
	// acking: its completion is being written beside later steps
	// (SplitAcks); until AcksDone no other call may touch it.
	acking bool
}

// NewCore returns the core of namespace ns. rng drives job ids and backoff
// jitter; a simulation passes a seeded one.
func NewCore(ns string, rng *rand.Rand) *Core {
	return &Core{ns: ns, rng: rng, ids: NewIDGen(rng), running: map[string]*runInfo{}}
}

// Namespace is the core's namespace.
func (c *Core) Namespace() string { return c.ns }

// SetSnapshot installs the quota and configuration to decide under.
func (c *Core) SetSnapshot(s cachebust.Snapshot) {
	if s.Revision != c.snap.Revision || len(s.Queues) != len(c.snap.Queues) || len(s.Tasks) != len(c.snap.Tasks) {
		c.dirty = true // caps may have been raised: parked claims try again
	}
	c.snap = s
}

// Snapshot is the quota and configuration in force.
func (c *Core) Snapshot() cachebust.Snapshot { return c.snap }

// Loaded reports whether the counts are known; when not, the loop must
// Load before anything else.
func (c *Core) Loaded() bool { return c.loaded }

// Load rebuilds the counts from the store's view: counts by status and the
// running jobs.
func (c *Core) Load(counts store.Counts, running []store.Job, now time.Time) {
	c.loads++
	c.loadFailed = false
	c.pending = counts.Pending
	c.counts = dispatch.Counts{}
	c.running = make(map[string]*runInfo, len(running))
	c.leaseCheck = time.Time{}
	for _, j := range running {
		c.running[j.ID] = &runInfo{
			queue: j.Queue, task: j.Task, attempt: j.Attempt,
			ownMax:     j.MaxAttempts,
			leaseUntil: j.LeaseUntil,
		}
		c.counts.Add(j.Queue, j.Task, 1)
		c.watchLease(j.LeaseUntil)
	}
	c.loaded = true
	c.heads = nil
	c.dirty = true
	c.nextWake = time.Time{}
	c.promoteKnown = false
	if c.lastActive.IsZero() {
		c.lastActive = now
	}
}

// LoadFailed records that the counts could not be read: the core stays
// Busy, so that its actor stays up and tries again, rather than leave the
// leases of running jobs nobody else watches to run out unnoticed.
func (c *Core) LoadFailed() { c.loadFailed = true }

// LoadFailing reports whether the last Load could not be made.
func (c *Core) LoadFailing() bool { return c.loadFailed }

// Unload forgets the counts: after a store error the core cannot know what
// landed, so it reloads before its next decision.
func (c *Core) Unload() {
	c.loaded = false
	c.heads = nil
}

// lowerHead moves queue's head back to pos if pos sorts before it.
func (c *Core) lowerHead(queue string, pos store.JobPos) {
	if h, ok := c.heads[queue]; ok && pos.Before(h) {
		c.heads[queue] = pos
	}
}

// Pending and Running report the counts.
func (c *Core) Pending() int64 { return c.pending }

// Running reports the namespace's running jobs.
func (c *Core) Running() int64 { return c.counts.Running }

// Touch records activity at now (for passivation).
func (c *Core) Touch(now time.Time) { c.lastActive = now }

// limits are the dispatch caps in force.
func (c *Core) limits() dispatch.Limits {
	l := dispatch.Limits{MaxRunning: c.snap.Quota.MaxRunning}
	for q, s := range c.snap.Queues {
		if s.MaxConcurrent != nil {
			if l.Queue == nil {
				l.Queue = map[string]int64{}
			}
			l.Queue[q] = *s.MaxConcurrent
		}
	}
	for t, s := range c.snap.Tasks {
		if s.MaxConcurrent != nil {
			if l.Task == nil {
				l.Task = map[string]int64{}
			}
			l.Task[t] = *s.MaxConcurrent
		}
	}
	return l
}

// maxAttempts resolves a job's attempt limit: its own, else its queue's,
// else the default.
func (c *Core) maxAttempts(own int64, queue string) int64 {
	if own > 0 {
		return own
	}
	if s, ok := c.snap.Queues[queue]; ok && s.MaxAttempts != nil {
		return *s.MaxAttempts
	}
	return api.DefaultMaxAttempts
}

// ---------------------------------------------------------------------------
// Enqueue

// EnqueueCall is one call's share: new jobs, or dead letters to replay.
type EnqueueCall struct {
	Msg       *Message
	Jobs      []store.NewJob
	ReplayIDs []string
	AutoRetry bool
	// Queue is the queue of the call's first job, for the depth message.
	Queue string
}

func (e *EnqueueCall) n() int64 {
	if len(e.ReplayIDs) > 0 {
		return int64(len(e.ReplayIDs))
	}
	return int64(len(e.Jobs))
}

// keyed reports whether the call's outcome depends on what is stored
// (repeated ids, unique or debounce keys, replays): only then can fewer
// jobs land than the call holds.
func (e *EnqueueCall) keyed() bool {
	if len(e.ReplayIDs) > 0 {
		return true
	}
	for i := range e.Jobs {
		if e.Jobs[i].Keyed() {
			return true
		}
	}
	return false
}

// NewEnqueueCall turns a validated request into a call: ids generated where
// the client gave none, run_at resolved from run_at, delay_ms or the
// debounce window (api.Job.ResolveRunAt). A time out of bounds (docs/protocol.md)
// refuses the whole call, INVALID_ARGUMENT naming the field: the bounds of
// delay_ms and window_ms depend on now, which only the actor knows, so
// they are checked here rather than where the request is decoded.
func (c *Core) NewEnqueueCall(m *Message, jobs []api.Job, now time.Time) (*EnqueueCall, *api.Error) {
	call := &EnqueueCall{Msg: m, Jobs: make([]store.NewJob, len(jobs))}
	for i := range jobs {
		j := &jobs[i]
		runAt, err := j.ResolveRunAt(i, now)
		if err != nil {
			return nil, api.FromError(err)
		}
		nj := store.NewJob{
			ID: j.ID, Queue: j.Queue, Task: j.Task, Payload: j.Payload,
			Priority: j.Priority, UniqueKey: j.UniqueKey, RunAt: runAt,
		}
		if nj.ID == "" {
			nj.ID, nj.Generated = c.ids.New(now), true
		}
		if len(nj.Payload) == 0 {
			nj.Payload = nil
		}
		if j.MaxAttempts != nil {
			nj.MaxAttempts = *j.MaxAttempts
		}
		if j.Debounce != nil {
			nj.DebounceKey = j.Debounce.Key
		}
		call.Jobs[i] = nj
	}
	if len(jobs) > 0 {
		call.Queue = jobs[0].Queue
	}
	return call, nil
}

// EventCall builds the call an event makes: one job per matching trigger,
// in trigger creation order, each carrying the payload. It returns nil when
// no trigger matches.
func (c *Core) EventCall(m *Message, ev *api.EventRequest, now time.Time) *EnqueueCall {
	var jobs []api.Job
	for _, tr := range c.snap.Triggers {
		if tr.Event == ev.Name {
			jobs = append(jobs, api.Job{Queue: tr.Queue, Task: tr.Task, Payload: ev.Payload})
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	// Trigger templates carry no time, so nothing can be out of bounds.
	call, _ := c.NewEnqueueCall(m, jobs, now)
	return call
}

// Refusal is a call refused without a write.
type Refusal struct {
	Call *EnqueueCall
	Err  *api.Error
}

// EnqueuePlan is a group of calls to write in one transaction, and what
// was decided without writing.
type EnqueuePlan struct {
	Params  store.JobEnqueueManyParams
	Calls   []*EnqueueCall // Params.Calls[i] belongs to Calls[i]
	Refused []Refusal
	// Rest are calls not decided yet: plan them after this group lands.
	Rest []*EnqueueCall

	undoPending int64
}

// PlanEnqueue decides calls in order under the quota in force.
//
// Admission needs the pending count before each call, and a call with a
// repeated id, a unique or debounce key or a replay may land fewer jobs
// than it holds. The plan counts every admitted job as landing, an upper
// bound: a call admitted under it is admitted under the truth too, so only
// a depth refusal that follows such a call could be wrong. There the group
// is cut, written, and the rest planned on the exact count; the result is
// the same as deciding each call alone, in order.
func (c *Core) PlanEnqueue(calls []*EnqueueCall, now time.Time) EnqueuePlan {
	p := EnqueuePlan{
		Params:      store.JobEnqueueManyParams{Namespace: c.ns, Now: now},
		undoPending: c.pending,
	}
	estimate := c.pending
	uncertain := false
	replayed := map[string]bool{}
	for i, call := range calls {
		// A replay naming a dead letter an earlier call of this group
		// replays is decided after that call lands, on what it left: it
		// may no longer be a dead letter.
		overlap := false
		for _, id := range call.ReplayIDs {
			overlap = overlap || replayed[id]
		}
		if overlap {
			p.Rest = calls[i:]
			break
		}
		if c.snap.Err != nil {
			p.Refused = append(p.Refused, Refusal{call, c.snap.Err})
			continue
		}
		doc := c.snap.Quota
		depthRefused := doc.MaxPending != nil && estimate+call.n() > *doc.MaxPending
		if depthRefused && uncertain {
			p.Rest = calls[i:]
			break
		}
		d := admission.Decide(doc, &c.bucket, admission.Call{
			Namespace: c.ns, Queue: call.Queue, N: call.n(), Pending: estimate,
		}, now)
		switch d.Verdict {
		case admission.Reject:
			p.Refused = append(p.Refused, Refusal{call, d.Err})
			continue
		case admission.Shed:
			p.Params.Calls = append(p.Params.Calls, store.EnqueueCall{
				Jobs: call.Jobs, ReplayIDs: call.ReplayIDs, AutoRetry: call.AutoRetry,
				ShedError: admission.ShedError(d.Err),
			})
		case admission.Admit:
			p.Params.Calls = append(p.Params.Calls, store.EnqueueCall{
				Jobs: call.Jobs, ReplayIDs: call.ReplayIDs, AutoRetry: call.AutoRetry,
			})
			estimate += call.n()
			uncertain = uncertain || call.keyed()
		}
		p.Calls = append(p.Calls, call)
		for _, id := range call.ReplayIDs {
			replayed[id] = true
		}
	}
	return p
}

// EnqueueDone applies a written plan: the exact pending count from what
// landed. On a failed write it unloads, since the write may have happened
// (a store can fail after committing), and keeps the tokens spent: a rate is
// a ceiling, and jobs that landed must have paid for theirs, so a retry of
// a failed call may be refused for rate.
func (c *Core) EnqueueDone(p *EnqueuePlan, results [][]api.EnqueueResult, err error, now time.Time) {
	if err != nil {
		c.pending = p.undoPending
		c.Unload()
		return
	}
	c.pending = p.undoPending
	for i, res := range results {
		for k, r := range res {
			switch r.Outcome {
			case api.OutcomeEnqueued:
				c.pending++
				c.dirty = true
				if call := &p.Params.Calls[i]; k < len(call.Jobs) {
					// A new job's seq is above every stored one: before
					// its place, only its priority and run_at can put it.
					j := &call.Jobs[k]
					c.lowerHead(j.Queue, store.JobPos{Priority: j.Priority, RunAt: j.RunAt.Truncate(time.Microsecond)})
				} else {
					c.heads = nil // a replayed dead letter, back at its old place
				}
			case api.OutcomeCoalesced:
				c.heads = nil // a pending job took a new run_at
			}
		}
	}
	for i, call := range p.Calls {
		if p.Params.Calls[i].ShedError != "" {
			continue
		}
		for k := range call.Jobs {
			if k < len(results[i]) && results[i][k].Outcome != api.OutcomeShed {
				if at := call.Jobs[k].RunAt; at.After(now) {
					c.wakeAt(at)
				}
			}
		}
	}
}

// wakeAt records a delayed job due at t: parked claims wake then, and
// claims from then on look for due delayed jobs.
func (c *Core) wakeAt(t time.Time) {
	if c.nextWake.IsZero() || t.Before(c.nextWake) {
		c.nextWake = t
	}
	if c.promoteAt.IsZero() || t.Before(c.promoteAt) {
		c.promoteAt = t
	}
}

// NeedsPromoteTime reports whether the loop must read the namespace's
// earliest delayed run_at from the store (SetPromoteTime).
func (c *Core) NeedsPromoteTime() bool { return !c.promoteKnown }

// SetPromoteTime installs the earliest delayed run_at read from the store
// (ok false: none).
func (c *Core) SetPromoteTime(t time.Time, ok bool) {
	c.promoteKnown = true
	if !ok {
		c.promoteAt = time.Time{}
		return
	}
	c.promoteAt = t
}

// ---------------------------------------------------------------------------
// Claims

// ClaimCall is one worker's claim.
type ClaimCall struct {
	Msg      *Message
	Req      api.ClaimRequest
	Deadline time.Time // when a long poll gives up
	parked   bool      // it has waited before
}

// ClaimPlan is a group of claims to run in one transaction.
type ClaimPlan struct {
	Params store.JobClaimManyParams
	Calls  []*ClaimCall
	// Empty are claims that can get nothing now (namespace stopped or at
	// its cap, or every queue at its cap).
	Empty []*ClaimCall
}

// PlanClaims prepares a group of claims: the gate of docs/quotas.md runs inside
// the store's scan through Params.Allow, on a scratch copy of the counts.
func (c *Core) PlanClaims(calls []*ClaimCall, now time.Time) ClaimPlan {
	p := ClaimPlan{Params: store.JobClaimManyParams{Namespace: c.ns, Now: now}}
	lim := c.limits()
	if c.snap.Err != nil || lim.NamespaceFull(&c.counts) || c.pending == 0 {
		// Fail closed, at the cap, or nothing waiting: no store round trip.
		p.Empty = calls
		return p
	}
	for _, call := range calls {
		var queues []string
		for _, q := range call.Req.Queues {
			if !lim.QueueFull(&c.counts, q) {
				queues = append(queues, q)
			}
		}
		if len(queues) == 0 {
			p.Empty = append(p.Empty, call)
			continue
		}
		lease := time.Duration(call.Req.LeaseMS) * time.Millisecond
		p.Params.Claims = append(p.Params.Claims, store.ClaimSpec{
			Queues: queues, Max: call.Req.Max, LeaseUntil: now.Add(lease), Worker: call.Req.Worker,
		})
		p.Calls = append(p.Calls, call)
	}
	if len(p.Calls) == 0 {
		return p
	}
	p.Params.ExcludeTasks = lim.FullTasks(&c.counts)
	// Skip the search for due delayed jobs until the earliest is due; once
	// a claim has promoted, the next earliest must be read again.
	p.Params.NoPromote = c.promoteKnown && (c.promoteAt.IsZero() || now.Before(c.promoteAt))
	if !p.Params.NoPromote {
		c.promoteKnown = false
	}
	// Without a cap this group could meet, the store need not ask per job
	// (nil Allow): it may hand out the heads of the queues in one go.
	var total int64
	var queues []string
	for _, spec := range p.Params.Claims {
		total += int64(max(spec.Max, 0))
		for _, q := range spec.Queues {
			if !slices.Contains(queues, q) {
				queues = append(queues, q)
			}
		}
	}
	if !lim.Binds(&c.counts, queues, total) {
		// Promoting could put due delayed jobs before the head.
		if q, ok := p.Params.OneQueueUngated(); ok && p.Params.NoPromote && len(p.Params.ExcludeTasks) == 0 {
			if h, known := c.heads[q]; known {
				p.Params.Head = &h
			}
		}
		return p
	}
	scratch := dispatch.Counts{Running: c.counts.Running}
	scratch.Queue = make(map[string]int64, len(c.counts.Queue))
	for k, v := range c.counts.Queue {
		scratch.Queue[k] = v
	}
	scratch.Task = make(map[string]int64, len(c.counts.Task))
	for k, v := range c.counts.Task {
		scratch.Task[k] = v
	}
	p.Params.Allow = func(queue, task string) store.ClaimVerdict {
		switch {
		case lim.NamespaceFull(&scratch):
			return store.ClaimStop
		case lim.QueueFull(&scratch, queue):
			return store.ClaimSkipQueue
		case !lim.Allow(&scratch, queue, task):
			return store.ClaimSkipTask
		}
		scratch.Add(queue, task, 1)
		return store.ClaimTake
	}
	return p
}

// ClaimDone records the jobs handed out. On a failed write it unloads.
func (c *Core) ClaimDone(p *ClaimPlan, results [][]store.Job, err error) {
	if err != nil {
		c.Unload()
		return
	}
	if !p.Params.NoPromote {
		// Due delayed jobs of the group's queues became available, at
		// their places.
		for _, spec := range p.Params.Claims {
			for _, q := range spec.Queues {
				delete(c.heads, q)
			}
		}
	}
	if q, ok := p.Params.OneQueueUngated(); ok && len(p.Params.ExcludeTasks) == 0 {
		// It took the queue's first available jobs, due delayed ones it
		// promoted included: what is left sorts after the last.
		for _, jobs := range results {
			for i := range jobs {
				pos := store.PosOf(&jobs[i])
				if h, known := c.heads[q]; !known || h.Before(pos) {
					if c.heads == nil {
						c.heads = map[string]store.JobPos{}
					}
					c.heads[q] = pos
				}
			}
		}
	}
	for _, jobs := range results {
		for _, j := range jobs {
			c.running[j.ID] = &runInfo{
				queue: j.Queue, task: j.Task, attempt: j.Attempt,
				ownMax: j.MaxAttempts, leaseUntil: j.LeaseUntil,
			}
			c.counts.Add(j.Queue, j.Task, 1)
			c.pending--
			c.watchLease(j.LeaseUntil)
		}
	}
}

func (c *Core) watchLease(until time.Time) {
	if c.leaseCheck.IsZero() || until.Before(c.leaseCheck) {
		c.leaseCheck = until
	}
}

// leaseDue reports whether a running job's lease may have run out by now.
func (c *Core) leaseDue(now time.Time) bool {
	return !c.leaseCheck.IsZero() && !now.Before(c.leaseCheck)
}

// Park makes claims wait for work until their deadline; next is the
// earliest run_at of their queues' delayed jobs, if any.
func (c *Core) Park(calls []*ClaimCall, next time.Time, ok bool) {
	c.waiters = append(c.waiters, calls...)
	if ok {
		c.wakeAt(next)
	}
}

// Waiters takes the parked claims worth trying again at now: all of them
// when something changed since they parked, none otherwise. Expired ones,
// and those whose caller is gone (Message.Gone), come back in expired, to
// be answered with no jobs.
func (c *Core) Waiters(now time.Time) (retry, expired []*ClaimCall) {
	if !c.nextWake.IsZero() && !now.Before(c.nextWake) {
		c.dirty = true
		c.nextWake = time.Time{}
	}
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		switch {
		case !now.Before(w.Deadline) || w.Msg.cancelled():
			expired = append(expired, w)
		case c.dirty:
			// Whether its caller still listens is asked only now, as it
			// may be given jobs.
			if w.Msg.Gone() {
				expired = append(expired, w)
			} else {
				retry = append(retry, w)
			}
		default:
			keep = append(keep, w)
		}
	}
	c.waiters = keep
	c.dirty = false
	return retry, expired
}

// Poll marks parked claims for another try on the next step (a periodic
// safety net for work that appeared without this actor seeing it).
func (c *Core) Poll() { c.dirty = true }

// DropWaiters takes every parked claim (the actor is stopping).
func (c *Core) DropWaiters() []*ClaimCall {
	w := c.waiters
	c.waiters = nil
	return w
}

// ---------------------------------------------------------------------------
// Acks, nacks, heartbeats and lease expiry

// UpdateCall is one ack, nack or heartbeat.
type UpdateCall struct {
	Msg *Message
}

// updateEntry ties a store update to the call (or lease expiry) behind it.
type updateEntry struct {
	call   *UpdateCall // nil for a lease expiry
	id     string
	info   *runInfo
	kind   store.UpdateKind
	runAt  time.Time
	expire bool
}

// UpdatePlan is a group of updates to write in one transaction.
type UpdatePlan struct {
	Params  store.JobUpdateManyParams
	entries []updateEntry
	// Unknown are acks and nacks of jobs this namespace is not running:
	// the loop reads each to answer UNKNOWN_JOB or LEASE_LOST.
	Unknown []*UpdateCall
	// LeaseLost are acks and nacks whose attempt does not match.
	LeaseLost []*UpdateCall
	// Heartbeats are answered from the plan: the ids extended.
	heartbeats []*UpdateCall
	extended   map[*UpdateCall][]string
	// core and loads: the counts a plan of SplitAcks was decided on.
	core  *Core
	loads uint64
}

// PlanUpdates decides acks, nacks and heartbeats in order, and expires the
// leases that ran out by now.
func (c *Core) PlanUpdates(calls []*UpdateCall, now time.Time) UpdatePlan {
	p := UpdatePlan{Params: store.JobUpdateManyParams{Namespace: c.ns, Now: now}}
	// finishing tracks jobs an earlier entry of this group already ends,
	// so a second ack of the same job is a lost lease, not a second write.
	finishing := map[string]bool{}
	lookup := func(id string, attempt int64, call *UpdateCall) *runInfo {
		ri := c.running[id]
		if ri == nil || finishing[id] || ri.acking {
			p.Unknown = append(p.Unknown, call)
			return nil
		}
		if attempt != 0 && attempt != ri.attempt {
			p.LeaseLost = append(p.LeaseLost, call)
			return nil
		}
		return ri
	}
	for _, call := range calls {
		switch body := call.Msg.Body.(type) {
		case *api.AckRequest:
			ri := lookup(body.ID, body.Attempt, call)
			if ri == nil {
				continue
			}
			finishing[body.ID] = true
			p.add(updateEntry{call: call, id: body.ID, info: ri, kind: store.UpdateComplete},
				store.JobUpdate{ID: body.ID, Attempt: ri.attempt, Kind: store.UpdateComplete, Result: body.Result})
		case *api.NackRequest:
			ri := lookup(body.ID, body.Attempt, call)
			if ri == nil {
				continue
			}
			finishing[body.ID] = true
			if body.Release {
				// Never started: pending again as before its claim, its
				// attempt given back; due at once.
				p.add(updateEntry{call: call, id: body.ID, info: ri, kind: store.UpdateRelease, runAt: now},
					store.JobUpdate{ID: body.ID, Attempt: ri.attempt, Kind: store.UpdateRelease})
				continue
			}
			retry := body.Retry == nil || *body.Retry
			c.planFailure(&p, call, body.ID, ri, body.Error, retry, now)
		case *api.HeartbeatRequest:
			lease := time.Duration(body.LeaseMS) * time.Millisecond
			if p.extended == nil {
				p.extended = map[*UpdateCall][]string{}
			}
			p.heartbeats = append(p.heartbeats, call)
			for _, id := range body.IDs {
				ri := c.running[id]
				// A lease already run out is not revived: the job
				// expires below and its worker learns it lost it.
				if ri == nil || finishing[id] || ri.acking || !now.Before(ri.leaseUntil) {
					continue
				}
				until := now.Add(lease)
				p.add(updateEntry{call: call, id: id, info: ri, kind: store.UpdateExtend, runAt: until},
					store.JobUpdate{ID: id, Attempt: ri.attempt, Kind: store.UpdateExtend, LeaseUntil: until})
			}
		}
	}
	// Leases that ran out are failed attempts, under the nack rule.
	var expired []string
	if c.leaseDue(now) {
		c.leaseCheck = time.Time{}
		for id, ri := range c.running {
			switch {
			case finishing[id]:
			case ri.acking:
				// Its ack is being written; if that fails the counts are
				// read again and its lease is watched anew.
			case !now.Before(ri.leaseUntil):
				expired = append(expired, id)
			default:
				c.watchLease(ri.leaseUntil)
			}
		}
	}
	sort.Strings(expired) // map order is random; keep the plan reproducible
	for _, id := range expired {
		finishing[id] = true
		c.planFailure(&p, nil, id, c.running[id], "lease expired", true, now)
	}
	return p
}

// SplitAcks moves the completions out of p into a plan of their own, to
// be written beside the steps that follow (Deps.OverlapAcks) while the
// rest of p is written in this one. Their jobs stay running, so every cap
// still counts them, and no later call touches them until AcksDone. A
// completion whose job p also names otherwise (a heartbeat before it)
// stays in p, so that one job's writes keep their order.
func (c *Core) SplitAcks(p *UpdatePlan) UpdatePlan {
	out := UpdatePlan{Params: store.JobUpdateManyParams{Namespace: p.Params.Namespace, Now: p.Params.Now}, core: c, loads: c.loads}
	named := make(map[string]int, len(p.entries))
	for _, e := range p.entries {
		named[e.id]++
	}
	keep, keepU := p.entries[:0], p.Params.Updates[:0]
	for i, e := range p.entries {
		if e.kind == store.UpdateComplete && e.call != nil && named[e.id] == 1 {
			e.info.acking = true
			out.add(e, p.Params.Updates[i])
			continue
		}
		keep, keepU = append(keep, e), append(keepU, p.Params.Updates[i])
	}
	p.entries, p.Params.Updates = keep, keepU
	return out
}

// KeepAcking marks the running jobs p completes (a plan of SplitAcks
// still to be written or answered) as acking again after a Load: their
// writes may land any moment, so nothing else may touch them, and their
// leases do not run out meanwhile. p may be nil.
func (c *Core) KeepAcking(p *UpdatePlan) {
	if p == nil {
		return
	}
	for _, e := range p.entries {
		if ri := c.running[e.id]; ri != nil && ri.attempt == e.info.attempt {
			ri.acking = true
		}
	}
}

// Len is how many job writes the plan holds.
func (p *UpdatePlan) Len() int { return len(p.entries) }

// Merge appends q's writes to p (plans of SplitAcks, of distinct jobs:
// a job being acked is touched by no later plan). The result applies to
// the counts only if both were decided on the same ones.
func (p *UpdatePlan) Merge(q UpdatePlan) {
	if p.core != q.core || p.loads != q.loads {
		p.core = nil
	}
	p.entries = append(p.entries, q.entries...)
	p.Params.Updates = append(p.Params.Updates, q.Params.Updates...)
}

// AcksDone records the written plan of SplitAcks in the counts (its
// calls were answered by AckAnswers). When the counts were read again
// while it was written (a failed write, a new fence, a restart), they may
// or may not include its writes: they are read once more instead.
func (c *Core) AcksDone(p *UpdatePlan, applied []bool, err error) {
	if p.core == c && p.loads == c.loads && c.loaded {
		c.UpdatesDone(p, applied, err) // its answers are given already
		return
	}
	c.Unload()
}

// AckAnswers answers the calls of a written plan of SplitAcks from what
// the store said, which is all they depend on: done, or the lease lost
// (the job was no longer running under that attempt), or the store's
// error.
func (p *UpdatePlan) AckAnswers(applied []bool, err error) {
	for i, e := range p.entries {
		// From the writing goroutine, not the actor's: at once.
		switch {
		case err != nil:
			e.call.Msg.respondNow(nil, StoreError(err))
		case !applied[i]:
			e.call.Msg.respondNow(nil, api.LeaseLost(e.id))
		default:
			e.call.Msg.respondNow(api.Empty{}, nil)
		}
	}
}

// Settled counts how the attempts of a written plan ended, for the
// metrics: what the store applied, by kind. Expired counts the lease
// expiries among Retried and Dead.
type Settled struct {
	Completed, Retried, Dead, Released, Expired int
}

// Settled is what p's write settled, from what the store said: nothing
// when the write failed, and only the updates it applied (a lost lease
// settles nothing). Heartbeats settle nothing.
func (p *UpdatePlan) Settled(applied []bool, err error) Settled {
	var s Settled
	if err != nil {
		return s
	}
	for i, e := range p.entries {
		if i >= len(applied) || !applied[i] {
			continue
		}
		switch e.kind {
		case store.UpdateComplete:
			s.Completed++
		case store.UpdateRetry:
			s.Retried++
		case store.UpdateDead:
			s.Dead++
		case store.UpdateRelease:
			s.Released++
		default:
			continue
		}
		if e.expire {
			s.Expired++
		}
	}
	return s
}

// answer answers every call of p with err.
func (p *UpdatePlan) answer(err *api.Error) {
	for _, e := range p.entries {
		if e.call != nil {
			e.call.Msg.respond(nil, err)
		}
	}
}

func (p *UpdatePlan) add(e updateEntry, u store.JobUpdate) {
	p.entries = append(p.entries, e)
	p.Params.Updates = append(p.Params.Updates, u)
}

// planFailure applies the nack rule: dead at max_attempts or without
// retry, else pending again after the backoff.
func (c *Core) planFailure(p *UpdatePlan, call *UpdateCall, id string, ri *runInfo, msg string, retry bool, now time.Time) {
	e := updateEntry{call: call, id: id, info: ri, expire: call == nil}
	u := store.JobUpdate{ID: id, Attempt: ri.attempt, Error: msg}
	// The limit is resolved now, under the settings in force. While they
	// cannot be read, a job without its own limit is retried rather than
	// buried on a guess: its namespace dispatches nothing until they can,
	// and its next failure is judged under them.
	max := ri.ownMax
	if max <= 0 && c.snap.Err == nil {
		max = c.maxAttempts(0, ri.queue)
	}
	if !retry || (max > 0 && ri.attempt >= max) {
		e.kind, u.Kind, u.NoRetry = store.UpdateDead, store.UpdateDead, !retry
	} else {
		e.kind, u.Kind = store.UpdateRetry, store.UpdateRetry
		e.runAt = now.Add(Backoff(ri.attempt, c.rng))
		u.RunAt = e.runAt
	}
	p.add(e, u)
}

// Backoff is the delay before attempt+1: 1 s × 2^(attempt−1), ±20 %
// jitter, capped at 1 h.
func Backoff(attempt int64, rng *rand.Rand) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := time.Hour
	if attempt <= 13 {
		d = min(time.Second<<(attempt-1), time.Hour)
	}
	jitter := 0.8 + 0.4*rng.Float64()
	return min(time.Duration(float64(d)*jitter), time.Hour)
}

// UpdateReply is an answer the loop sends for an update.
type UpdateReply struct {
	Msg  *Message
	Body any
	Err  *api.Error
}

// UpdatesDone applies a written plan and returns the replies. applied[i]
// false means the store found the job changed under the core: a lost lease
// for the caller, and a reload, since the core's view was wrong.
func (c *Core) UpdatesDone(p *UpdatePlan, applied []bool, err error) []UpdateReply {
	var out []UpdateReply
	if err != nil {
		c.Unload()
		seen := map[*UpdateCall]bool{}
		for _, e := range p.entries {
			if e.call != nil && !seen[e.call] {
				seen[e.call] = true
				out = append(out, UpdateReply{Msg: e.call.Msg, Err: StoreError(err)})
			}
		}
		for _, h := range p.heartbeats {
			if !seen[h] {
				out = append(out, UpdateReply{Msg: h.Msg, Err: StoreError(err)})
			}
		}
		return out
	}
	for i, e := range p.entries {
		if !applied[i] {
			c.Unload()
			if e.call != nil && e.kind != store.UpdateExtend {
				out = append(out, UpdateReply{Msg: e.call.Msg, Err: api.LeaseLost(e.id)})
			}
			continue
		}
		switch e.kind {
		case store.UpdateExtend:
			e.info.leaseUntil = e.runAt
			// A heartbeat with a shorter lease_ms moves the lease earlier.
			c.watchLease(e.runAt)
			p.extended[e.call] = append(p.extended[e.call], e.id)
			continue
		case store.UpdateRetry, store.UpdateRelease:
			c.pending++
			c.wakeAt(e.runAt)
			delete(c.heads, e.info.queue) // available again, at its old place
		}
		delete(c.running, e.id)
		c.counts.Add(e.info.queue, e.info.task, -1)
		c.dirty = true
		if e.call == nil {
			continue
		}
		switch e.kind {
		case store.UpdateComplete:
			out = append(out, UpdateReply{Msg: e.call.Msg, Body: api.Empty{}})
		case store.UpdateRetry:
			at := e.runAt
			out = append(out, UpdateReply{Msg: e.call.Msg, Body: api.NackReply{Status: api.StatusPending, RunAt: &at}})
		case store.UpdateDead:
			out = append(out, UpdateReply{Msg: e.call.Msg, Body: api.NackReply{Status: api.StatusDead}})
		case store.UpdateRelease:
			out = append(out, UpdateReply{Msg: e.call.Msg, Body: api.NackReply{Status: api.StatusPending}})
		}
	}
	for _, h := range p.heartbeats {
		ids := p.extended[h]
		if ids == nil {
			ids = []string{}
		}
		out = append(out, UpdateReply{Msg: h.Msg, Body: api.HeartbeatReply{Extended: ids}})
	}
	return out
}

// UnknownJob is the error of a request naming a job the namespace does not
// have.
func UnknownJob(id string) *api.Error {
	return api.Errorf(api.CodeNotFound, api.ReasonUnknownJob, "job '%s' not found", id)
}

// Moved is the answer of an actor on a node that does not own its
// namespace (a call that raced a move): retryable.
func Moved(ns string) *api.Error {
	return api.Errorf(api.CodeUnavailable, "", "namespace '%s' is moving between nodes; try again", ns)
}

// StoreError is what a caller sees when the store fails.
func StoreError(err error) *api.Error {
	if e, ok := api.AsError(err); ok {
		return e
	}
	if errors.Is(err, store.ErrFenced) {
		return api.Errorf(api.CodeUnavailable, "", "the namespace moved to another node; try again")
	}
	return api.Errorf(api.CodeUnavailable, "", "store unavailable, try again")
}

// ---------------------------------------------------------------------------
// Time

// NextDeadline is when the core next needs a Tick without any message:
// the earliest lease expiry, parked claim deadline, known run_at or held
// refusal's turn.
func (c *Core) NextDeadline() time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	consider(c.leaseCheck)
	consider(c.nextRefusal())
	for _, w := range c.waiters {
		consider(w.Deadline)
	}
	if len(c.waiters) > 0 {
		consider(c.nextWake)
	}
	return next
}

// Busy reports whether the core holds work that needs its actor alive:
// running jobs (whose leases it watches), parked claims or held refusals,
// or counts it could not read (the namespace may have running jobs: a
// node that takes it over wakes its actor once, and an actor that
// passivated before it read them would leave their leases unwatched).
func (c *Core) Busy() bool {
	return c.loadFailed || len(c.running) > 0 || len(c.waiters) > 0 || len(c.pace.held) > 0
}

// Idle reports whether the actor may passivate at now.
//
// A partly spent token bucket keeps the actor alive until it has refilled:
// the bucket lives only here, and a fresh actor starts full, so passivating
// earlier would hand out a free burst.
func (c *Core) Idle(now time.Time, after time.Duration) bool {
	if c.Busy() || now.Sub(c.lastActive) < after {
		return false
	}
	if r := c.snap.Quota.EnqueueRate; r != nil && c.bucket.Tokens(*r, now) < r.Count {
		return false
	}
	return true
}

// QuotaDocument is the quota in force (for tests and usage).
func (c *Core) QuotaDocument() quota.Document { return c.snap.Quota }
