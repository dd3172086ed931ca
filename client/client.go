// Package client is FlexiQ's Go SDK over NATS: a producer (Enqueue,
// EnqueueMany, PublishEvent, Replay) and a worker (Worker) that claims jobs,
// runs a handler, heartbeats and acks or nacks from the handler's result.
//
// Every refusal comes back as an *api.Error carrying the code, reason and
// message every other client sees for the same situation. Back off on
// RESOURCE_EXHAUSTED (QUEUE_FULL, RATE_LIMITED): a producer that keeps
// calling past its quota gets its refusals paced by the node, each up to
// 1 s late after its first 1000 (docs/protocol.md, "Refusals are paced"),
// so keep Client.Timeout above 1 s.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
)

// Client talks to FlexiQ nodes over one NATS connection.
type Client struct {
	nc *nats.Conn
	// auth is every call's header, the token's, made once and shared by
	// the calls: nats.go only reads a message's header as it publishes it.
	auth nats.Header
	// Timeout bounds a request whose context has no deadline (default
	// 10 s).
	Timeout time.Duration

	// owner is the token of the node that last answered as the owner of
	// the token's namespace (api.HeaderOwner), nil before any: calls then
	// go to that node's owner subject, straight to it, instead of to any
	// node that would forward them (docs/protocol.md).
	owner atomic.Pointer[string]

	mu sync.Mutex
	// lost ends when the connection drops. A request in flight then can
	// get no reply: the server it went through is gone, or forgot where
	// to send the reply while the client was away. It fails at once with
	// ErrConnectionLost instead of waiting out its timeout. Requests made
	// after the drop get a new lost and go out on reconnection.
	lost    context.Context
	drop    context.CancelCauseFunc
	status  chan nats.Status
	watched chan struct{}

	// replies carries the replies of every call (replies.go).
	replies replies
}

// ErrConnectionLost is the cause of a request that was in flight when the
// connection to NATS dropped. Whether a node acted on it is unknown, as
// after a timeout.
var ErrConnectionLost = errors.New("connection to NATS lost before the reply")

// New returns a client on nc authenticating with token. It watches nc's
// status until nc closes (Close closes it).
func New(nc *nats.Conn, token string) *Client {
	c := &Client{nc: nc, Timeout: 10 * time.Second, watched: make(chan struct{}),
		auth: nats.Header{api.HeaderAuthorization: []string{"Bearer " + token}}}
	c.replies.c = c
	c.lost, c.drop = context.WithCancelCause(context.Background())
	c.status = nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	go c.watch()
	if nc.IsClosed() {
		// Closed before the listener was in place: no event will come.
		nc.RemoveStatusListener(c.status)
	}
	return c
}

// watch ends the current lost on every drop, until the connection closes.
func (c *Client) watch() {
	defer close(c.watched)
	for st := range c.status {
		c.mu.Lock()
		c.drop(ErrConnectionLost)
		c.lost, c.drop = context.WithCancelCause(context.Background())
		c.mu.Unlock()
		if st == nats.CLOSED {
			c.nc.RemoveStatusListener(c.status)
		}
	}
	c.mu.Lock()
	c.drop(ErrConnectionLost)
	c.mu.Unlock()
}

// Connect dials url and returns a client owning the connection. The
// connection authenticates with token (a FlexiQ token is also the bus's
// credential) and takes the token's private inbox prefix, the only
// subjects the bus lets it subscribe to.
func Connect(url, token string, opts ...nats.Option) (*Client, error) {
	nc, err := nats.Connect(url, append(ConnectOptions(token), opts...)...)
	if errors.Is(err, nats.ErrAuthorization) {
		// The bus admits only live tokens: the same refusal as a
		// request's (UNAUTHENTICATED), not an unreachable node.
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, api.Unauthenticated())
	}
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return New(nc, token), nil
}

// ConnectOptions are the nats.go options of a connection made with token:
// its name, the token, the token's private inbox prefix, and coalesced
// writes (CoalesceWrites). Use them to dial a connection for New
// yourself.
func ConnectOptions(token string) []nats.Option {
	return []nats.Option{
		nats.Name("flexiq-client"),
		nats.Token(token),
		nats.CustomInboxPrefix(api.InboxPrefix(token)),
		CoalesceWrites(),
	}
}

