package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
)

// The node's own calls (the admin door's dead-letter replay, periodic
// fires, the auto-retry sweep, every gRPC call) reach a namespace's actor
// wherever it lives: here, or on its owner over fq.internal.op.<node>.
// They were authenticated where they entered; only nodes may publish
// below fq.internal (docs/protocol.md), so these carry no token.

// internalOp is a node's call forwarded to the owner of its namespace.
type internalOp struct {
	Namespace string          `json:"namespace"`
	Op        actors.Op       `json:"op"`
	Body      json.RawMessage `json:"body"`
	AutoRetry bool            `json:"auto_retry,omitempty"`
	// Paced: a client's call (actors.Message.Paced); AnswerWithinMS its
	// Message.AnswerBy, as the time left when sent (nodes' clocks differ).
	Paced          bool  `json:"paced,omitempty"`
	AnswerWithinMS int64 `json:"answer_within_ms,omitempty"`
	// Hops counts the nodes that handed the call on (actors.Message.Hops).
	Hops int `json:"hops,omitempty"`
	// OwnerWithinMS is Message.OwnerBy as the time left when sent: what
	// remains of the call's wait for its namespace's owner.
	OwnerWithinMS int64 `json:"owner_within_ms,omitempty"`
	// Invalidate, instead of a call, tells the owner to drop its copy of
	// the namespace's quota (Revision > 0) or configuration.
	Invalidate bool  `json:"invalidate,omitempty"`
	Revision   int64 `json:"revision,omitempty"`
}

// internalReply is its answer.
type internalReply struct {
	Body  json.RawMessage `json:"body,omitempty"`
	Error *api.Error      `json:"error,omitempty"`
}

// RoutedSender sends a node's own calls to the namespace's owner.
type RoutedSender struct {
	// Node is this node's id.
	Node   string
	NC     *nats.Conn
	Local  Sender
	Router Router
	Log    *slog.Logger
	// Timeout bounds a forwarded call (default 30 s).
	Timeout time.Duration
	// Interest, with an embedded server, tells whether anyone listens on
	// a subject (server.Account.SubscriptionInterest): HandOff passes no
	// call to a node that is gone.
	Interest func(subject string) bool

	// pending counts the calls sent to other nodes and not answered yet,
	// and those waiting for an owner. A counter, not a WaitGroup: calls
	// may still start (a gRPC handler finishing) while Wait watches it.
	pending atomic.Int64
	// blocked counts the times a call's wait for an owner blocked.
	blocked atomic.Int64
	// Closing is closed when the node begins to stop: a long poll
	// forwarded to another node asks for no further piece (forwardPoll).
	Closing <-chan struct{}
}

// forwardPoll bounds the wait of a claim forwarded to another node: a
// longer long poll is asked for piece by piece, each routed afresh, until
// a piece brings jobs or the wait is spent. The owner cannot see this
// node's caller leave, nor this node stop; between pieces this node can,
// and asks for no more, so no job is leased to a caller that is gone (its
// lease would run out with an attempt spent) and a stop is not held up by
// a long poll elsewhere.
const forwardPoll = time.Second

