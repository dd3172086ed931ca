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

// claimReplies receives the replies of claims on a subscription of the
// client's own, below its inbox prefix, instead of nats.go's request
// mux: nats.go forgets a request whose context ended and drops its reply,
// while a claim's reply may carry jobs leased to this caller. Here a
// reply that comes after its caller left is still taken, and its jobs are
// released. A reply costs the same hops as through nats.go's mux (the
// subscription's goroutine, then the caller's channel).
type claimReplies struct {
	c *Client

	once   sync.Once
	prefix string // a fresh inbox and a dot
	sub    *nats.Subscription
	err    error

	mu   sync.Mutex
	next uint64
	// waiting holds a channel for each claim in flight; nil for one
	// whose caller left, until its reply comes or it lingered long
	// enough.
	waiting map[string]chan *nats.Msg
}

// start subscribes, once. The subscription goes out before the first
// claim on the same connection, so the server has it by then.
func (r *claimReplies) start() error {
	r.once.Do(func() {
		r.prefix = r.c.nc.NewInbox() + "."
		r.waiting = map[string]chan *nats.Msg{}
		r.sub, r.err = r.c.nc.Subscribe(r.prefix+"*", r.deliver)
	})
	return r.err
}

// request sends msg and waits for its reply until ctx ends. If ctx ends
// first, a reply that comes within linger is still taken and its jobs
// released.
func (r *claimReplies) request(ctx context.Context, msg *nats.Msg, linger time.Duration) (*nats.Msg, error) {
	if err := ctx.Err(); err != nil {
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
	select {
	case m := <-ch:
		return replyOf(m)
	case <-ctx.Done():
	}
	r.mu.Lock()
	if _, ok := r.waiting[token]; ok {
		r.waiting[token] = nil
		r.mu.Unlock()
		time.AfterFunc(linger, func() { r.forget(token) })
		return nil, ctx.Err()
	}
	r.mu.Unlock()
	// The reply came as the caller left: it is in ch, and nobody will
	// read it but this.
	r.releaseLate(<-ch)
	return nil, ctx.Err()
}

func (r *claimReplies) forget(token string) {
	r.mu.Lock()
	delete(r.waiting, token)
	r.mu.Unlock()
}

// deliver is the subscription's handler: a reply goes to its caller, or,
// if the caller left, its jobs go back.
func (r *claimReplies) deliver(m *nats.Msg) {
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
		// goroutine, which carries every claim's reply.
		go r.releaseLate(m)
	}
}

// replyOf is a claim's reply, or nats.ErrNoResponders for the server's
// word that nobody listens on the subject.
func replyOf(m *nats.Msg) (*nats.Msg, error) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	return m, nil
}

// releaseLate gives back the jobs of a claim whose caller left. A release
// that fails leaves the job to its lease, as without this.
func (r *claimReplies) releaseLate(m *nats.Msg) {
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
