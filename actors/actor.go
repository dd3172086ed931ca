package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/store"
)

// Store is what a namespace actor reads and writes.
type Store interface {
	JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error)
	JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error)
	JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error)
	JobGet(ctx context.Context, namespace, id string) (store.Job, error)
	JobCount(ctx context.Context, namespace string) (store.Counts, error)
	JobListRunning(ctx context.Context, namespace string) ([]store.Job, error)
	JobNextRunAt(ctx context.Context, namespace string, queues []string) (time.Time, bool, error)
}

// Snapshots gives a namespace's quota and configuration (cachebust.Cache).
type Snapshots interface {
	Get(ctx context.Context, ns string, now time.Time) cachebust.Snapshot
}

// Clock tells the time; tests and simulations pass their own.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now is time.Now.
func (SystemClock) Now() time.Time { return time.Now() }

// maxDrain bounds how many messages one step takes: enough for group
// commit to pay off, few enough that one step never holds the store long.
const maxDrain = 512

// pollEvery is the safety net for parked claims: they look again this
// often even if nothing this actor saw could have fed them.
const pollEvery = time.Second

// mailbox is an unbounded queue with a wake-up signal. Unbounded because a
// bus handler must never block; the bus bounds what it accepts.
type mailbox struct {
	mu     sync.Mutex
	msgs   []*Message
	signal chan struct{}
}

func newMailbox() *mailbox { return &mailbox{signal: make(chan struct{}, 1)} }

func (m *mailbox) push(msg *Message) {
	m.mu.Lock()
	m.msgs = append(m.msgs, msg)
	m.mu.Unlock()
	select {
	case m.signal <- struct{}{}:
	default:
	}
}

func (m *mailbox) drain(max int) []*Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := min(len(m.msgs), max)
	out := make([]*Message, n)
	copy(out, m.msgs)
	rest := copy(m.msgs, m.msgs[n:])
	clear(m.msgs[rest:])
	m.msgs = m.msgs[:rest]
	return out
}

func (m *mailbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.msgs)
}

// Actor is one namespace's actor: a mailbox and a Core, stepped by a
// goroutine (Run) or, in a simulation, by the caller (Step).
type Actor struct {
	ns    string
	core  *Core
	mbox  *mailbox
	deps  *Deps
	log   *slog.Logger
	lastP time.Time // last safety poll

	// store is where the current step reads and writes: the step's
	// transaction when the store can run one, else the store itself.
	store Store
	box   outbox
	// fence is what this actor's writes carry on a clustered node: the
	// lease of the namespace's partition at the epoch its counts were
	// loaded under (nil on a single node).
	fence *store.Fence

	// acksOut is closed when the acks being written beside the steps
	// (Deps.OverlapAcks) are done; nil when none are. acksNext are the
	// acks decided meanwhile, written next as one.
	acksOut  chan struct{}
	acksNext *UpdatePlan
	// acksOutPlan is the plan being written (while acksOut is not nil).
	acksOutPlan *UpdatePlan

	// waits is scratch for the due-to-claim times a claim reports.
	waits []time.Duration

	// answers takes each step's answers to the answering goroutine
	// (Deps.AnswerBeside), which closes answered when answers is closed
	// and it has given them all; nil without it.
	answers  chan []heldReply
	answered chan struct{}
}

// acksDone is the message an overlapped ack write posts to its actor's
// mailbox: the plan and what the store said.
type acksDone struct {
	plan    *UpdatePlan
	applied []bool
	err     error
}

// opAcksDone marks an acksDone message; no client sends it.
const opAcksDone Op = -1

// stepper is a store that runs a whole step as one transaction
// (store/sqlite): the step's acks, enqueues and claims share one commit,
// and its answers wait for it.
type stepper interface {
	BeginStep(ctx context.Context) store.StepTx
}

// NewActor builds a namespace's actor.
func NewActor(ns string, core *Core, deps *Deps) *Actor {
	core.SetPace(deps.Pace)
	a := &Actor{ns: ns, core: core, mbox: newMailbox(), deps: deps, log: deps.Log.With("namespace", ns), store: deps.Store}
	if _, stepped := deps.Store.(stepper); deps.AnswerBeside && !stepped {
		a.answers, a.answered = make(chan []heldReply, 16), make(chan struct{})
		go a.answer()
	}
	return a
}

// answer gives the answers of each step handed to it, in order, until
// closeAnswers.
func (a *Actor) answer() {
	defer close(a.answered)
	for held := range a.answers {
		for _, h := range held {
			h.m.answerNow(h.body, h.err)
		}
	}
}

