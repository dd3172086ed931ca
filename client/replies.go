package client

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
)

// replies receives the replies of the client's calls on a subscription
// of its own, below its inbox prefix, instead of nats.go's request mux,
// for two reasons:
//
//   - nats.go forgets a request whose context ended and drops its reply,
//     while a claim's reply may carry jobs leased to this caller. Here a
//     claim's reply that comes after its caller left is still taken (for
//     linger), and its jobs are released.
//   - A call waits on its caller's context, its timeout and the
//     connection's loss at once (a select), where nats.go's mux takes one
//     context: each call then made two contexts of its own, a timer and a
//     hook on the connection's loss, about a fifth of the client's CPU a
//     call (docs/performance.md, "The Go SDK: a call's own wait").
//
// A reply costs the same hops as through nats.go's mux (the
// subscription's goroutine, then the caller's channel).
type replies struct {
	c *Client

	once   sync.Once
	prefix string // a fresh inbox and a dot
	sub    *nats.Subscription
	err    error

	// timers are the calls' timeouts, used again: a call stops its timer
	// before it goes back, and a stopped timer's channel holds nothing
	// stale (Go 1.23 on), so the call that resets it next waits afresh.
	timers sync.Pool

	mu   sync.Mutex
	next uint64
	// waiting holds a channel for each call in flight; nil for a claim
	// whose caller left, until its reply comes or it lingered long
	// enough.
	waiting map[string]chan *nats.Msg
}

// start subscribes, once. The subscription goes out before the first
// call on the same connection, so the server has it by then.
func (r *replies) start() error {
	r.once.Do(func() {
		r.prefix = r.c.nc.NewInbox() + "."
		r.waiting = map[string]chan *nats.Msg{}
		r.sub, r.err = r.c.nc.Subscribe(r.prefix+"*", r.deliver)
	})
	return r.err
}

// wait is what a call waits for besides its reply.
type wait struct {
	ctx context.Context
	// timeout ends the wait when ctx has no deadline (0: ctx's).
	timeout time.Duration
	// lost ends when the connection drops (see Client.lost).
	lost <-chan struct{}
	// linger: a claim's; how long a reply that comes after the caller
	// left is still taken, so that its jobs can be released (0: not
	// taken).
	linger time.Duration
}

// request sends msg and waits for its reply until w ends: its context,
// its timeout, or the connection's loss (ErrConnectionLost).
func (r *replies) request(w wait, msg *nats.Msg) (*nats.Msg, error) {
	if err := w.ctx.Err(); err != nil {
		return nil, err // gone before it was sent: nothing to take back
	}
	if err := r.start(); err != nil {
		return nil, err
	}
	ch := make(chan *nats.Msg, 1)
	r.mu.Lock()
	r.next++
	token := strconv.FormatUint(r.next, 36)
	r.waiting[token] = ch
	r.mu.Unlock()
	msg.Reply = r.prefix + token
	if err := r.c.nc.PublishMsg(msg); err != nil {
		r.forget(token)
		return nil, err
	}
	var expired <-chan time.Time
	if w.timeout > 0 {
		t, _ := r.timers.Get().(*time.Timer)
		if t == nil {
			t = time.NewTimer(w.timeout)
		} else {
			t.Reset(w.timeout)
		}
		defer func() {
			t.Stop()
			r.timers.Put(t)
		}()
		expired = t.C
	}
	var err error
	select {
	case m := <-ch:
		return replyOf(m)
	case <-w.ctx.Done():
		err = w.ctx.Err()
	case <-expired:
		err = context.DeadlineExceeded
	case <-w.lost:
		err = ErrConnectionLost
	}
	if w.linger <= 0 {
		r.forget(token)
		return nil, err
	}
	r.mu.Lock()
	if _, ok := r.waiting[token]; ok {
		r.waiting[token] = nil
		r.mu.Unlock()
		time.AfterFunc(w.linger, func() { r.forget(token) })
		return nil, err
	}
	r.mu.Unlock()
	// The reply came as the caller left: it is in ch, and nobody will
	// read it but this.
	r.releaseLate(<-ch)
	return nil, err
}

func (r *replies) forget(token string) {
	r.mu.Lock()
	delete(r.waiting, token)
	r.mu.Unlock()
}

// deliver is the subscription's handler: a reply goes to its caller, or,
// if a claim's caller left, its jobs go back.
func (r *replies) deliver(m *nats.Msg) {
	token := strings.TrimPrefix(m.Subject, r.prefix)
	r.mu.Lock()
	ch, ok := r.waiting[token]
	delete(r.waiting, token)
	r.mu.Unlock()
	switch {
	case !ok:
	case ch != nil:
		ch <- m
	default:
		// Releasing takes round trips: not on the subscription's
		// goroutine, which carries every call's reply.
		go r.releaseLate(m)
	}
}

// replyOf is a call's reply, or nats.ErrNoResponders for the server's
// word that nobody listens on the subject.
func replyOf(m *nats.Msg) (*nats.Msg, error) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	return m, nil
}

// releaseLate gives back the jobs of a claim whose caller left. A release
// that fails leaves the job to its lease, as without this.
func (r *replies) releaseLate(m *nats.Msg) {
	if _, err := replyOf(m); err != nil || replyError(m) != nil {
		return
	}
	var reply api.ClaimReply
	if api.Unmarshal(m.Data, &reply) != nil {
		return
	}
	for _, j := range reply.Jobs {
		ctx, cancel := context.WithTimeout(context.Background(), r.c.Timeout)
		_ = r.c.Release(ctx, j.ID, j.Attempt)
		cancel()
	}
}
