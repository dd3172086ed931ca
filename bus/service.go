package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
)

// Sender delivers a message to a namespace's actor (actors.System).
type Sender interface {
	Send(ns string, m *actors.Message)
}

// Authenticator resolves the Authorization header (auth.Authenticator).
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (auth.Principal, *api.Error)
}

// Service is the flexiq micro service on one connection.
type Service struct {
	nc     *nats.Conn
	svc    micro.Service
	sender Sender
	authn  Authenticator
	log    *slog.Logger
	ctx    context.Context

	// ownSubs is how many subscriptions the service added (endpoints and
	// the $SRV verbs): Stop waits until draining has removed them.
	ownSubs  int
	inflight atomic.Int64
	// parked counts calls waiting for their namespace's owner, or for
	// their caller's interest to reach this node's server (heard).
	parked atomic.Int64
	// held counts the claims waiting for their caller's interest; past
	// holdMax more go on at once (every input bounded).
	held    atomic.Int64
	holdMax int64
	// forwards counts calls this node passed on to their owner.
	forwards atomic.Int64

	// router, on a clustered node, says which node owns a namespace;
	// calls for another node's namespace are forwarded there (nil: every
	// namespace is this node's).
	router Router
	// interest, with an embedded server, tells whether anyone listens on
	// a subject: a call is not forwarded to an owner that is gone (its
	// server dropped its subscriptions), since the caller would then wait
	// out its timeout; it waits for the placement to move instead.
	interest func(subject string) bool
	nodeID   string
	fwd      *nats.Subscription
	handles  map[string]func(in inbound)

	// direct is this node's owner subject (api.SubjectOwner): clients
	// whose namespace it owns send their calls there. lastDirect is when a
	// call last came in on it or on fwd (unix ns): StopDirect waits for
	// both to fall quiet before it stops listening.
	direct     *nats.Subscription
	lastDirect atomic.Int64
	// cancel ends the service's context (parked calls, authentication):
	// at StopDirect, once nothing can reach this node any more.
	cancel context.CancelFunc
	// now is the service's clock (time.Now).
	now func() time.Time
	// hearGrace bounds a claim's wait for its caller's interest, and
	// hearEvery is how often it is looked up meanwhile (heard).
	hearGrace, hearEvery time.Duration

	// stopped and directStopped make Stop and StopDirect act once.
	stopped, directStopped sync.Once
}

// Router places namespaces on nodes (cluster.Cluster).
type Router interface {
	// Owner is the node that owns ns now; mine says it is this one.
	// owner is "" while no node holds it.
	Owner(ns string) (owner string, mine bool)
	// Changed is closed at the next change of placement.
	Changed() <-chan struct{}
	// Kick asks for a placement round now.
	Kick()
	// Leaving is closed once this node has begun to leave the cluster:
	// its placement no longer moves, so a call for a namespace not its
	// own is passed on at once, marked to wait at the receiver rather
	// than come back, and nothing waits here.
	Leaving() <-chan struct{}
}

// inbound is a request as the service sees it: taken from a client through
// micro, or forwarded by another node.
type inbound struct {
	subject string
	data    []byte
	header  nats.Header
	reply   string
	hops    int
	// parkedUntil bounds the whole wait of a call for its namespace's
	// owner, however often it waits (nodes briefly disagreeing).
	parkedUntil time.Time
	// req is the micro request of a client's call (nil when forwarded):
	// refusals go through it so micro's stats count them. A call taken up
	// again after its handler returned has none: micro's bookkeeping of a
	// request is not safe to touch then.
	req micro.Request
	// heard says the claim's wait for its caller's interest is over.
	heard bool
}

