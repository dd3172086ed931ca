// Package actors is FlexiQ's tiny actor runtime and its namespace actor.
//
// Each namespace has at most one actor on a node: a mailbox and a Core (a
// state machine that owns the namespace's counts and token bucket), stepped
// by one goroutine. An actor is spawned by the first message for its
// namespace, passivates when idle, and restarts in place after a panic with
// its state rebuilt from the store. The actor never talks to NATS: it gets
// messages with a reply function.
package actors

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// Deps are what actors need from the node.
type Deps struct {
	Store     Store
	Snapshots Snapshots
	Clock     Clock
	Log       *slog.Logger
	Observer  Observer
	// IdleAfter is how long an actor with nothing running and nothing
	// waiting lives on without messages (default 1 minute).
	IdleAfter time.Duration
	// Fences, on a clustered node, gives the fence of a namespace's
	// writes (cluster.Cluster); nil on a single node.
	Fences Fences
	// Seed seeds each actor's random source (ids, jitter) together with
	// its namespace name.
	Seed uint64
	// Pace paces the quota refusals of clients' calls (pace.go; a node
	// uses DefaultPace). Zero: every refusal is answered at once.
	Pace Pace
	// OverlapAcks writes a namespace's completions beside its next steps
	// instead of within the step that took them, on a store whose step is
	// not one transaction (PostgreSQL, Redis: their writes wait on a
	// server, and another connection can write meanwhile). Their jobs
	// count as running until the write is back, so no cap is ever
	// exceeded, and each ack is answered once it is durable.
	OverlapAcks bool
	// AnswerBeside publishes the answers a step gives from a goroutine of
	// the actor's own, handed over once at the end of the step, so that
	// the actor's next write does not wait for them (encoding and
	// publishing about 14 answers is some 25 µs of a 0.6 ms single-job
	// step on PostgreSQL). It pays where the actor waits on its writes and
	// its answers are a good part of its own time; on Redis it measured
	// nothing, so the node sets it for PostgreSQL only
	// (docs/performance.md). A store whose step is one
	// transaction holds its answers to the commit and gives them then, on
	// the actor's goroutine, as before.
	AnswerBeside bool
	// Beside runs an overlapped ack write (OverlapAcks) beside the actor;
	// nil runs it on a goroutine of its own. The simulator runs it at a
	// moment of its choosing, on its one thread, so a seed replays.
	Beside func(write func())
}

// Fences tells whether this node owns a namespace and the fence its
// writes carry.
type Fences interface {
	Fence(ns string) (*store.Fence, bool)
}

// System runs a node's namespace actors.
type System struct {
	deps Deps
	ctx  context.Context

	mu      sync.Mutex
	actors  map[string]*running
	stopped bool
	handOff func(ns string, m *Message) bool
	wg      sync.WaitGroup
}

type running struct {
	actor *Actor
	quit  chan struct{}
	// done is closed when the actor's goroutine has returned.
	done chan struct{}
}

// NewSystem returns a system; actors run under ctx's values (not its
// cancellation: Stop ends them).
func NewSystem(ctx context.Context, d Deps) *System {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Observer == nil {
		d.Observer = nopObserver{}
	}
	if d.Clock == nil {
		d.Clock = SystemClock{}
	}
	if d.IdleAfter <= 0 {
		d.IdleAfter = time.Minute
	}
	return &System{deps: d, ctx: context.WithoutCancel(ctx), actors: map[string]*running{}}
}

// ErrStopping is what a request gets once the node is stopping.
var ErrStopping = api.Errorf(api.CodeUnavailable, "", "node is stopping")

// Send delivers m to ns's actor, spawning it if needed. After Stop began,
// m is handed off (SetHandOff) or answered UNAVAILABLE at once.
func (s *System) Send(ns string, m *Message) {
	s.mu.Lock()
	if s.stopped {
		handOff := s.handOff
		s.mu.Unlock()
		if handOff == nil || !handOff(ns, m) {
			m.respond(nil, ErrStopping)
		}
		return
	}
	r := s.actors[ns]
	if r == nil {
		r = s.spawnLocked(ns)
	}
	r.actor.Send(m)
	s.mu.Unlock()
}