// closeAnswers ends the answering goroutine, once it has given every
// answer handed to it. Only the actor's goroutine calls it, once, as it
// leaves.
func (a *Actor) closeAnswers() {
	if a.answers == nil {
		return
	}
	close(a.answers)
	<-a.answered
}

// handAnswers hands the answers the step collected to the answering
// goroutine, in one hand-off.
func (a *Actor) handAnswers() {
	a.box.collecting = false
	if len(a.box.held) == 0 {
		return
	}
	// The slice goes: the next step collects into a new one.
	a.answers <- a.box.held
	a.box.held = nil
}

// Send queues a message.
func (a *Actor) Send(m *Message) {
	m.box = &a.box
	a.mbox.push(m)
}

// Core exposes the state machine (tests and simulations).
func (a *Actor) Core() *Core { return a.core }

// Pending reports whether messages wait.
func (a *Actor) Pending() int { return a.mbox.len() }

// Step takes what waits in the mailbox (bounded), decides it, writes it and
// answers it; and does what time asks: expired leases, long polls that
// give up, parked claims worth another try. A panic inside answers the
// messages it held with INTERNAL and leaves the core to be rebuilt from the
// store: the actor restarts in place. It returns how many messages it took.
func (a *Actor) Step(ctx context.Context, now time.Time) (took int) {
	msgs := a.mbox.drain(maxDrain)
	took = len(msgs)
	var tx store.StepTx
	if sp, ok := a.deps.Store.(stepper); ok {
		tx = sp.BeginStep(ctx)
		a.store = tx
		a.box.holding = true
	} else if a.answers != nil {
		// Registered first, so it runs last: after a panic's answers too.
		a.box.collecting = true
		defer a.handAnswers()
	}
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("namespace actor panicked; rebuilding from the store", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			internal := api.Errorf(api.CodeInternal, "", "internal error")
			if tx != nil {
				tx.Rollback()
				a.store = a.deps.Store
				a.box.release(internal)
			}
			for _, m := range msgs {
				if _, ok := m.Body.(*acksDone); ok && m.Op == opAcksDone {
					// Answered already; the acks decided since are not
					// written (the core that decided them is gone).
					a.acksOut, a.acksOutPlan = nil, nil
					if a.acksNext != nil {
						a.acksNext.answer(internal)
						a.acksNext = nil
					}
				}
				m.respond(nil, internal)
			}
			for _, w := range a.core.DropWaiters() {
				w.Msg.respond(nil, internal)
			}
			for _, r := range a.core.DropRefusals() {
				r.Msg.respond(nil, r.Err)
			}
			a.core = NewCore(a.ns, a.core.rng)
			a.core.SetPace(a.deps.Pace)
		}
	}()
	msgs = a.acksWritten(ctx, msgs)
	a.step(ctx, msgs, now)
	if tx != nil {
		a.store = a.deps.Store
		if err := tx.Commit(ctx); err != nil {
			// Nothing of the step happened: its answers say so, and the
			// counts it changed are read again.
			a.log.Warn("step commit failed", "err", err)
			a.core.Unload()
			a.box.release(StoreError(err))
			return took
		}
		a.box.release(nil)
	}
	return took
}

// overlapAcks says whether acks are written beside the steps: asked for,
// and the store is not one whose step is one transaction.
func (a *Actor) overlapAcks() bool {
	if !a.deps.OverlapAcks {
		return false
	}
	_, stepped := a.deps.Store.(stepper)
	return !stepped
}

// writeAcks writes p beside the steps that follow, or after the acks
// being written now. Once written, its calls are answered at once, from
// the writing goroutine, and the counts follow in the step that takes its
// acksDone message: that message is in the mailbox before any answer
// leaves, so a call its caller sends after the answer finds the jobs
// done (a slot free under max_running).
func (a *Actor) writeAcks(ctx context.Context, p UpdatePlan) {
	if a.acksOut != nil {
		if a.acksNext == nil {
			a.acksNext = &p
		} else {
			a.acksNext.Merge(p)
		}
		return
	}
	out := make(chan struct{})
	a.acksOut, a.acksOutPlan = out, &p
	p.Params.Fence = a.fence
	write := func() {
		defer close(out)
		applied, err := a.deps.Store.JobUpdateMany(ctx, p.Params)
		a.mbox.push(&Message{Op: opAcksDone, Body: &acksDone{plan: &p, applied: applied, err: err}})
		a.deps.Observer.Settled(a.ns, p.Settled(applied, err))
		p.AckAnswers(applied, err)
	}
	if a.deps.Beside != nil {
		a.deps.Beside(write)
		return
	}
	go write()
}