// NewService adds the flexiq service to nc: every subject of docs/protocol.md in
// queue group "flexiq".
//
// router may be nil (a single node). On a clustered node the service also
// takes calls other nodes forward to it (SubjectForward of nodeID) and
// calls clients send straight to it (its owner subject). The service's
// context lives until StopDirect (or ctx ends).
func NewService(ctx context.Context, nc *nats.Conn, nodeID string, sender Sender, authn Authenticator, router Router, log *slog.Logger) (*Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{nc: nc, sender: sender, authn: authn, log: log, router: router, nodeID: nodeID, handles: map[string]func(inbound){}, now: time.Now,
		hearGrace: claimHearGrace, hearEvery: claimHearEvery, holdMax: maxHeldClaims}
	s.ctx, s.cancel = context.WithCancel(ctx)
	before := nc.NumSubscriptions()
	svc, err := micro.AddService(nc, micro.Config{
		Name:        api.ServiceName,
		Version:     api.ServiceVersion,
		Description: "FlexiQ multi-tenant job queue, protocol v1",
		QueueGroup:  api.QueueGroup,
		Metadata:    map[string]string{"node": nodeID},
	})
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("add flexiq service: %w", err)
	}
	s.svc = svc
	endpoints := []struct {
		name, subject string
		h             func(inbound)
	}{
		// Room for one job: most calls carry one, and the decoder would
		// otherwise make room for four (about 1 KB a call).
		{"enqueue", api.SubjectEnqueue, s.handle(actors.OpEnqueue, auth.ActEnqueue, func() validator { return &enqueueRequest{Jobs: make([]api.Job, 0, 1)} })},
		{"claim", api.SubjectClaim, s.handle(actors.OpClaim, auth.ActClaim, func() validator { return &claimRequest{} })},
		{"heartbeat", api.SubjectHeartbeat, s.handle(actors.OpHeartbeat, auth.ActHeartbeat, func() validator { return &heartbeatRequest{} })},
		{"ack", api.SubjectAck, s.handle(actors.OpAck, auth.ActAck, func() validator { return &ackRequest{} })},
		{"nack", api.SubjectNack, s.handle(actors.OpNack, auth.ActNack, func() validator { return &nackRequest{} })},
		{"event", api.SubjectEvent, s.handle(actors.OpEvent, auth.ActEvent, func() validator { return &eventRequest{} })},
		{"dead_replay", api.SubjectDeadReplay, s.handle(actors.OpReplay, auth.ActReplay, func() validator { return &replayRequest{} })},
	}
	for _, e := range endpoints {
		h := e.h
		s.handles[e.subject] = h
		if err := svc.AddEndpoint(e.name, micro.HandlerFunc(func(req micro.Request) {
			h(inbound{subject: req.Subject(), data: req.Data(), header: nats.Header(req.Headers()), reply: req.Reply(), req: req})
		}), micro.WithEndpointSubject(e.subject)); err != nil {
			s.cancel()
			_ = svc.Stop()
			return nil, fmt.Errorf("add endpoint %s: %w", e.subject, err)
		}
	}
	s.ownSubs = nc.NumSubscriptions() - before
	if router != nil {
		s.fwd, err = nc.Subscribe(api.SubjectForward(nodeID), s.forwarded)
		if err == nil {
			s.direct, err = nc.Subscribe(api.SubjectOwner(api.OwnerToken(nodeID), ">"), s.directed)
		}
		if err != nil {
			s.cancel()
			_ = svc.Stop()
			if s.fwd != nil {
				_ = s.fwd.Unsubscribe()
			}
			return nil, fmt.Errorf("subscribe to forwarded and direct calls: %w", err)
		}
	}
	return s, nil
}

// directed takes a call a client sent straight to this node, the owner its
// last reply named. It is routed like any call: the owner in the subject
// is only where the client expected it to be.
func (s *Service) directed(m *nats.Msg) {
	s.lastDirect.Store(s.now().UnixNano())
	_, subject, ok := api.ParseOwnerSubject(m.Subject)
	h, known := s.handles[subject]
	if !ok || !known {
		s.publishReply(m.Reply, false, nil, api.Errorf(api.CodeNotFound, "", "no such subject: %s", m.Subject))
		return
	}
	h(inbound{subject: subject, data: m.Data, header: m.Header, reply: m.Reply})
}