// Close closes the connection.
func (c *Client) Close() {
	c.nc.Close()
	c.nc.RemoveStatusListener(c.status)
	<-c.watched
}

// Conn is the client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// ErrUnreachable wraps failures to reach any node (no responders, timeout,
// closed connection), as opposed to a node's refusal (*api.Error).
var ErrUnreachable = errors.New("flexiq: no node answered")

// call sends req on subject and decodes the reply into resp.
func (c *Client) call(ctx context.Context, subject string, req, resp any) error {
	return c.callWith(ctx, subject, req, resp, 0, 0)
}

// callWith is call for a call the node may hold for hold (a claim's
// wait_ms: its timeout is that much longer), whose reply is still taken
// for linger after its caller left (a claim's; 0 for any other call).
func (c *Client) callWith(ctx context.Context, subject string, req, resp any, hold, linger time.Duration) error {
	data, err := api.MarshalFast(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	w := wait{ctx: ctx, linger: linger}
	if _, ok := ctx.Deadline(); !ok {
		w.timeout = c.Timeout + hold
	}
	c.mu.Lock()
	w.lost = c.lost.Done()
	c.mu.Unlock()
	reply, err := c.request(w, subject, data)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, subject, err)
	}
	if e := replyError(reply); e != nil {
		return e
	}
	if resp == nil {
		return nil
	}
	if err := api.Unmarshal(reply.Data, resp); err != nil {
		return fmt.Errorf("decode %s reply: %w", subject, err)
	}
	return nil
}

// request sends one call: to the owner's subject when a reply has named
// it, else (or when nobody listens there any more: the node is gone) to
// the plain subject any node takes.
func (c *Client) request(w wait, subject string, data []byte) (*nats.Msg, error) {
	if o := c.owner.Load(); o != nil {
		msg := &nats.Msg{Subject: api.SubjectOwner(*o, subject), Data: data, Header: c.auth}
		reply, err := c.replies.request(w, msg)
		if !errors.Is(err, nats.ErrNoResponders) {
			c.noteOwner(reply)
			return reply, err
		}
		// Nobody took it, so nobody acted on it: send it again below.
		c.owner.CompareAndSwap(o, nil)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: c.auth}
	reply, err := c.replies.request(w, msg)
	c.noteOwner(reply)
	return reply, err
}

// noteOwner keeps the owner a reply names.
func (c *Client) noteOwner(reply *nats.Msg) {
	if reply == nil || reply.Header == nil {
		return
	}
	v := reply.Header.Get(api.HeaderOwner)
	if !api.ValidOwnerToken(v) {
		return
	}
	if o := c.owner.Load(); o == nil || *o != v {
		c.owner.Store(&v)
	}
}

// replyError extracts the error of a failed request: the JSON body when it
// has one, else the micro headers.
func replyError(m *nats.Msg) *api.Error {
	code := m.Header.Get(api.HeaderErrorCode)
	if code == "" {
		return nil
	}
	var body api.ErrorBody
	if json.Unmarshal(m.Data, &body) == nil && body.Error != nil && body.Error.Code != "" {
		return body.Error
	}
	status, _ := strconv.Atoi(code)
	return &api.Error{Code: api.CodeForHTTPStatus(status), Message: m.Header.Get(api.HeaderError)}
}

// Enqueue enqueues one job.
func (c *Client) Enqueue(ctx context.Context, job api.Job) (api.EnqueueResult, error) {
	res, err := c.EnqueueMany(ctx, []api.Job{job})
	if err != nil {
		return api.EnqueueResult{}, err
	}
	if len(res) != 1 {
		return api.EnqueueResult{}, fmt.Errorf("enqueue: %d results for 1 job", len(res))
	}
	return res[0], nil
}

// EnqueueMany enqueues jobs as one call: admitted or refused as a unit.
func (c *Client) EnqueueMany(ctx context.Context, jobs []api.Job) ([]api.EnqueueResult, error) {
	var reply api.EnqueueReply
	if err := c.call(ctx, api.SubjectEnqueue, enqueueBody(jobs), &reply); err != nil {
		return nil, err
	}
	return reply.Results, nil
}

