package simtest

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
)

// epoch is the simulated clock's origin.
var epoch = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// maxDrain mirrors the actor's bound on messages per step (actors.maxDrain).
const maxDrain = 512

// pollEvery mirrors the actor loop's safety poll while busy.
const pollEvery = time.Second

// Sim is one simulated world. It is not safe for concurrent use: it runs
// on the caller's goroutine, one event at a time.
type Sim struct {
	cfg  Config
	rng  *rand.Rand // the world's decisions
	frng *rand.Rand // faults
	lrng *rand.Rand // lease store faults (cluster.go)
	now  time.Time

	q   eventQueue
	seq uint64

	trace bytes.Buffer
	// echo, when set, also receives each trace line (scripts).
	echo func(string)
	// hold, when set, fixes how overlapped ack writes are held (scripts);
	// nil draws it for each write.
	hold *fixedHold

	db    *sqlite.Store
	txf   *txFaults
	rec   *recStore
	flt   *faultStore
	store actors.Store // what actors see

	nodes []*node
	owner map[string]*node
	// leases is the shared ClusterStore of cluster mode (nil otherwise).
	leases *leaseModel
	m      *model
	cur    *stepCtx
	steps  int
	inc    map[string]int

	msgs      int
	batches   map[int]*batchRec
	nextBatch int
	nworkers  map[string]int

	aliases   map[string]string
	nextAlias int

	// stats counts what happened, to show what a run exercised.
	stats map[string]int
	// held are the calls a step took without answering (checkAnswered).
	held []*msgRec

	violations []Violation
	halted     bool
	lastRecon  time.Time
	end        time.Time
	setUp      bool
}

// Violation is an invariant the simulation saw broken.
type Violation struct {
	Inv string
	At  time.Duration // since the start of the simulation
	Msg string
}

func (v Violation) Error() string { return fmt.Sprintf("%s at %s: %s", v.Inv, fmtDur(v.At), v.Msg) }

// New builds a world from cfg: its store, nodes and model. Close it.
func New(cfg Config) (*Sim, error) {
	if cfg.Nodes < 1 {
		cfg.Nodes = 1
	}
	if cfg.Cluster != nil {
		cfg.StepTx = false // a shared store writes call by call
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 2 * time.Second
	}
	if cfg.IdleAfter <= 0 {
		cfg.IdleAfter = time.Minute
	}
	if cfg.ReconcileEvery <= 0 {
		cfg.ReconcileEvery = 5 * time.Second
	}
	s := &Sim{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, 1)),
		frng:     rand.New(rand.NewPCG(cfg.Seed, 2)),
		now:      epoch,
		owner:    map[string]*node{},
		inc:      map[string]int{},
		batches:  map[int]*batchRec{},
		nworkers: map[string]int{},
		aliases:  map[string]string{},
		stats:    map[string]int{},
		m:        newModel(cfg.Namespaces),
	}
	s.txf = &txFaults{}
	path := cfg.Path
	if path == "" {
		path = ":memory:"
	}
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{Readers: 2, Faults: s.txf})
	if err != nil {
		return nil, err
	}
	s.db = db
	s.rec = &recStore{s: s, db: db}
	s.flt = &faultStore{s: s, inner: s.rec}
	s.store = s.flt
	if cfg.Cluster != nil {
		s.leases = newLeaseModel()
		s.store = &fenceStore{Store: s.flt, s: s}
	}
	if cfg.StepTx {
		s.store = faultStepper{s.flt}
	}
	if cfg.WrapStore != nil {
		s.store = cfg.WrapStore(s.store)
	}
	for i := 0; i < cfg.Nodes; i++ {
		n := &node{name: fmt.Sprintf("n%d", i+1)}
		s.nodes = append(s.nodes, n)
		s.bootNode(n)
	}
	for i, ns := range cfg.Namespaces {
		s.owner[ns] = s.nodes[i%len(s.nodes)]
	}
	s.logf("config %s", cfg.String())
	return s, nil
}

// Stats counts what the run exercised (faults, restarts, outcomes, …).
func (s *Sim) Stats() map[string]int { return s.stats }

func (s *Sim) stat(name string) { s.stats[name]++ }

// Close releases the store.
func (s *Sim) Close() error { return s.db.Close() }

// Trace is everything that happened, one event a line.
func (s *Sim) Trace() []byte { return s.trace.Bytes() }