// acksWritten answers the overlapped acks whose write came back, starts
// the write of those decided meanwhile, and returns the other messages.
func (a *Actor) acksWritten(ctx context.Context, msgs []*Message) []*Message {
	if a.acksOut == nil {
		return msgs // no write is out, so no answer is in
	}
	rest := make([]*Message, 0, len(msgs))
	for _, m := range msgs {
		d, ok := m.Body.(*acksDone)
		if !ok || m.Op != opAcksDone {
			rest = append(rest, m)
			continue
		}
		if d.err != nil {
			a.log.Warn("ack write failed", "err", d.err)
		}
		a.core.AcksDone(d.plan, d.applied, d.err)
		a.acksOut, a.acksOutPlan = nil, nil
		if next := a.acksNext; next != nil {
			a.acksNext = nil
			a.writeAcks(ctx, *next)
		}
	}
	return rest
}

// AcksPending reports whether overlapped acks are still to be written or
// answered: an actor that stops waits for them (AcksOut).
func (a *Actor) AcksPending() bool { return a.acksOut != nil }

// AcksOut is closed when the overlapped ack write now under way is done
// (its answer is then in the mailbox); nil when there is none.
func (a *Actor) AcksOut() <-chan struct{} { return a.acksOut }

func (a *Actor) step(ctx context.Context, msgs []*Message, now time.Time) {
	c := a.core
	for _, r := range c.DueRefusals(now) {
		r.Msg.respond(nil, r.Err)
	}
	if len(msgs) > 0 {
		c.Touch(now)
	}
	c.SetSnapshot(a.deps.Snapshots.Get(ctx, a.ns, now))
	if a.deps.Fences != nil {
		// Counts loaded under another epoch are another owner's past:
		// read them again. A node that no longer owns the namespace
		// finishes what it holds under its old fence; the store refuses
		// it if the namespace moved.
		if f, ok := a.deps.Fences.Fence(a.ns); ok && (a.fence == nil || f.Epoch != a.fence.Epoch || f.Lease != a.fence.Lease) {
			a.fence = f
			c.Unload()
		} else if !ok && a.fence == nil {
			for _, m := range msgs {
				m.respond(nil, Moved(a.ns))
			}
			return
		}
	}
	if !c.Loaded() {
		failing := c.LoadFailing()
		if err := a.load(ctx, now); err != nil {
			// Said once: the actor tries again every second until it
			// can, and an outage would otherwise log a line a second
			// for every namespace active on the node.
			level := slog.LevelWarn
			if failing {
				level = slog.LevelDebug
			}
			a.log.Log(ctx, level, "cannot load namespace counts; trying again every second", "err", err)
			for _, m := range msgs {
				m.respond(nil, StoreError(err))
			}
			return
		}
		if failing {
			a.log.Info("namespace counts read again")
		}
	}

	var (
		updates  []*UpdateCall
		enqueues []*EnqueueCall
		claims   []*ClaimCall
	)
	for _, m := range msgs {
		switch body := m.Body.(type) {
		case *api.AckRequest, *api.NackRequest, *api.HeartbeatRequest:
			updates = append(updates, &UpdateCall{Msg: m})
		case *api.EnqueueRequest:
			call, err := c.NewEnqueueCall(m, body.Jobs, now)
			if err != nil {
				m.respond(nil, err)
				continue
			}
			enqueues = append(enqueues, call)
		case *api.EventRequest:
			if call := c.EventCall(m, body, now); call != nil {
				enqueues = append(enqueues, call)
			} else if err := c.Snapshot().Err; err != nil {
				// The triggers may not have been read: fail closed.
				m.respond(nil, err)
			} else {
				m.respond(api.EnqueueReply{Results: []api.EnqueueResult{}}, nil)
			}
		case *api.ReplayRequest:
			if call := a.replayCall(ctx, m, body); call != nil {
				enqueues = append(enqueues, call)
			}
		case *api.ClaimRequest:
			if m.cancelled() {
				// Its caller left before the actor got to it. (Not
				// Listening: see answer below.)
				m.respond(api.ClaimReply{Jobs: []api.Job{}}, nil)
				continue
			}
			claims = append(claims, &ClaimCall{Msg: m, Req: *body, Deadline: now.Add(time.Duration(body.WaitMS) * time.Millisecond)})
		case nil: // OpWake: loaded above, nothing more to do
			m.respond(struct{}{}, nil)
		default:
			m.respond(nil, api.BadRequest("unsupported request %T", m.Body))
		}
	}

	a.updates(ctx, updates, now)
	if !c.Loaded() {
		// A failed update may have committed (a job pending again): decide
		// nothing more on the counts it unloaded.
		if err := a.load(ctx, now); err != nil {
			for _, call := range enqueues {
				call.Msg.respond(nil, StoreError(err))
			}
			for _, call := range claims {
				call.Msg.respond(nil, StoreError(err))
			}
			return
		}
	}
	a.enqueues(ctx, enqueues, now)

	if now.Sub(a.lastP) >= pollEvery {
		a.lastP = now
		c.Poll()
	}
	retry, expired := c.Waiters(now)
	for _, w := range expired {
		if now.Before(w.Deadline) {
			a.log.Debug("parked claim answered before its wait ended: its caller left")
		}
		w.Msg.respond(api.ClaimReply{Jobs: []api.Job{}}, nil)
	}
	claims = append(retry, claims...)
	if len(claims) > 0 {
		a.claims(ctx, claims, now)
	}
	a.deps.Observer.Gauges(a.ns, c.Pending(), c.Running())
}