// Wait returns once every call forwarded to another node has been
// answered (or ctx ends): a stopping node keeps its connection open until
// then, so the answers of the calls it handed off reach their callers.
func (r *RoutedSender) Wait(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for r.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Send delivers m to ns's actor, on this node or its owner. While no
// node can take it (this node should own ns and does not hold it yet, or
// no node does: a hand-over, a failover), or it was handed on maxHops
// times already (nodes disagree), it waits up to 5 s for the placement to
// settle, as a client's call on the bus does; then the local actor
// answers that the namespace is moving.
func (r *RoutedSender) Send(ns string, m *actors.Message) {
	if r.Router == nil {
		r.Local.Send(ns, m)
		return
	}
	owner, mine := r.Router.Owner(ns)
	left := isClosed(r.Router.Leaving())
	switch {
	case mine:
		r.Local.Send(ns, m)
	case r.reachable(owner) && (m.Hops < maxHops || left):
		if left {
			m.Hops = maxHops - 1 // waits at the owner (HandOff)
		}
		r.forward(owner, ns, m)
	case left:
		// No other node to pass it to: the local actors refuse it
		// (UNAVAILABLE).
		r.Local.Send(ns, m)
	default:
		since := r.Router.Changed()
		r.pending.Add(1)
		go func() {
			defer r.pending.Add(-1)
			// A call handed on maxHops times already (nodes disagree)
			// waits for the placement to move on before it goes again.
			usable := func(o string, mine, moved bool) bool { return mine || (r.reachable(o) && (m.Hops < maxHops || moved)) }
			if m.OwnerBy.IsZero() {
				m.OwnerBy = time.Now().Add(parkFor)
			}
			if awaitOwner(context.Background(), r.Router, ns, since, r.Router.Leaving(), usable, m.OwnerBy, func() { r.blocked.Add(1) }) == nil {
				if owner, mine := r.Router.Owner(ns); !mine && r.reachable(owner) {
					m.Hops = 0
					if isClosed(r.Router.Leaving()) {
						m.Hops = maxHops - 1
					}
					r.forward(owner, ns, m)
					return
				}
			}
			r.Local.Send(ns, m)
		}()
	}
}

// reachable says owner is another node that takes internal calls now.
func (r *RoutedSender) reachable(owner string) bool {
	return owner != "" && owner != r.Node && (r.Interest == nil || r.Interest(api.SubjectInternalOp(owner)))
}

// HandOff passes m, which this node's stopped actors did not take, to
// ns's owner if that is another live node (actors.System.SetHandOff); it
// returns false when there is none.
func (r *RoutedSender) HandOff(ns string, m *actors.Message) bool {
	if r.Router == nil {
		return false
	}
	owner, mine := r.Router.Owner(ns)
	if mine || !r.reachable(owner) {
		return false
	}
	// The new owner may not hold the namespace yet, and may still see
	// this node as its owner: it waits for the placement to move on
	// rather than send the call back.
	m.Hops = maxHops - 1
	r.forward(owner, ns, m)
	return true
}

// forward sends m to ns's actor on owner, another node, and answers m with
// what it answers.
func (r *RoutedSender) forward(owner, ns string, m *actors.Message) {
	if c, ok := m.Body.(*api.ClaimRequest); ok && time.Duration(c.WaitMS)*time.Millisecond > forwardPoll {
		r.forwardLongPoll(owner, ns, m, c, time.Now().Add(time.Duration(c.WaitMS)*time.Millisecond))
		return
	}
	body, err := json.Marshal(m.Body)
	if err != nil {
		m.Reply(nil, api.Errorf(api.CodeInternal, "", "encode %s: %v", m.Op, err))
		return
	}
	now := time.Now()
	op := internalOp{Namespace: ns, Op: m.Op, Body: body, AutoRetry: m.AutoRetry, Paced: m.Paced, Hops: m.Hops + 1,
		AnswerWithinMS: timeLeftMS(now, m.AnswerBy), OwnerWithinMS: timeLeftMS(now, m.OwnerBy)}
	data, _ := json.Marshal(op)
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if c, ok := m.Body.(*api.ClaimRequest); ok {
		// A long poll answers after its wait.
		timeout += time.Duration(c.WaitMS) * time.Millisecond
	}
	r.pending.Add(1)
	go func() {
		defer r.pending.Add(-1)
		msg, err := r.NC.Request(api.SubjectInternalOp(owner), data, timeout)
		if err != nil {
			m.Reply(nil, api.Errorf(api.CodeUnavailable, "", "the node owning namespace '%s' did not answer: %v", ns, err))
			return
		}
		var rep internalReply
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			m.Reply(nil, api.Errorf(api.CodeInternal, "", "undecodable answer from the owner of '%s'", ns))
			return
		}
		if rep.Error != nil {
			m.Reply(nil, rep.Error)
			return
		}
		out, err := decodeReply(m.Op, rep.Body)
		if err != nil {
			m.Reply(nil, api.Errorf(api.CodeInternal, "", "undecodable answer from the owner of '%s'", ns))
			return
		}
		if claimed, ok := out.(api.ClaimReply); ok && len(claimed.Jobs) > 0 && m.Gone() {
			// The caller left while the owner handed these out: give
			// them back unstarted rather than lease them to nobody.
			r.release(ns, claimed.Jobs)
			out = api.ClaimReply{Jobs: []api.Job{}}
		}
		m.Reply(out, nil)
	}()
}