// Violations are the invariants seen broken, in order.
func (s *Sim) Violations() []Violation { return s.violations }

// Now is the simulated time since the start.
func (s *Sim) Now() time.Duration { return s.now.Sub(epoch) }

// ---------------------------------------------------------------------------
// Events

type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

func (s *Sim) at(t time.Time, fn func()) {
	heap.Push(&s.q, &event{at: t, seq: s.seq, fn: fn})
	s.seq++
}

func (s *Sim) after(d time.Duration, fn func()) { s.at(s.now.Add(d), fn) }

// runUntil processes events due by t, then sets the clock to t (unless a
// slow write already carried it further).
func (s *Sim) runUntil(t time.Time) {
	for len(s.q) > 0 && !s.halted {
		e := s.q[0]
		if e.at.After(t) {
			break
		}
		heap.Pop(&s.q)
		if e.at.After(s.now) {
			s.now = e.at
		}
		e.fn()
	}
	if t.After(s.now) && !s.halted {
		s.now = t
	}
}

// ---------------------------------------------------------------------------
// Trace

func fmtDur(d time.Duration) string {
	ms := d.Milliseconds()
	return fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
}

func (s *Sim) logf(format string, args ...any) {
	line := fmt.Sprintf("%8s ", fmtDur(s.now.Sub(epoch))) + fmt.Sprintf(format, args...)
	s.trace.WriteString(line)
	s.trace.WriteByte('\n')
	if s.echo != nil {
		s.echo(line)
	}
}

// violate records a broken invariant; the run stops at the first unless
// KeepGoing.
func (s *Sim) violate(inv, format string, args ...any) {
	v := Violation{Inv: inv, At: s.now.Sub(epoch), Msg: fmt.Sprintf(format, args...)}
	s.violations = append(s.violations, v)
	s.logf("VIOLATION %s: %s", inv, v.Msg)
	if !s.cfg.KeepGoing {
		s.halted = true
	}
}

// alias names a job briefly in the trace: generated ids (UUIDv7) become
// j1, j2, … in order of first sight; client ids stay as they are.
func (s *Sim) alias(id string) string {
	if len(id) != 36 || id[8] != '-' {
		return id
	}
	if a, ok := s.aliases[id]; ok {
		return a
	}
	s.nextAlias++
	a := fmt.Sprintf("j%d", s.nextAlias)
	s.aliases[id] = a
	return a
}

func (s *Sim) aliasList(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = s.alias(id)
	}
	return strings.Join(out, ",")
}

// ---------------------------------------------------------------------------
// Nodes and actors

type node struct {
	name string
	boot int
	// bcastRev is the newest quota revision a broadcast brought, and seen
	// the newest a step decided under, per namespace (since boot).
	bcastRev, seen map[string]int64
	cache          *cachebust.Cache
	deps           *actors.Deps
	actors         map[string]*simActor
	// cn is the node's part of the cluster (cluster mode).
	cn *clusterNode
}

type simActor struct {
	ns    string
	n     *node
	a     *actors.Actor
	inc   int
	inbox []*msgRec // mirrors the actor's mailbox, in order
	// one scheduled wake-up at a time; gen invalidates older ones
	gen       uint64
	scheduled bool
	tickAt    time.Time
	gone      bool
	lost      bool // gone in a crash, with what it held
	// write is the overlapped ack write the actor started (held, not
	// yet run), and hold how many more of its steps it waits.
	write func()
	hold  int
	// armed: the held write lands inside this step (land), as a write
	// that comes back while the actor is busy; its acksDone then waits
	// for the next step.
	armed, mid bool
	// acking are the acks the actor took and has not answered yet, by
	// job: with overlapped writes, those being written (or next).
	acking map[string]*msgRec
}

// loseWrite drops a held ack write with the process that held it.
func (sa *simActor) loseWrite(s *Sim) {
	if sa.write != nil {
		sa.write = nil
		s.logf("  ack write of %s#%d lost", sa.ns, sa.inc)
	}
}

// ackOut says whether another ack of job id, not m, is out on sa: taken,
// not answered yet.
func (sa *simActor) ackOut(id string, m *msgRec) bool {
	o := sa.acking[id]
	return o != nil && o != m
}