func (a *Actor) load(ctx context.Context, now time.Time) error {
	counts, err := a.store.JobCount(ctx, a.ns)
	if err != nil {
		a.core.LoadFailed()
		return err
	}
	running, err := a.store.JobListRunning(ctx, a.ns)
	if err != nil {
		a.core.LoadFailed()
		return err
	}
	a.core.Load(counts, running, now)
	// Acks being written, or to be written next, still hold their jobs:
	// the store may show them running a while yet, and their leases
	// must not run out under them.
	a.core.KeepAcking(a.acksOutPlan)
	a.core.KeepAcking(a.acksNext)
	return nil
}

// replayCall checks that every id is a dead letter of the namespace; a
// replay naming anything else is refused whole, nothing written.
func (a *Actor) replayCall(ctx context.Context, m *Message, req *api.ReplayRequest) *EnqueueCall {
	call := &EnqueueCall{Msg: m, ReplayIDs: req.IDs, AutoRetry: m.AutoRetry}
	for i, id := range req.IDs {
		j, err := a.store.JobGet(ctx, a.ns, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			m.respond(nil, UnknownJob(id))
			return nil
		case err != nil:
			m.respond(nil, StoreError(err))
			return nil
		case j.Status != api.StatusDead:
			m.respond(nil, api.Errorf(api.CodeFailedPrecondition, "", "job '%s' is %s, not a dead letter", id, j.Status))
			return nil
		}
		if i == 0 {
			call.Queue = j.Queue
		}
	}
	return call
}

func (a *Actor) updates(ctx context.Context, calls []*UpdateCall, now time.Time) {
	c := a.core
	if len(calls) == 0 && !c.leaseDue(now) {
		return
	}
	p := c.PlanUpdates(calls, now)
	if a.overlapAcks() {
		if acks := c.SplitAcks(&p); acks.Len() > 0 {
			a.writeAcks(ctx, acks)
		}
	}
	for _, u := range p.LeaseLost {
		u.Msg.respond(nil, api.LeaseLost(updateID(u)))
	}
	for _, u := range p.Unknown {
		id := updateID(u)
		j, err := a.store.JobGet(ctx, a.ns, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			u.Msg.respond(nil, UnknownJob(id))
		case err != nil:
			u.Msg.respond(nil, StoreError(err))
		default:
			_ = j
			u.Msg.respond(nil, api.LeaseLost(id))
		}
	}
	var (
		applied []bool
		err     error
	)
	if len(p.Params.Updates) > 0 {
		p.Params.Fence = a.fence
		applied, err = a.store.JobUpdateMany(ctx, p.Params)
		if err != nil {
			a.log.Warn("update write failed", "err", err)
		}
		settled := p.Settled(applied, err)
		a.observe(func() { a.deps.Observer.Settled(a.ns, settled) })
	}
	for _, r := range c.UpdatesDone(&p, applied, err) {
		r.Msg.respond(r.Body, r.Err)
	}
}