// Forwarding headers: the subject the client called, how many nodes the
// call has crossed, and what is left of its wait for an owner
// (inbound.parkedUntil, in milliseconds) once it has waited.
const (
	headerForwardSubject = "Fq-Subject"
	headerForwardHops    = "Fq-Hops"
	headerForwardOwnerMS = "Fq-Owner-Within"
	// maxHops bounds forwarding while nodes disagree on placement: a call
	// then waits for the placement to settle instead.
	maxHops = 2
	// parkFor bounds how long a call waits for its namespace's owner
	// (a move, a failover) before it is refused as UNAVAILABLE.
	parkFor = 5 * time.Second
)

// SetInterest gives the service its embedded server's subscription
// interest (server.Account.SubscriptionInterest).
func (s *Service) SetInterest(f func(subject string) bool) { s.interest = f }

// listening is a claim's actors.Message.Listening: with an embedded
// server, whether the client still listens on the reply subject (its
// interest, which the routes carry to every node of a cluster, ends when
// its connection closes). Without one, or for other calls, nil.
func (s *Service) listening(op actors.Op, reply string) func() bool {
	if op != actors.OpClaim || s.interest == nil || reply == "" {
		return nil
	}
	interest := s.interest
	return func() bool { return interest(reply) }
}

// Bounds of heard's wait.
const (
	claimHearGrace = time.Second
	claimHearEvery = 5 * time.Millisecond
	maxHeldClaims  = 1024
)

// heard reports whether claim in may go on now: its reply subject has
// interest on this node's server. In a cluster a client's call can reach
// a node (a queue member or an owner the call is forwarded to) before the
// client's interest in its reply subject does, through the routes; the
// claim's reply, and the jobs in it, would then be lost
// (docs/protocol.md, fq.v1.claim; actors.Message.Listening would also take
// such a claim for one whose caller left, and give its jobs back). So the claim is held, off the
// handler's goroutine, until that interest shows or hearGrace passes
// (then it goes on, and the actor decides as for a caller that left), and
// h takes it up again. On one node (no router: no routes), a client's
// interest always comes before its call, so nothing is asked; without an
// embedded server, or with maxHeldClaims held already, it goes on at once.
func (s *Service) heard(in inbound, h func(inbound)) bool {
	if in.heard || in.reply == "" || s.router == nil || s.interest == nil || s.interest(in.reply) {
		return true
	}
	if s.held.Add(1) > s.holdMax {
		s.held.Add(-1)
		return true
	}
	s.inflight.Add(1)
	s.parked.Add(1)
	in.heard, in.req = true, nil
	until := s.now().Add(s.hearGrace)
	var try func()
	try = func() {
		if !s.interest(in.reply) && s.now().Before(until) && s.ctx.Err() == nil {
			time.AfterFunc(s.hearEvery, try)
			return
		}
		s.held.Add(-1)
		h(in)
		s.parked.Add(-1)
		s.inflight.Add(-1)
	}
	s.log.Debug("claim held until its caller's interest reaches this node")
	time.AfterFunc(s.hearEvery, try)
	return false
}

// forwardable says a call can be forwarded to owner now.
func (s *Service) forwardable(owner string) bool {
	if owner == "" || owner == s.nodeID {
		return false
	}
	return s.interest == nil || s.interest(api.SubjectForward(owner))
}

// forwarded takes a call another node forwarded here.
func (s *Service) forwarded(m *nats.Msg) {
	s.lastDirect.Store(s.now().UnixNano())
	subject := m.Header.Get(headerForwardSubject)
	h, ok := s.handles[subject]
	if !ok {
		s.log.Warn("forwarded call to an unknown subject dropped", "len", len(subject))
		return
	}
	hops, _ := strconv.Atoi(m.Header.Get(headerForwardHops))
	within, _ := strconv.ParseInt(m.Header.Get(headerForwardOwnerMS), 10, 64)
	h(inbound{subject: subject, data: m.Data, header: m.Header, reply: m.Reply, hops: hops, parkedUntil: endIn(s.now(), within, parkFor)})
}