// fixedHold is how every overlapped ack write is held in a script:
// steps of its actor, then landing before a step or inside it (mid).
type fixedHold struct {
	steps int
	mid   bool
}

// holdWrite takes an overlapped ack write of the actor stepping now: it
// lands in one of the actor's next three steps, before the step or
// inside it (runWrite), as a write on another connection comes back a
// while later.
func (s *Sim) holdWrite(write func()) {
	sa := s.cur.sa // the actor starts it inside its step
	if sa.write != nil {
		s.violate(InvStore, "%s#%d started an ack write while one was out", sa.ns, sa.inc)
	}
	if h := s.hold; h != nil {
		sa.write, sa.hold, sa.mid = write, h.steps, h.mid
	} else {
		sa.write, sa.hold, sa.mid = write, s.rng.IntN(3), s.rng.IntN(2) == 0
	}
	s.logf("  ack write out, held for %d steps (mid-step %v)", sa.hold, sa.mid)
}

// runWrite runs sa's held ack write at the start of a step if its time
// has come (or now, when force), or arms it to land inside the step:
// either way its writes and answers are the step's. Its acksDone message
// joins the mailbox behind what is there (a marker in the inbox mirrors
// it).
func (s *Sim) runWrite(sa *simActor, force bool) {
	switch {
	case sa.write == nil:
	case force:
		s.landWrite(sa, "before the step (stopping)")
	case sa.hold > 0:
		sa.hold--
	case sa.mid:
		sa.armed = true
	default:
		s.landWrite(sa, "before the step")
	}
}

// land lands the current actor's armed write: called when the step
// reads its quota (snapRec.Get) and once the step is over.
func (s *Sim) land(when string) {
	if st := s.cur; st != nil && st.sa.armed {
		s.landWrite(st.sa, when)
	}
}

func (s *Sim) landWrite(sa *simActor, when string) {
	write := sa.write
	sa.write, sa.armed = nil, false
	s.stat("ack write beside the steps")
	s.logf("  ack write lands %s", when)
	write()
	sa.inbox = append(sa.inbox, &msgRec{internal: true})
}

// bootNode gives n a fresh cache and no actors (a start or restart).
func (s *Sim) bootNode(n *node) {
	n.boot++
	n.cache = cachebust.New(s.flt, s.cfg.TTL, slog.New(&traceHandler{s: s}))
	var snaps actors.Snapshots = n.cache
	if s.cfg.WrapSnapshots != nil {
		snaps = s.cfg.WrapSnapshots(snaps)
	}
	n.deps = &actors.Deps{
		Store:     s.store,
		Snapshots: &snapRec{s: s, n: n, inner: snaps},
		Log:       slog.New(&traceHandler{s: s, node: n.name}),
		Observer:  simObserver{s: s},
		IdleAfter: s.cfg.IdleAfter,
		Seed:      s.cfg.Seed,
		Pace:      s.cfg.Pace,
		// Overlapped ack writes are held by the simulator, not run on a
		// goroutine (holdWrite).
		OverlapAcks: s.cfg.OverlapAcks,
		Beside:      s.holdWrite,
	}
	n.actors = map[string]*simActor{}
	n.bcastRev, n.seen = map[string]int64{}, map[string]int64{}
	if s.cfg.Cluster != nil {
		s.bootCluster(n)
	}
}

// actor returns ns's actor on n, spawning it (as actors.System does on the
// first message).
func (s *Sim) actor(n *node, ns string) *simActor {
	if sa := n.actors[ns]; sa != nil {
		return sa
	}
	s.inc[ns]++
	inc := s.inc[ns]
	rng := rand.New(rand.NewPCG(s.cfg.Seed^0x9e3779b97f4a7c15, uint64(inc)<<8|uint64(slices.Index(s.cfg.Namespaces, ns))))
	sa := &simActor{ns: ns, n: n, inc: inc, a: actors.NewActor(ns, actors.NewCore(ns, rng), n.deps), acking: map[string]*msgRec{}}
	n.actors[ns] = sa
	s.logf("%s spawn %s#%d", n.name, ns, inc)
	return sa
}

