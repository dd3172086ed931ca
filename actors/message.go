package actors

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/flexiq/flexiq/api"
)

// Op is what a message asks of a namespace.
type Op int

// The operations a namespace actor serves.
const (
	OpEnqueue Op = iota + 1
	OpClaim
	OpHeartbeat
	OpAck
	OpNack
	OpEvent
	OpReplay
	// OpWake asks nothing (Body nil): it only brings the namespace's actor
	// up, which loads its running jobs and so expires their leases as
	// they run out. A node sends it for the namespaces it takes over.
	OpWake
)

func (o Op) String() string {
	switch o {
	case OpEnqueue:
		return "enqueue"
	case OpClaim:
		return "claim"
	case OpHeartbeat:
		return "heartbeat"
	case OpAck:
		return "ack"
	case OpNack:
		return "nack"
	case OpEvent:
		return "event"
	case OpReplay:
		return "replay"
	case OpWake:
		return "wake"
	}
	return "unknown"
}

// Message is one request to a namespace actor. Body holds the decoded
// request of Op (*api.EnqueueRequest, *api.ClaimRequest, …), already
// validated for shape. Reply is called exactly once, after anything the
// request wrote is durable: from the actor's goroutine, or for an ack
// written beside the steps (Deps.OverlapAcks) from the goroutine that
// wrote it.
type Message struct {
	Op    Op
	Body  any
	Reply func(body any, err *api.Error)
	// AutoRetry marks a replay sent by the dead-letter auto-retry sweep.
	AutoRetry bool
	// Paced marks a client's call (the NATS service, gRPC): its quota
	// refusals are paced (pace.go). The node's own calls (periodic fires,
	// the sweeps, the admin door) are answered at once.
	Paced bool
	// AnswerBy, when set, is the latest a paced refusal may be held to:
	// the caller's deadline (a gRPC call's, less the time to answer), so
	// it gets its refusal rather than a deadline error.
	AnswerBy time.Time
	// Hops is how many nodes handed the call on to another (bus): it
	// bounds a hand-off loop while nodes disagree on the owner.
	Hops int
	// Done, when not nil, is closed once the caller has stopped waiting
	// for the answer (its context ended: a gRPC client cancelled its long
	// poll, or its deadline passed; Ask sets it). A claim whose caller is
	// gone is given no job: nobody would work it, and its lease would run
	// out with an attempt spent.
	Done <-chan struct{}
	// Listening, when not nil, says whether anybody still listens for the
	// answer: on a node with an embedded NATS server, the interest in a
	// claim's reply subject, which ends when its client's connection
	// closes. A claim parked by a process that exited is then given no
	// job instead of jobs nobody will work until their leases run out.
	// It is asked of a parked claim when it is tried again, and of every
	// claim when jobs are about to go out: a lookup in the server's
	// subscription table. A claim just sent is not asked before its write
	// (the bus passes a claim on once its client's interest has reached
	// this node's server, or after a grace: bus.Service.heard).
	Listening func() bool
	// OwnerBy, once set, ends the call's wait for its namespace's owner
	// (a hand-over, a failover, nodes disagreeing), on whichever nodes it
	// waits (bus): zero until it first waits.
	OwnerBy time.Time

	replied atomic.Bool
	box     *outbox // the actor's, set when it is sent there
}

// respond answers once; later calls do nothing. While the actor's step
// holds its answers (until its transaction commits), the answer waits in
// the outbox.
func (m *Message) respond(body any, err *api.Error) {
	if m.replied.Swap(true) {
		return
	}
	if m.box != nil && (m.box.holding || m.box.collecting) {
		m.box.held = append(m.box.held, heldReply{m: m, body: body, err: err})
		return
	}
	m.answerNow(body, err)
}

// respondNow answers once, at once, whatever the actor's outbox does: for
// answers given off the actor's goroutine (an overlapped ack write's),
// which must not touch the outbox.
func (m *Message) respondNow(body any, err *api.Error) {
	if m.replied.Swap(true) {
		return
	}
	m.answerNow(body, err)
}

// answerNow gives the answer to the caller through Reply.
func (m *Message) answerNow(body any, err *api.Error) {
	if m.Reply != nil {
		m.Reply(body, err)
	}
}