// route sends the call to the node that owns ns: here it returns true and
// the caller hands it to the actor; elsewhere it is forwarded (the owner
// answers the client directly) or, while no node holds ns or the nodes
// disagree, it waits for the placement to settle.
func (s *Service) route(in inbound, ns string, again func(inbound)) bool {
	if s.router == nil {
		return true
	}
	owner, mine := s.router.Owner(ns)
	left := isClosed(s.router.Leaving())
	switch {
	case mine:
		return true
	case s.forwardable(owner) && (in.hops < maxHops || left):
		hops := in.hops + 1
		if left {
			// The owner may not hold ns yet and still see this node as
			// its owner: it waits for its placement to move on rather
			// than send the call back.
			hops = maxHops
		}
		msg := &nats.Msg{Subject: api.SubjectForward(owner), Reply: in.reply, Data: in.data, Header: nats.Header{}}
		for k, v := range in.header {
			msg.Header[k] = v
		}
		msg.Header.Set(headerForwardSubject, in.subject)
		msg.Header.Set(headerForwardHops, strconv.Itoa(hops))
		// A call that waited here before goes on with what is left of its
		// wait: nodes that keep disagreeing bounce it for parkFor in all,
		// not parkFor at each node it reaches.
		msg.Header.Del(headerForwardOwnerMS)
		if ms := timeLeftMS(s.now(), in.parkedUntil); ms > 0 {
			msg.Header.Set(headerForwardOwnerMS, strconv.FormatInt(ms, 10))
		}
		s.forwards.Add(1)
		if err := s.nc.PublishMsg(msg); err != nil {
			s.fail(in, api.Errorf(api.CodeUnavailable, "", "cannot forward to the node owning the namespace: %v", err))
		}
		return false
	case left:
		// No other node to pass it to, and this one no longer follows
		// the placement: nothing to wait for here.
		s.fail(in, api.Errorf(api.CodeUnavailable, "", "no node holds namespace '%s' now; try again", ns))
		return false
	}
	// This node should own ns and does not hold it yet, or no node does,
	// or nodes disagree: wait for the next placement (a hand-over or a
	// failover), then try again. The wait is off the handler's goroutine.
	if in.parkedUntil.IsZero() {
		in.parkedUntil = s.now().Add(parkFor)
	}
	since := s.router.Changed()
	s.inflight.Add(1)
	s.parked.Add(1)
	in.req = nil // taken up again after its handler returned
	go func() {
		defer s.inflight.Add(-1)
		defer s.parked.Add(-1)
		// A call forwarded maxHops times already (nodes disagree) waits
		// for the placement to move on before it is forwarded again.
		usable := func(o string, m, moved bool) bool { return m || (s.forwardable(o) && (in.hops < maxHops || moved)) }
		switch err := awaitOwner(s.ctx, s.router, ns, since, s.router.Leaving(), usable, in.parkedUntil, nil); {
		case err == nil:
			in.hops = 0
			again(in)
		case errors.Is(err, errNoOwner):
			s.fail(in, api.Errorf(api.CodeUnavailable, "", "no node holds namespace '%s' now; try again", ns))
		default:
			s.fail(in, actors.ErrStopping)
		}
	}()
	return false
}

// errNoOwner: no usable owner came before the wait's end.
var errNoOwner = errors.New("no owner")