// observe makes a report to the metrics of what the step wrote: at once,
// or, where the step is one transaction, once it commits. A step whose
// commit fails wrote nothing, and reports nothing.
func (a *Actor) observe(f func()) {
	if a.box.holding {
		a.box.after = append(a.box.after, f)
		return
	}
	f()
}

// observeOutcomes counts one call's jobs by outcome.
func observeOutcomes(o Observer, ns string, res []api.EnqueueResult) {
	var n [4]int
	for _, r := range res {
		switch r.Outcome {
		case api.OutcomeEnqueued:
			n[0]++
		case api.OutcomeDeduplicated:
			n[1]++
		case api.OutcomeCoalesced:
			n[2]++
		case api.OutcomeShed:
			n[3]++
		default:
			o.Outcomes(ns, r.Outcome, 1)
		}
	}
	for i, outcome := range [...]api.Outcome{api.OutcomeEnqueued, api.OutcomeDeduplicated, api.OutcomeCoalesced, api.OutcomeShed} {
		if n[i] > 0 {
			o.Outcomes(ns, outcome, n[i])
		}
	}
}

func updateID(u *UpdateCall) string {
	switch b := u.Msg.Body.(type) {
	case *api.AckRequest:
		return b.ID
	case *api.NackRequest:
		return b.ID
	}
	return ""
}

func (a *Actor) enqueues(ctx context.Context, calls []*EnqueueCall, now time.Time) {
	c := a.core
	for len(calls) > 0 {
		p := c.PlanEnqueue(calls, now)
		for _, r := range p.Refused {
			a.deps.Observer.Refused(a.ns, r.Err.Reason)
			if c.PaceRefusal(r.Call.Msg, r.Err, now) {
				r.Call.Msg.respond(nil, r.Err)
			} else {
				a.deps.Observer.Paced(a.ns)
			}
		}
		calls = p.Rest
		if len(p.Calls) == 0 {
			continue
		}
		p.Params.Fence = a.fence
		results, err := a.store.JobEnqueueMany(ctx, p.Params)
		c.EnqueueDone(&p, results, err, now)
		if err != nil {
			a.log.Warn("enqueue write failed", "err", err)
			e := StoreError(err)
			for _, call := range p.Calls {
				call.Msg.respond(nil, e)
			}
			for _, call := range calls {
				call.Msg.respond(nil, e)
			}
			return
		}
		for i, call := range p.Calls {
			res := results[i]
			shed := p.Params.Calls[i].ShedError
			a.observe(func() {
				if shed != "" {
					a.deps.Observer.Refused(a.ns, reasonOf(shed))
				}
				observeOutcomes(a.deps.Observer, a.ns, res)
			})
			call.Msg.respond(api.EnqueueReply{Results: res}, nil)
		}
		if !c.Loaded() {
			if err := a.load(ctx, now); err != nil {
				for _, call := range calls {
					call.Msg.respond(nil, StoreError(err))
				}
				return
			}
		}
		calls = a.recheckReplays(ctx, calls)
	}
}

// recheckReplays checks again that replays left for a later round still
// name dead letters: an earlier call of the group may have replayed them.
func (a *Actor) recheckReplays(ctx context.Context, calls []*EnqueueCall) []*EnqueueCall {
	out := calls[:0:0]
	for _, call := range calls {
		if len(call.ReplayIDs) > 0 {
			if a.replayCall(ctx, call.Msg, &api.ReplayRequest{IDs: call.ReplayIDs}) == nil {
				continue // refused and answered
			}
		}
		out = append(out, call)
	}
	return out
}

func reasonOf(shedError string) api.Reason {
	if len(shedError) > len("quota: rate") && shedError[:len("quota: rate")] == "quota: rate" {
		return api.ReasonRateLimited
	}
	return api.ReasonQueueFull
}