// release gives jobs a gone caller was handed back to ns's actor, pending
// again with their attempt unspent (a nack with release, as a worker that
// stops gives back the jobs it took ahead).
func (r *RoutedSender) release(ns string, jobs []api.Job) {
	for _, j := range jobs {
		id := j.ID
		r.Send(ns, &actors.Message{Op: actors.OpNack, Body: &api.NackRequest{ID: id, Attempt: j.Attempt, Release: true},
			Reply: func(_ any, e *api.Error) {
				if e != nil && r.Log != nil {
					r.Log.Warn("a job handed to a caller that left was not given back; it comes back when its lease runs out", "namespace", ns, "job", id, "err", e.Message)
				}
			}})
	}
}

// forwardLongPoll forwards a piece of claim c (m's body) to owner, and
// while the pieces bring no job, the wait is not spent, the caller is
// there and the node is not stopping, sends the rest as a new call, routed
// afresh (the owner may have moved, or be this node now).
func (r *RoutedSender) forwardLongPoll(owner, ns string, m *actors.Message, c *api.ClaimRequest, until time.Time) {
	piece := *c
	piece.WaitMS = min(time.Until(until), forwardPoll).Milliseconds()
	last := piece.WaitMS == c.WaitMS
	pm := &actors.Message{Op: m.Op, Body: &piece, Paced: m.Paced, AnswerBy: m.AnswerBy, Hops: m.Hops, OwnerBy: m.OwnerBy, Done: m.Done}
	pm.Reply = func(body any, e *api.Error) {
		if e != nil || last || m.Gone() || isClosed(r.Closing) || time.Until(until) <= 0 {
			m.Reply(body, e)
			return
		}
		if reply, ok := body.(api.ClaimReply); !ok || len(reply.Jobs) > 0 {
			m.Reply(body, e)
			return
		}
		rest := *c
		rest.WaitMS = max(time.Until(until).Milliseconds(), 0)
		r.Send(ns, &actors.Message{Op: m.Op, Body: &rest, Reply: m.Reply, Paced: m.Paced, AnswerBy: m.AnswerBy, Done: m.Done})
	}
	r.forward(owner, ns, pm)
}

// decodeReply decodes the body an actor answers op with.
func decodeReply(op actors.Op, data []byte) (any, error) {
	switch op {
	case actors.OpEnqueue, actors.OpReplay, actors.OpEvent:
		return decodeAs[api.EnqueueReply](data)
	case actors.OpClaim:
		return decodeAs[api.ClaimReply](data)
	case actors.OpHeartbeat:
		return decodeAs[api.HeartbeatReply](data)
	case actors.OpAck:
		return decodeAs[api.Empty](data)
	case actors.OpNack:
		return decodeAs[api.NackReply](data)
	}
	return nil, fmt.Errorf("op %s is not forwarded", op)
}

// decodeOp decodes a forwarded call's body into what the actor takes.
func decodeOp(op actors.Op, data []byte) (any, error) {
	switch op {
	case actors.OpEnqueue:
		return decodePtr[api.EnqueueRequest](data)
	case actors.OpReplay:
		return decodePtr[api.ReplayRequest](data)
	case actors.OpEvent:
		return decodePtr[api.EventRequest](data)
	case actors.OpClaim:
		return decodePtr[api.ClaimRequest](data)
	case actors.OpHeartbeat:
		return decodePtr[api.HeartbeatRequest](data)
	case actors.OpAck:
		return decodePtr[api.AckRequest](data)
	case actors.OpNack:
		return decodePtr[api.NackRequest](data)
	}
	return nil, fmt.Errorf("op %s is not forwarded", op)
}