// awaitOwner waits until ns's owner, as router sees it, is usable (this
// node, or another that can be reached; moved says the placement changed
// since the wait began), until until (errNoOwner) or the end of ctx. It is
// the one wait of a call for its namespace's owner (a hand-over, a
// failover, nodes disagreeing), whichever surface the call came by.
//
// since is router.Changed() as it was when the call arrived, so a change
// between then and the wait's start counts. left is closed when this node
// is leaving the cluster: its placement no longer moves, so the wait ends
// at once, the placement counting as moved.
//
// blocked, if not nil, is called each time the wait blocks (tests watch
// it).
func awaitOwner(ctx context.Context, router Router, ns string, since, left <-chan struct{}, usable func(owner string, mine, moved bool) bool, until time.Time, blocked func()) error {
	router.Kick()
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()
	moved := false
	changed := since
	for {
		select {
		case <-changed:
			moved = true
			changed = router.Changed()
		default:
		}
		hasLeft := isClosed(left)
		if owner, mine := router.Owner(ns); usable(owner, mine, moved || hasLeft) {
			return nil
		}
		if hasLeft {
			return errNoOwner // its placement will not move on
		}
		if blocked != nil {
			blocked()
		}
		select {
		case <-changed:
			moved = true
			changed = router.Changed()
		case <-left:
		case <-deadline.C:
			return errNoOwner
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// validator is a request body that can check its own shape and says what
// the actor receives.
type validator interface {
	validate() error
	body() any
}

// handle builds an endpoint's handler. It never blocks on the namespace:
// the actor answers later by publishing to the reply subject itself.
func (s *Service) handle(op actors.Op, act auth.Action, newBody func() validator) func(inbound) {
	var h func(in inbound)
	h = func(in inbound) {
		p, aerr := s.authn.Authenticate(s.ctx, in.header.Get(api.HeaderAuthorization))
		if aerr != nil {
			s.fail(in, aerr)
			return
		}
		if aerr := p.Allow(act); aerr != nil {
			s.fail(in, aerr)
			return
		}
		if op == actors.OpClaim && !s.heard(in, h) {
			return
		}
		if !s.route(in, p.Namespace, h) {
			return
		}
		v := newBody()
		if err := api.Decode(in.data, v); err != nil {
			s.fail(in, api.FromError(err))
			return
		}
		if err := v.validate(); err != nil {
			s.fail(in, api.FromError(err))
			return
		}
		reply := in.reply
		named := s.router != nil
		s.inflight.Add(1)
		if sp, ok := v.(splitter); ok {
			if parts := sp.parts(); parts != nil {
				s.sendParts(p.Namespace, op, reply, named, sp, parts)
				return
			}
		}
		s.sender.Send(p.Namespace, &actors.Message{
			Op:        op,
			Body:      v.body(),
			Paced:     true,
			Listening: s.listening(op, reply),
			Reply: func(body any, e *api.Error) {
				defer s.inflight.Add(-1)
				s.publishReply(reply, named, body, e)
			},
		})
	}
	return h
}

// splitter is a request that carries several independent requests (a
// batched ack): parts are sent to the actor one by one and gather turns
// their answers into the one reply.
type splitter interface {
	parts() []any
	gather(errs []*api.Error) any
}

func (s *Service) sendParts(ns string, op actors.Op, reply string, named bool, sp splitter, parts []any) {
	errs := make([]*api.Error, len(parts))
	var left atomic.Int64
	left.Store(int64(len(parts)))
	for i, part := range parts {
		s.sender.Send(ns, &actors.Message{
			Op:    op,
			Body:  part,
			Paced: true,
			Reply: func(_ any, e *api.Error) {
				// Each part is answered once, so each slot is written by
				// one goroutine; the last answer publishes.
				errs[i] = e
				if left.Add(-1) == 0 {
					defer s.inflight.Add(-1)
					s.publishReply(reply, named, sp.gather(errs), nil)
				}
			},
		})
	}
}

// fail answers a refusal: through micro for a client's call, so its stats
// count the error; by publishing for a forwarded one.
func (s *Service) fail(in inbound, e *api.Error) {
	if in.req == nil {
		s.publishReply(in.reply, false, nil, e)
		return
	}
	body, _ := api.Marshal(api.ErrorBody{Error: e})
	if err := in.req.Error(strconv.Itoa(api.HTTPStatus(e.Code)), errorHeader(e), body); err != nil {
		s.log.Debug("cannot answer request", "err", err)
	}
}

// errorHeader is the Nats-Service-Error value: the message (micro refuses
// an empty description).
func errorHeader(e *api.Error) string {
	if e.Message == "" {
		return string(e.Code)
	}
	return e.Message
}

// publishReply answers asynchronously. It publishes on the connection
// itself rather than through micro.Request, whose bookkeeping is not safe
// to touch once the handler has returned. named says this node answers as
// the caller's namespace's owner: it names itself (api.HeaderOwner) so the
// caller's next calls can come straight here.
func (s *Service) publishReply(reply string, named bool, body any, e *api.Error) {
	if reply == "" {
		return
	}
	msg := &nats.Msg{Subject: reply}
	if named {
		msg.Header = nats.Header{api.HeaderOwner: []string{api.OwnerToken(s.nodeID)}}
	}
	if e != nil {
		if msg.Header == nil {
			msg.Header = nats.Header{}
		}
		msg.Header.Set(api.HeaderErrorCode, strconv.Itoa(api.HTTPStatus(e.Code)))
		msg.Header.Set(api.HeaderError, errorHeader(e))
		msg.Data, _ = api.Marshal(api.ErrorBody{Error: e})
	} else {
		data, err := api.Marshal(body)
		if err != nil {
			s.log.Error("cannot encode reply", "err", err)
			data, _ = api.Marshal(api.ErrorBody{Error: api.Errorf(api.CodeInternal, "", "internal error")})
		}
		msg.Data = data
	}
	if s.interest != nil && s.log.Enabled(s.ctx, slog.LevelDebug) && !s.interest(reply) {
		// Nobody would get it: the caller's connection closed, or (in a
		// cluster) its interest has not reached this node's server. Said
		// at debug only: asking costs a lookup a reply.
		s.log.Debug("reply dropped: no one listens on its subject here", "reply", reply, "error", e != nil)
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Warn("cannot publish reply", "err", err)
	}
}

// Stop stops taking requests on the plain subjects: every endpoint's
// subscription is drained, so requests already delivered to this node
// still reach their actors. It returns when the drain is done (or ctx
// ends). Calls sent straight to this node or forwarded to it are still
// taken until StopDirect; the actors then answer what they hold; the
// connection must stay open until they have.
func (s *Service) Stop(ctx context.Context) error {
	var err error
	s.stopped.Do(func() { err = s.stop(ctx) })
	return err
}

func (s *Service) stop(ctx context.Context) error {
	target := s.nc.NumSubscriptions() - s.ownSubs
	if err := s.svc.Stop(); err != nil {
		return fmt.Errorf("stop flexiq service: %w", err)
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.nc.NumSubscriptions() > target && !s.nc.IsClosed() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// isClosed says c is closed.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// How StopDirect waits for the calls on their way to this node: until
// none has come for directQuiet, at most directQuietMax.
const (
	directQuiet    = 200 * time.Millisecond
	directQuietMax = time.Second
)

// StopDirect stops taking the calls sent straight to this node and those
// other nodes forward to it. A node that left the cluster calls it once
// the others have seen it go; until then it passes such calls on to the
// namespaces' new owners, whose replies name themselves, so its callers
// move on and its subjects fall quiet. It waits for that quiet (at most
// directQuietMax, or until ctx ends) before it stops listening: a call on
// its way through a NATS route when this node's server forgets the
// subject would be dropped unanswered, and its caller would wait out its
// timeout. Then it drains both subscriptions, and also (the nodes' own
// calls on fq.internal.op.<node>, whose senders learn the new owners at
// the same time), waits for the calls still waiting for an owner to be
// sent on or refused, and ends the service's context.
func (s *Service) StopDirect(ctx context.Context, also ...*nats.Subscription) error {
	var err error
	s.directStopped.Do(func() { err = s.stopDirect(ctx, also) })
	return err
}

func (s *Service) stopDirect(ctx context.Context, also []*nats.Subscription) error {
	defer s.cancel()
	if s.direct == nil {
		return nil
	}
	start := s.now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		now := s.now()
		if now.Sub(time.Unix(0, s.lastDirect.Load())) >= directQuiet || now.Sub(start) >= directQuietMax {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	subs := []*nats.Subscription{s.direct, s.fwd}
	for _, sub := range also {
		if sub != nil {
			subs = append(subs, sub)
		}
	}
	for _, sub := range subs {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("stop direct calls: %w", err)
		}
	}
	for _, sub := range subs {
		for sub.IsValid() && !s.nc.IsClosed() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	// The calls still waiting for an owner are sent on or refused before
	// the connection closes.
	for s.parked.Load() > 0 && !s.nc.IsClosed() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Forwarded reports how many calls this node has passed on to the node
// owning their namespace (flexiq_calls_forwarded_total).
func (s *Service) Forwarded() int64 { return s.forwards.Load() }

// Inflight reports requests handed to actors and not yet answered.
func (s *Service) Inflight() int64 { return s.inflight.Load() }