// outbox holds a step's answers until the step's transaction ends
// (holding), or, with Deps.AnswerBeside, collects them for the actor's
// answering goroutine (collecting). Only the actor's goroutine touches it.
type outbox struct {
	holding    bool
	collecting bool
	held       []heldReply
	// after are the step's reports to the metrics (Actor.observe), made
	// once its writes are committed, before its answers leave.
	after []func()
}

type heldReply struct {
	m    *Message
	body any
	err  *api.Error
}

// release makes the step's reports and delivers the held answers. With
// failed set, the step's writes did not happen: nothing is reported, and
// every answer that reported success reports failed instead (refusals
// stand: they wrote nothing).
func (b *outbox) release(failed *api.Error) {
	held, after := b.held, b.after
	b.held, b.after, b.holding = b.held[:0], b.after[:0], false
	for i, f := range after {
		after[i] = nil
		if failed == nil {
			f()
		}
	}
	for i, h := range held {
		held[i] = heldReply{}
		if failed != nil && h.err == nil {
			h.body, h.err = nil, failed
		}
		if h.m.Reply != nil {
			h.m.Reply(h.body, h.err)
		}
	}
}

// Replied reports whether the message has been answered.
func (m *Message) Replied() bool { return m.replied.Load() }

// Gone reports whether the caller has stopped waiting: Done is closed, or
// nobody listens for the answer any more (Listening).
func (m *Message) Gone() bool {
	return m.cancelled() || (m.Listening != nil && !m.Listening())
}

// cancelled reports whether Done is closed: cheap enough to ask of every
// parked claim at every step.
func (m *Message) cancelled() bool {
	if m.Done == nil {
		return false
	}
	select {
	case <-m.Done:
		return true
	default:
		return false
	}
}

// Observer receives what the actors do, for metrics. Methods must be cheap
// and must not block.
type Observer interface {
	// Outcomes counts jobs by enqueue outcome.
	Outcomes(ns string, outcome api.Outcome, n int)
	// Refused counts refused calls by reason.
	Refused(ns string, reason api.Reason)
	// Gauges reports a namespace's pending and running counts.
	Gauges(ns string, pending, running int64)
	// Claimed counts jobs handed to workers: waits holds, for each, how
	// long it had been due (since its run_at) when it went out. The slice
	// is the actor's: it is not kept past the call.
	Claimed(ns string, waits []time.Duration)
	// Settled counts how the attempts of a write ended (acked, retried,
	// dead, released; lease expiries among them), once the store applied
	// it and before its calls are answered.
	Settled(ns string, s Settled)
	// Paced counts quota refusals held past the burst (pace.go).
	Paced(ns string)
	// Stepped reports one step of ns's actor: the messages it took and
	// how long it kept the actor busy (deciding, writing to the store,
	// answering, or handing the answers over with Deps.AnswerBeside). It
	// is reported before the actor's next step begins. Steps are what a
	// namespace's calls queue for, so their
	// busy time against the wall clock says how near the namespace is to
	// its one-writer bound.
	Stepped(ns string, messages int, busy time.Duration)
}

type nopObserver struct{}

func (nopObserver) Outcomes(string, api.Outcome, int)  {}
func (nopObserver) Refused(string, api.Reason)         {}
func (nopObserver) Gauges(string, int64, int64)        {}
func (nopObserver) Claimed(string, []time.Duration)    {}
func (nopObserver) Settled(string, Settled)            {}
func (nopObserver) Paced(string)                       {}
func (nopObserver) Stepped(string, int, time.Duration) {}

// Ask sends a message of op to ns's actor through send and waits for the
// answer: its body, or the actor's refusal (an *api.Error), or ctx's
// error when the caller stops waiting first. Surfaces that may block (the
// admin door, gRPC) use it; the NATS service never waits.
func Ask(ctx context.Context, send func(ns string, m *Message), ns string, op Op, body any) (any, error) {
	type answer struct {
		body any
		err  *api.Error
	}
	// Buffered: an answer that comes after the caller left must not block
	// the actor.
	ch := make(chan answer, 1)
	send(ns, &Message{Op: op, Body: body, Done: ctx.Done(), Reply: func(b any, e *api.Error) { ch <- answer{b, e} }})
	select {
	case a := <-ch:
		if a.err != nil {
			return nil, a.err
		}
		return a.body, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