// schedule wakes sa at t unless an earlier wake-up is already due. timer
// marks a wake-up of the actor's own timer, after which an idle actor
// passivates.
func (s *Sim) schedule(sa *simActor, t time.Time, timer bool) {
	if sa.scheduled && !sa.tickAt.After(t) {
		return
	}
	sa.gen++
	gen := sa.gen
	sa.scheduled, sa.tickAt = true, t
	s.at(t, func() {
		if sa.gen != gen || sa.gone {
			return
		}
		sa.scheduled = false
		if timer && sa.a.Pending() == 0 && !sa.a.AcksPending() && sa.a.Core().Idle(s.now, s.cfg.IdleAfter) {
			s.stat("passivate")
			s.logf("%s passivate %s#%d", sa.n.name, sa.ns, sa.inc)
			sa.gone = true
			delete(sa.n.actors, sa.ns)
			return
		}
		s.step(sa)
	})
}

// step steps sa once at the current time and checks what it did.
func (s *Sim) step(sa *simActor) {
	s.stepForcing(sa, false)
}

// stepForcing is step; force runs a held ack write whatever its hold.
func (s *Sim) stepForcing(sa *simActor, force bool) {
	s.steps++
	ctx := &stepCtx{
		id: s.steps, sa: sa, ns: sa.ns, now: s.now,
		claimed: map[string]*claimRec{},
		updated: map[string][]*updRec{},
		before:  map[string]*mjob{},
	}
	s.cur = ctx
	// The acks out as the step begins, taken before a held write lands
	// ahead of it: what that write applies is recorded in this step.
	ctx.acking = maps.Clone(sa.acking)
	s.runWrite(sa, force)
	n := min(len(sa.inbox), maxDrain)
	for _, m := range sa.inbox[:n] {
		if !m.internal {
			ctx.msgs = append(ctx.msgs, m)
		}
	}
	sa.inbox = slices.Delete(sa.inbox, 0, n)
	s.captureBefore(ctx)
	sa.a.Step(context.Background(), s.now)
	s.land("after the step")
	ctx.acksBehind = slices.ContainsFunc(sa.inbox, func(m *msgRec) bool { return m.internal })
	s.cur = nil
	for _, m := range ctx.msgs {
		if m.moved {
			m.moved = false // its next owner takes it
			continue
		}
		if b, ok := m.body.(*api.AckRequest); ok && !m.replied {
			sa.acking[b.ID], m.ackingAt = m, sa
		}
		if !m.replied && ctx.snapOK && !m.decided {
			m.decided, m.decidedSnap, m.decidedBy, m.decidedAt = true, ctx.snap, sa, s.now
			if m.op != actors.OpClaim { // a parked claim is not held
				s.held = append(s.held, m)
			}
		}
	}
	done := ""
	if len(ctx.msgs) < n {
		done = " +acks written" // an overlapped ack write's acksDone
	}
	s.logf("%s step %s#%d msgs=%d%s %s", sa.n.name, sa.ns, sa.inc, len(ctx.msgs), done, s.countsLine(sa))
	s.checkStep(ctx)
	if ctx.delay > 0 {
		s.now = s.now.Add(ctx.delay)
		s.logf("%s slow store: the step took %s", sa.n.name, ctx.delay)
	}
	for _, m := range ctx.replies {
		s.sendReply(m)
	}
	if s.halted || sa.gone {
		return
	}
	if sa.a.Pending() > 0 {
		s.schedule(sa, s.now, false)
		return
	}
	if sa.write != nil {
		// The write comes back a moment later, and wakes the actor.
		s.schedule(sa, s.now.Add(time.Millisecond), false)
		return
	}
	c := sa.a.Core()
	wait := s.cfg.IdleAfter
	if next := c.NextDeadline(); !next.IsZero() {
		wait = min(wait, next.Sub(s.now))
	}
	if c.Busy() {
		wait = min(wait, pollEvery)
	}
	wait = max(wait, time.Millisecond)
	s.schedule(sa, s.now.Add(wait), true)
}

func (s *Sim) countsLine(sa *simActor) string {
	c := sa.a.Core()
	if !c.Loaded() {
		return "unloaded"
	}
	return fmt.Sprintf("pending=%d running=%d", c.Pending(), c.Running())
}

// crashNode loses every actor of n with what its mailboxes and parked
// claims held (their clients time out), and its cache.
func (s *Sim) crashNode(n *node) {
	s.stat("node crash")
	s.logf("%s crash (%d actors lost)", n.name, len(n.actors))
	for _, ns := range s.sortedActors(n) {
		sa := n.actors[ns]
		sa.gone, sa.lost = true, true
		sa.loseWrite(s)
		for _, m := range sa.inbox {
			if !m.internal {
				s.logf("  lost %s", m.describe(s))
			}
		}
	}
	s.bootNode(n)
	s.reconcile("after crash")
}