// PublishEvent publishes an event: one job per matching trigger.
func (c *Client) PublishEvent(ctx context.Context, name string, payload json.RawMessage) ([]api.EnqueueResult, error) {
	var reply api.EnqueueReply
	if err := c.call(ctx, api.SubjectEvent, api.EventRequest{Name: name, Payload: payload}, &reply); err != nil {
		return nil, err
	}
	return reply.Results, nil
}

// Replay sends dead letters back through admission.
func (c *Client) Replay(ctx context.Context, ids ...string) ([]api.EnqueueResult, error) {
	var reply api.EnqueueReply
	if err := c.call(ctx, api.SubjectDeadReplay, api.ReplayRequest{IDs: ids}, &reply); err != nil {
		return nil, err
	}
	return reply.Results, nil
}

// Claim asks for up to req.Max jobs, waiting up to req.WaitMS.
//
// A caller whose ctx ends (or whose call times out) before the answer gets
// its error at once, but the client keeps listening for that answer (for
// WaitMS plus Timeout, or until ctx's deadline if later): a node cannot
// tell that a caller left, and jobs it hands to one would stay leased to
// nobody, an attempt spent, until their leases ran out. Jobs that come
// back that way are released (Release: pending again, the attempt not
// spent).
func (c *Client) Claim(ctx context.Context, req api.ClaimRequest) ([]api.Job, error) {
	hold := time.Duration(req.WaitMS) * time.Millisecond
	linger := c.Timeout + hold
	if d, ok := ctx.Deadline(); ok && time.Until(d) > linger {
		linger = time.Until(d)
	}
	var reply api.ClaimReply
	if err := c.callWith(ctx, api.SubjectClaim, req, &reply, hold, linger); err != nil {
		return nil, err
	}
	return reply.Jobs, nil
}

// Heartbeat extends leases; it returns the ids still held.
func (c *Client) Heartbeat(ctx context.Context, leaseMS int64, ids ...string) ([]string, error) {
	var reply api.HeartbeatReply
	if err := c.call(ctx, api.SubjectHeartbeat, api.HeartbeatRequest{IDs: ids, LeaseMS: leaseMS}, &reply); err != nil {
		return nil, err
	}
	return reply.Extended, nil
}

// Ack completes a job. attempt (0 to skip the check) guards against acking
// a job whose lease was lost and which another worker now holds.
func (c *Client) Ack(ctx context.Context, id string, attempt int64, result json.RawMessage) error {
	return c.call(ctx, api.SubjectAck, api.AckRequest{ID: id, Attempt: attempt, Result: result}, nil)
}

// AckMany completes several jobs in one request. Each entry succeeds or
// fails on its own: the result of entry i says which (Error nil: completed).
// The error is for the request as a whole (unreachable, refused).
func (c *Client) AckMany(ctx context.Context, acks []api.AckItem) ([]api.AckResult, error) {
	var reply api.AckReply
	if err := c.call(ctx, api.SubjectAck, api.AckRequest{Acks: acks}, &reply); err != nil {
		return nil, err
	}
	if len(reply.Results) != len(acks) {
		return nil, fmt.Errorf("ack: %d results for %d acks", len(reply.Results), len(acks))
	}
	return reply.Results, nil
}

// Release gives back a job claimed and never started (a worker stopping
// with jobs it took ahead of a free slot): pending again at once, in its
// place in claim order, its attempt not spent.
func (c *Client) Release(ctx context.Context, id string, attempt int64) error {
	return c.call(ctx, api.SubjectNack, api.NackRequest{ID: id, Attempt: attempt, Release: true}, nil)
}

// Nack fails a job: retried after a backoff, or dead (retry false, or its
// attempts spent).
func (c *Client) Nack(ctx context.Context, id string, attempt int64, msg string, retry bool) (api.NackReply, error) {
	var reply api.NackReply
	err := c.call(ctx, api.SubjectNack, api.NackRequest{ID: id, Attempt: attempt, Error: msg, Retry: &retry}, &reply)
	return reply, err
}