func decodeAs[T any](data []byte) (any, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

func decodePtr[T any](data []byte) (any, error) {
	v := new(T)
	err := json.Unmarshal(data, v)
	return v, err
}

// ServeInternalOps takes the calls other nodes route to this node's
// actors, and their requests to drop a cached copy (SyncPublisher).
func ServeInternalOps(nc *nats.Conn, node string, local Sender, inv Invalidator, log *slog.Logger) (*nats.Subscription, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sub, err := nc.Subscribe(api.SubjectInternalOp(node), func(msg *nats.Msg) {
		answer := func(body any, e *api.Error) {
			rep := internalReply{Error: e}
			if e == nil {
				rep.Body, _ = json.Marshal(body)
			}
			data, _ := json.Marshal(rep)
			if err := msg.Respond(data); err != nil {
				log.Debug("cannot answer an internal call", "err", err)
			}
		}
		var op internalOp
		if err := json.Unmarshal(msg.Data, &op); err != nil {
			answer(nil, api.BadRequest("undecodable internal call"))
			return
		}
		if op.Invalidate {
			if op.Revision > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), verifyTimeout)
				err := inv.InvalidateVerified(ctx, op.Namespace, op.Revision)
				cancel()
				if err != nil {
					answer(nil, api.Errorf(api.CodeUnavailable, "", "cannot verify revision %d of '%s'", op.Revision, op.Namespace))
					return
				}
			} else {
				inv.InvalidateConfig(op.Namespace)
			}
			answer(struct{}{}, nil)
			return
		}
		body, err := decodeOp(op.Op, op.Body)
		if err != nil {
			answer(nil, api.BadRequest("%v", err))
			return
		}
		now := time.Now()
		m := &actors.Message{Op: op.Op, Body: body, AutoRetry: op.AutoRetry, Paced: op.Paced, Hops: op.Hops, Reply: answer,
			AnswerBy: endIn(now, op.AnswerWithinMS, 0), OwnerBy: endIn(now, op.OwnerWithinMS, parkFor)}
		local.Send(op.Namespace, m)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to internal calls: %w", err)
	}
	return sub, nil
}

// SyncPublisher broadcasts changes like Publisher and, on a cluster, waits
// until the namespace's owner has dropped its cached copy (docs/cluster.md "Read
// your writes": once the admin door answers, every later call, decided by
// the owner, sees the change). If the owner does not confirm within
// Timeout the broadcast and the cache TTL still bound the delay.
type SyncPublisher struct {
	Publisher
	Router  Router
	Log     *slog.Logger
	Timeout time.Duration
}

// QuotaChanged broadcasts and waits for the owner.
func (p SyncPublisher) QuotaChanged(ns string, rev int64, at time.Time) error {
	err := p.Publisher.QuotaChanged(ns, rev, at)
	p.confirm(internalOp{Namespace: ns, Invalidate: true, Revision: rev})
	return err
}

// ConfigChanged broadcasts and waits for the owner.
func (p SyncPublisher) ConfigChanged(ns, kind string) error {
	err := p.Publisher.ConfigChanged(ns, kind)
	p.confirm(internalOp{Namespace: ns, Invalidate: true})
	return err
}

func (p SyncPublisher) confirm(op internalOp) {
	if p.Router == nil {
		return
	}
	owner, mine := p.Router.Owner(op.Namespace)
	if mine || owner == "" {
		return // the admin door dropped this node's copy itself
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = time.Second
	}
	data, _ := json.Marshal(op)
	if _, err := p.NC.Request(api.SubjectInternalOp(owner), data, timeout); err != nil && p.Log != nil {
		p.Log.Warn("the namespace's owner did not confirm a change; the broadcast and the cache TTL bound it", "namespace", op.Namespace, "err", err)
	}
}

// timeLeftMS is how long from now until t, in milliseconds, to send to
// another node (nodes' clocks differ, so a time crosses as the time left):
// 0 for no t, at least 1 for a t already past (0 would mean none).
func timeLeftMS(now, t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.Sub(now).Milliseconds(), 1)
}

// endIn is the time ms after now (timeLeftMS's receiving end): zero for 0
// or less, and no later than upTo from now when upTo is not 0.
func endIn(now time.Time, ms int64, upTo time.Duration) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	d := time.Duration(min(ms, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
	if upTo > 0 {
		d = min(d, upTo)
	}
	return now.Add(d)
}