// stopActor stops sa gracefully: it answers what it holds, parked claims
// with no jobs, as actors.System.Stop does.
func (s *Sim) stopActor(sa *simActor) {
	for (sa.a.Pending() > 0 || sa.a.AcksPending()) && !s.halted {
		s.stepForcing(sa, true)
	}
	for _, w := range sa.a.Core().DropWaiters() {
		w.Msg.Reply(api.ClaimReply{Jobs: []api.Job{}}, nil)
	}
	for _, r := range sa.a.Core().DropRefusals() {
		r.Msg.Reply(nil, r.Err)
	}
	sa.gone = true
	delete(sa.n.actors, sa.ns)
	s.logf("%s stopped %s#%d", sa.n.name, sa.ns, sa.inc)
}

func (s *Sim) restartNode(n *node, graceful bool) {
	if !graceful {
		s.crashNode(n)
		return
	}
	s.stat("node graceful restart")
	s.logf("%s graceful restart", n.name)
	for _, ns := range s.sortedActors(n) {
		s.stopActor(n.actors[ns])
	}
	s.bootNode(n)
	s.reconcile("after restart")
}

// move hands ns to node to: its actor there starts from the store.
func (s *Sim) move(ns string, to *node) {
	from := s.owner[ns]
	if from == to {
		return
	}
	s.stat("actor moved")
	s.logf("move %s %s → %s", ns, from.name, to.name)
	if sa := from.actors[ns]; sa != nil {
		s.stopActor(sa)
	}
	s.owner[ns] = to
}