func (a *Actor) claims(ctx context.Context, calls []*ClaimCall, now time.Time) {
	c := a.core
	if c.NeedsPromoteTime() {
		next, ok, err := a.store.JobNextRunAt(ctx, a.ns, nil)
		if err == nil {
			c.SetPromoteTime(next, ok)
		}
	}
	p := c.PlanClaims(calls, now)
	var (
		results [][]store.Job
		err     error
	)
	if len(p.Calls) > 0 {
		p.Params.Fence = a.fence
		results, err = a.store.JobClaimMany(ctx, p.Params)
		c.ClaimDone(&p, results, err)
		if err != nil {
			a.log.Warn("claim write failed", "err", err)
			for _, call := range p.Calls {
				call.Msg.respond(nil, StoreError(err))
			}
		}
	}
	var park []*ClaimCall
	answer := func(call *ClaimCall, jobs []store.Job) {
		if len(jobs) == 0 && now.Before(call.Deadline) {
			park = append(park, call)
			return
		}
		// Whether its caller still listens is asked of every claim as its
		// jobs are about to go out. A reply published where nobody
		// listens is lost (a NATS server sends a message only to the
		// interest it knows of), and its jobs with it, leased to nobody.
		// A claim just sent is not asked before this: the bus passes a
		// claim on once its caller's interest has reached this node's
		// server through the routes (bus.Service.heard), or after a
		// grace, and asked this late, a reply sent where nobody listens
		// would be lost anyway.
		if len(jobs) > 0 && call.Msg.Gone() {
			// Its caller left while the claim was written (or waited):
			// the jobs go back, pending again with their attempt unspent,
			// at the next step (a nack with release, as from a worker
			// that stops).
			a.log.Debug("claim's caller left while it was written: its jobs go back", "jobs", len(jobs), "parked", call.parked)
			for i := range jobs {
				a.Send(&Message{Op: OpNack, Body: &api.NackRequest{ID: jobs[i].ID, Attempt: jobs[i].Attempt, Release: true}})
			}
			call.Msg.respond(api.ClaimReply{Jobs: []api.Job{}}, nil)
			return
		}
		out := make([]api.Job, len(jobs))
		waits := a.waits[:0]
		for i := range jobs {
			out[i] = JobView(&jobs[i], c.maxAttempts(jobs[i].MaxAttempts, jobs[i].Queue))
			waits = append(waits, max(now.Sub(jobs[i].RunAt), 0))
		}
		a.waits = waits
		if a.box.holding {
			waits = slices.Clone(waits) // reported after the step: a.waits is reused
		}
		a.observe(func() { a.deps.Observer.Claimed(a.ns, waits) })
		call.Msg.respond(api.ClaimReply{Jobs: out}, nil)
	}
	if err == nil {
		for i, call := range p.Calls {
			answer(call, results[i])
		}
	}
	for _, call := range p.Empty {
		answer(call, nil)
	}
	if len(park) > 0 {
		// When to wake them for delayed jobs: read once, for claims
		// parking for the first time in a namespace that runs; parked
		// ones already know, and the periodic poll covers the rest.
		var queues []string
		seen := map[string]bool{}
		for _, w := range park {
			if w.parked {
				continue
			}
			w.parked = true
			for _, q := range w.Req.Queues {
				if !seen[q] {
					seen[q] = true
					queues = append(queues, q)
				}
			}
		}
		var (
			next time.Time
			ok   bool
		)
		if len(queues) > 0 && c.Snapshot().Err == nil {
			var err error
			if next, ok, err = a.store.JobNextRunAt(ctx, a.ns, queues); err != nil {
				ok = false
			}
		}
		c.Park(park, next, ok)
	}
}

// JobView renders a stored job for clients; maxAttempts is the resolved
// limit (the job's own, its queue's or the default).
func JobView(j *store.Job, maxAttempts int64) api.Job {
	out := api.Job{
		ID: j.ID, Queue: j.Queue, Task: j.Task, Payload: j.Payload, Priority: j.Priority,
		UniqueKey: j.UniqueKey, Status: j.Status, Attempt: j.Attempt, Error: j.Error,
		DeadMeta: j.DeadMeta, Result: j.Result,
	}
	ma := maxAttempts
	out.MaxAttempts = &ma
	runAt := j.RunAt.UTC()
	out.RunAt = &runAt
	created := j.CreatedAt.UTC()
	out.CreatedAt = &created
	if !j.FinishedAt.IsZero() {
		f := j.FinishedAt.UTC()
		out.FinishedAt = &f
	}
	if !j.LeaseUntil.IsZero() && j.Status == api.StatusRunning {
		l := j.LeaseUntil.UTC()
		out.LeaseUntil = &l
	}
	if j.DebounceKey != "" {
		out.Debounce = &api.Debounce{Key: j.DebounceKey}
	}
	return out
}

// stop answers everything still held: parked claims get no jobs, held
// refusals their refusal.
func (a *Actor) stop() {
	for _, w := range a.core.DropWaiters() {
		w.Msg.respond(api.ClaimReply{Jobs: []api.Job{}}, nil)
	}
	for _, r := range a.core.DropRefusals() {
		r.Msg.respond(nil, r.Err)
	}
}