// Len reports how many actors are alive.
func (s *System) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.actors)
}

func (s *System) spawnLocked(ns string) *running {
	seed := s.deps.Seed
	for i := 0; i < len(ns); i++ {
		seed = seed*1099511628211 + uint64(ns[i])
	}
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	a := NewActor(ns, NewCore(ns, rng), &s.deps)
	r := &running{actor: a, quit: make(chan struct{}), done: make(chan struct{})}
	s.actors[ns] = r
	s.wg.Add(1)
	go s.run(r)
	return r
}

// run is the actor's goroutine: wait for a message or a deadline, step.
func (s *System) run(r *running) {
	defer s.wg.Done()
	defer close(r.done)
	a := r.actor
	// Every answer handed to the answering goroutine has left before the
	// actor counts as gone (Stop, Evict, passivation).
	defer a.closeAnswers()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := s.step(a)
		if a.Pending() > 0 {
			continue
		}
		wait := s.deps.IdleAfter
		if next := a.core.NextDeadline(); !next.IsZero() {
			wait = min(wait, next.Sub(now))
		}
		if a.core.Busy() {
			wait = min(wait, pollEvery)
		}
		wait = max(wait, time.Millisecond)
		timer.Reset(wait)
		select {
		case <-a.mbox.signal:
			timer.Stop() // Go 1.23+ timers: no stale tick to drain
		case <-timer.C:
			// Acks being written keep it: their answer comes back here.
			if !a.AcksPending() && a.core.Idle(s.deps.Clock.Now(), s.deps.IdleAfter) && s.passivate(r) {
				return
			}
		case <-r.quit:
			// Stop: answer everything already queued, and the acks being
			// written, then the parked.
			for a.Pending() > 0 || a.AcksPending() {
				if a.Pending() == 0 {
					<-a.AcksOut()
				}
				s.step(a)
			}
			a.stop()
			return
		}
	}
}

// step takes one step of a and reports it (Observer.Stepped); it returns
// the time the step began, which it gave the step as now.
func (s *System) step(a *Actor) time.Time {
	now := s.deps.Clock.Now()
	took := a.Step(s.ctx, now)
	s.deps.Observer.Stepped(a.ns, took, s.deps.Clock.Now().Sub(now))
	return now
}

// Evict stops the actors of the namespaces match selects (their
// partitions moved away): each answers what it holds, as on Stop, and
// leaves; a later message for the namespace spawns a fresh actor that
// reads its counts from the store.
//
// It returns once they are gone (or ctx ends), so their partitions' leases
// can be released with nothing of theirs still to write.
func (s *System) Evict(ctx context.Context, match func(ns string) bool) {
	s.mu.Lock()
	var gone []chan struct{}
	for ns, r := range s.actors {
		if match(ns) {
			delete(s.actors, ns)
			close(r.quit)
			gone = append(gone, r.done)
		}
	}
	s.mu.Unlock()
	for _, d := range gone {
		select {
		case <-d:
		case <-ctx.Done():
			return
		}
	}
}

// passivate removes an idle actor unless a message slipped in.
func (s *System) passivate(r *running) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.actor.Pending() > 0 || s.stopped {
		return false
	}
	delete(s.actors, r.actor.ns)
	return true
}

// SetHandOff gives the system where a message goes once it stopped:
// handOff passes it to the namespace's actor on another node and says so,
// or returns false (it is then answered UNAVAILABLE). A message sent after
// Stop began was never taken by an actor, so passing it on acts on it
// once. On a node leaving a cluster its namespaces' calls still arrive
// for a moment (on their way when it left); they go to the new owners.
func (s *System) SetHandOff(handOff func(ns string, m *Message) bool) {
	s.mu.Lock()
	s.handOff = handOff
	s.mu.Unlock()
}

// Stop refuses new messages, lets every actor answer what it holds, and
// waits for them (or ctx).
func (s *System) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		for _, r := range s.actors {
			close(r.quit)
		}
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