func (s *Sim) sortedActors(n *node) []string {
	var out []string
	for ns := range n.actors {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// ---------------------------------------------------------------------------
// Messages over the bus

// msgRec is one client request and what became of it.
type msgRec struct {
	id     int
	op     actors.Op
	ns     string
	client string
	body   any
	batch  *batchRec
	// attempt is the attempt a worker acks or nacks (0: none given).
	attempt int64

	sentAt    time.Time
	timeout   time.Duration
	replied   bool // the node answered
	delivered bool // the client got the answer
	timedOut  bool
	reply     any
	err       *api.Error

	// internal marks the place of an overlapped ack write's acksDone
	// message in an actor's inbox; no client sent it.
	internal bool
	// taken is the model's view of the job an ack names, at the start of
	// the step that took the ack, with that step's time, whether the
	// step named the job once and whether it owned the namespace: an
	// overlapped ack is answered in a later step.
	taken      *mjob
	takenAt    time.Time
	takenOnce  bool
	takenOwned bool
	// ackingAt is the actor that took this ack and has not answered it.
	ackingAt *simActor

	onReply   func(body any, err *api.Error)
	onTimeout func()

	// Cluster mode: the node whose actor has the call now; local marks a
	// call its entry node kept (the ackLocal mutation).
	at    *node
	local bool

	// decided: the step that took the call did not answer it (a refusal
	// the pace holds); decidedSnap is the quota it was decided under,
	// which its later answer is checked against.
	decided     bool
	decidedSnap cachebust.Snapshot
	decidedBy   *simActor
	decidedAt   time.Time
	// moved: the step that took it answered "moved" and the call is
	// routed again, to be taken by the namespace's next owner.
	moved bool
}

func (m *msgRec) describe(s *Sim) string {
	switch b := m.body.(type) {
	case *api.EnqueueRequest:
		return fmt.Sprintf("m%d enqueue %s b%d n=%d", m.id, m.ns, m.batch.id, len(b.Jobs))
	case *api.EventRequest:
		return fmt.Sprintf("m%d event %s %s b%d", m.id, m.ns, b.Name, m.batch.id)
	case *api.ReplayRequest:
		return fmt.Sprintf("m%d replay %s b%d %s", m.id, m.ns, m.batch.id, s.aliasList(b.IDs))
	case *api.ClaimRequest:
		return fmt.Sprintf("m%d claim %s max=%d wait=%dms lease=%dms queues=%s", m.id, m.ns, b.Max, b.WaitMS, b.LeaseMS, strings.Join(b.Queues, ","))
	case *api.AckRequest:
		return fmt.Sprintf("m%d ack %s %s attempt=%d", m.id, m.ns, s.alias(b.ID), b.Attempt)
	case *api.NackRequest:
		retry := b.Retry == nil || *b.Retry
		return fmt.Sprintf("m%d nack %s %s retry=%v attempt=%d", m.id, m.ns, s.alias(b.ID), retry, b.Attempt)
	case *api.HeartbeatRequest:
		return fmt.Sprintf("m%d heartbeat %s %s lease=%dms", m.id, m.ns, s.aliasList(b.IDs), b.LeaseMS)
	}
	return fmt.Sprintf("m%d %s", m.id, m.op)
}

func (s *Sim) newMsg(op actors.Op, ns, client string, body any) *msgRec {
	s.msgs++
	return &msgRec{id: s.msgs, op: op, ns: ns, client: client, body: body, timeout: 10 * time.Second}
}

func (s *Sim) busDelay() time.Duration {
	b := s.cfg.Bus
	if b.MaxDelay <= b.MinDelay {
		return b.MinDelay
	}
	return b.MinDelay + time.Duration(s.rng.Int64N(int64(b.MaxDelay-b.MinDelay)+1))
}

// send puts m on the bus: it reaches the namespace's owner after a delay;
// its client gives up after m.timeout.
func (s *Sim) send(m *msgRec) {
	m.sentAt = s.now
	s.logf("%s send %s", m.client, m.describe(s))
	s.after(s.busDelay(), func() { s.deliver(m) })
	s.after(m.timeout, func() {
		if m.delivered {
			return
		}
		m.timedOut = true
		s.logf("%s timeout m%d", m.client, m.id)
		if m.onTimeout != nil {
			m.onTimeout()
		}
	})
}

func (s *Sim) deliver(m *msgRec) {
	if s.cfg.Cluster != nil {
		s.clusterDeliver(m)
		return
	}
	s.deliverTo(s.owner[m.ns], m)
}

// deliverTo puts m in the mailbox of its namespace's actor on n.
func (s *Sim) deliverTo(n *node, m *msgRec) {
	m.at = n
	sa := s.actor(n, m.ns)
	am := &actors.Message{Op: m.op, Body: m.body, Reply: func(body any, err *api.Error) { s.nodeReply(m, body, err) }}
	if m.batch != nil && m.batch.autoRetry {
		am.AutoRetry = true
	}
	// Every other call is a client's: its quota refusals are paced.
	am.Paced = !am.AutoRetry
	sa.inbox = append(sa.inbox, m)
	sa.a.Send(am)
	s.logf("%s deliver m%d to %s#%d", n.name, m.id, m.ns, sa.inc)
	lat := time.Duration(0)
	if l := s.cfg.Bus.StepLatency; l > 0 {
		lat = time.Duration(s.rng.Int64N(int64(l) + 1))
	}
	s.schedule(sa, s.now.Add(lat), false)
}

// nodeReply is the node answering m (inside a step, or while stopping).
func (s *Sim) nodeReply(m *msgRec, body any, err *api.Error) {
	if s.cfg.Cluster != nil && s.clusterReply(m, err) {
		return
	}
	if m.replied {
		s.violate(InvReply, "m%d answered twice", m.id)
		return
	}
	m.replied, m.reply, m.err = true, body, err
	if sa := m.ackingAt; sa != nil {
		if b := m.body.(*api.AckRequest); sa.acking[b.ID] == m {
			delete(sa.acking, b.ID)
		}
	}
	if err != nil {
		s.stat(fmt.Sprintf("%s refused %s %s", m.op, err.Code, err.Reason))
	}
	s.logf("  reply m%d %s", m.id, s.describeReply(m))
	if s.cur != nil {
		s.cur.replies = append(s.cur.replies, m)
		return
	}
	s.sendReply(m)
}

func (s *Sim) describeReply(m *msgRec) string {
	if m.err != nil {
		return fmt.Sprintf("error %s %s: %s", m.err.Code, m.err.Reason, m.err.Message)
	}
	switch b := m.reply.(type) {
	case api.EnqueueReply:
		parts := make([]string, len(b.Results))
		for i, r := range b.Results {
			parts[i] = s.alias(r.ID) + ":" + string(r.Outcome)
		}
		return "ok " + strings.Join(parts, ",")
	case api.ClaimReply:
		parts := make([]string, len(b.Jobs))
		for i, j := range b.Jobs {
			parts[i] = fmt.Sprintf("%s@%d", s.alias(j.ID), j.Attempt)
		}
		return "jobs [" + strings.Join(parts, ",") + "]"
	case api.NackReply:
		if b.RunAt != nil {
			return fmt.Sprintf("%s run_at=+%s", b.Status, fmtDur(b.RunAt.Sub(epoch)))
		}
		return string(b.Status)
	case api.HeartbeatReply:
		return "extended [" + s.aliasList(b.Extended) + "]"
	case api.Empty:
		return "ok"
	}
	return fmt.Sprintf("%T", m.reply)
}

// sendReply carries a node's answer back to its client, or loses it.
func (s *Sim) sendReply(m *msgRec) {
	if s.cfg.Bus.ReplyLoss > 0 && s.rng.Float64() < s.cfg.Bus.ReplyLoss {
		s.stat("reply lost")
		s.logf("  bus lost the reply to m%d", m.id)
		return
	}
	s.after(s.busDelay(), func() {
		if m.timedOut || m.delivered {
			return
		}
		m.delivered = true
		if m.onReply != nil {
			m.onReply(m.reply, m.err)
		}
	})
}

// ---------------------------------------------------------------------------
// Batches: what a producer sent, tagged in each job's payload so the store
// layer can tell which call a written job came from.

type batchKind int

const (
	kindEnqueue batchKind = iota
	kindEvent
	kindReplay
)

type batchRec struct {
	id        int
	ns        string
	kind      batchKind
	jobs      []api.Job
	replayIDs []string
	autoRetry bool
	// triggers the event should fire, in order (queue, task)
	triggers [][2]string
	msg      *msgRec

	committed bool
	step      int
	hidden    bool // committed, but the store reported an error
	results   []api.EnqueueResult
}

func (s *Sim) newBatch(ns string, kind batchKind) *batchRec {
	s.nextBatch++
	b := &batchRec{id: s.nextBatch, ns: ns, kind: kind}
	s.batches[b.id] = b
	return b
}

type payloadTag struct {
	B *int `json:"b"`
	I *int `json:"i"`
	E *int `json:"e"`
}

func parseTag(p []byte) (payloadTag, bool) {
	var t payloadTag
	if len(p) == 0 || json.Unmarshal(p, &t) != nil {
		return t, false
	}
	return t, t.B != nil || t.E != nil
}

// ---------------------------------------------------------------------------
// Logging from the product code

// traceHandler puts the actors' and the cache's warnings in the trace; an
// error (an actor that panicked) is a violation.
type traceHandler struct {
	s     *Sim
	node  string
	attrs []slog.Attr
}

func (h *traceHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *traceHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	add := func(a slog.Attr) bool {
		if a.Key != "stack" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.s.logf("  log %s %s", r.Level, b.String())
	if r.Level >= slog.LevelError {
		h.s.violate(InvPanic, "%s", b.String())
	}
	return nil
}

func (h *traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &traceHandler{s: h.s, node: h.node, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *traceHandler) WithGroup(string) slog.Handler { return h }

// simObserver counts the refusals held by the pace (Stats), so a run
// shows whether it exercised them.
type simObserver struct{ s *Sim }

func (simObserver) Outcomes(string, api.Outcome, int)  {}
func (simObserver) Refused(string, api.Reason)         {}
func (simObserver) Gauges(string, int64, int64)        {}
func (simObserver) Claimed(string, []time.Duration)    {}
func (simObserver) Settled(string, actors.Settled)     {}
func (o simObserver) Paced(string)                     { o.s.stat("refusal paced") }
func (simObserver) Stepped(string, int, time.Duration) {}

// ---------------------------------------------------------------------------
// The admin door: quota and configuration writes, and their broadcasts

// writeQuota stores raw (nil clears) as ns's quota document, as the admin
// door does, and broadcasts the revision: to each node after a delay, or
// lost. lose forces the broadcast lost (-1 random, 0 delivered, 1 lost).
func (s *Sim) writeQuota(ns string, raw []byte, lose int) int64 {
	action := "quota.set"
	if raw == nil {
		action = "quota.clear"
	}
	set, err := s.db.SettingPut(context.Background(), store.SettingPutParams{
		Key: quota.Key(ns), Value: raw, Now: s.now,
		Audit: &store.AuditRecord{Actor: "sim", Action: action, TargetKind: "namespace", Target: ns, Namespace: ns},
	})
	if err != nil {
		s.violate(InvStore, "quota write failed: %v", err)
		return 0
	}
	s.m.ns[ns].addQuota(set.Revision, s.now, raw)
	s.stat("quota write")
	if q, _ := s.m.ns[ns].quotaAt(set.Revision); q.corrupt {
		s.stat("quota write corrupt")
	}
	text := "cleared"
	if raw != nil {
		text = string(raw)
	}
	s.logf("admin quota %s rev=%d %s", ns, set.Revision, text)
	rev := set.Revision
	for _, n := range s.nodes {
		s.broadcast(n, lose, fmt.Sprintf("quota %s rev=%d", ns, rev), func() {
			n.cache.Invalidate(ns, rev)
			n.bcastRev[ns] = max(n.bcastRev[ns], rev)
		})
	}
	return rev
}

func (s *Sim) broadcast(n *node, lose int, what string, apply func()) {
	lost := lose == 1 || (lose < 0 && s.cfg.Bus.BroadcastLoss > 0 && s.rng.Float64() < s.cfg.Bus.BroadcastLoss)
	if lost {
		s.stat("broadcast lost")
		s.logf("  bus lost broadcast %s to %s", what, n.name)
		return
	}
	d := time.Duration(0)
	if m := s.cfg.Bus.BroadcastMaxDelay; m > 0 && lose < 0 {
		d = time.Duration(s.rng.Int64N(int64(m) + 1))
	}
	boot := n.boot
	s.after(d, func() {
		if n.boot != boot {
			return // the node restarted; its new cache never saw the old copy
		}
		s.logf("%s broadcast %s", n.name, what)
		apply()
	})
}

// writeConfig stores a queue's or task's settings and broadcasts the change.
func (s *Sim) writeConfig(ns, kind, name string, value []byte, lose int) {
	_, err := s.db.ConfigPut(context.Background(), store.ConfigPutParams{
		Item: store.ConfigItem{Namespace: ns, Kind: kind, Name: name, Value: value}, Now: s.now,
	})
	if err != nil {
		s.violate(InvStore, "config write failed: %v", err)
		return
	}
	s.m.ns[ns].setConfig(kind, name, value)
	s.logf("admin %s %s %s %s", kind, ns, name, value)
	for _, n := range s.nodes {
		s.broadcast(n, lose, fmt.Sprintf("config %s %s", ns, kind), func() { n.cache.InvalidateConfig(ns) })
	}
}

// setup writes the world's starting configuration: queue and task settings,
// triggers and quotas, before any client acts.
func (s *Sim) setup() {
	if s.setUp {
		return
	}
	s.setUp = true
	w := s.cfg.World
	for _, ns := range s.cfg.Namespaces {
		for _, q := range w.Queues {
			if qs, ok := s.queueSettings(q); ok {
				s.writeConfig(ns, store.KindQueue, q, qs, 0)
			}
		}
		for _, t := range w.Tasks {
			if c, ok := w.TaskCap[t]; ok {
				s.writeConfig(ns, store.KindTask, t, quota.TaskSettings{MaxConcurrent: &c}.Encode(), 0)
			}
		}
		for i, tr := range w.Triggers {
			v, _ := json.Marshal(api.Trigger{Event: "ev", Queue: tr[0], Task: tr[1]})
			s.writeConfig(ns, store.KindTrigger, fmt.Sprintf("tr%d", i+1), v, 0)
		}
		if doc := w.Quota[ns]; doc != "" {
			s.writeQuota(ns, []byte(doc), 0)
		}
	}
}

func (s *Sim) queueSettings(q string) ([]byte, bool) {
	w := s.cfg.World
	var qs quota.QueueSettings
	if c, ok := w.QueueCap[q]; ok {
		qs.MaxConcurrent = &c
	}
	if a, ok := w.QueueAttempts[q]; ok {
		qs.MaxAttempts = &a
	}
	if qs.MaxConcurrent == nil && qs.MaxAttempts == nil {
		return nil, false
	}
	return qs.Encode(), true
}

// errInjected is what the fault layer returns.
var errInjected = errors.New("simtest: injected store fault")
