package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// Stopping a node under load loses no acknowledged enqueue, and every
// request it took is answered: none waits for a timeout.
//
// The NATS server here outlives the node (--nats-url), as in a deployment
// with a NATS cluster: a request then either reaches the node and is
// answered, or finds no responder and is told so at once. (With the
// embedded server, a request still in a client's socket when the server
// itself goes away reaches nobody, and only its timeout can end it.)
func TestGracefulStopLosesNoAcknowledgedEnqueue(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		ns := externalNATS(t)
		e := start(t, func(c *nodeConfig) { c.NATSURL = ns.ClientURL(); c.ClusterSecret = ns.secret })
		tn := e.tenant("acme")
		const producers = 8
		var (
			mu        sync.Mutex
			acked     []string
			timeouts  int
			otherErrs []error
			wg        sync.WaitGroup
			started   = make(chan struct{}, producers)
		)
		for p := 0; p < producers; p++ {
			c := e.client(tn.producer)
			c.Timeout = 4 * time.Second
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for i := 0; ; i++ {
					id := fmt.Sprintf("p%d-%d", p, i)
					j := job("q", "t")
					j.ID = id
					_, err := c.Enqueue(context.Background(), j)
					if i == 10 {
						started <- struct{}{}
					}
					mu.Lock()
					switch {
					case err == nil:
						acked = append(acked, id)
					case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
						timeouts++
					default:
						otherErrs = append(otherErrs, err)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}(p)
		}
		for p := 0; p < producers; p++ {
			<-started
		}
		e.stop()
		wg.Wait()
		if timeouts > 0 {
			t.Fatalf("%d requests went unanswered (timed out) during the stop", timeouts)
		}
		for _, err := range otherErrs {
			var ae *api.Error
			if errors.As(err, &ae) && ae.Code != api.CodeUnavailable {
				t.Fatalf("a request failed with %s during the stop, want UNAVAILABLE or no responders", ae.Code)
			}
		}
		if len(acked) < producers*10 {
			t.Fatalf("only %d enqueues acknowledged", len(acked))
		}
		e.boot()
		// Client-chosen ids are unique per namespace, so "exists" is "exists
		// exactly once"; nothing else was enqueued than what producers sent.
		u := e.usage(tn.admin)
		if u.Usage.Pending < int64(len(acked)) {
			t.Fatalf("pending after restart %d < %d acknowledged", u.Usage.Pending, len(acked))
		}
		for _, id := range acked {
			e.mustDo(http.StatusOK, "GET", "/v1/jobs/"+id, tn.admin, nil, nil)
		}
	})
}

// A corrupted quota document stops its namespace, not others; fixing it
// resumes within the cache bound.
func TestUnreadableQuotaFailsClosed(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t, func(c *nodeConfig) { c.QuotaCacheTTL = 200 * time.Millisecond })
		a, b := e.tenant("acme"), e.tenant("globex")
		enqueued := len(enqueue(t, a.p, job("q", "t")))
		corrupt := func(value string) {
			_, err := e.node.Store.SettingPut(context.Background(), store.SettingPutParams{
				Key: quota.Key("acme"), Value: []byte(value), Now: time.Now(),
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		corrupt(`{"max_pending":"lots"}`) // written behind the admin door's back: no broadcast
		// Within the TTL the node reads it again and stops acme.
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if _, err = a.p.Enqueue(ctx(t), job("q", "t")); err != nil {
				break
			}
			enqueued++
			waitFor(50 * time.Millisecond)
		}
		wantAPIError(t, err, api.CodeFailedPrecondition, api.ReasonQuotaUnreadable, "")
		if got := claim(t, a.w, 10, "q"); len(got) != 0 {
			t.Fatalf("a stopped namespace dispatched %d jobs", len(got))
		}
		if j := e.job(a.admin, listIDs(t, e, a.admin)[0]); j.Attempt != 0 || j.Status != api.StatusPending {
			t.Fatalf("held job: %s attempt %d", j.Status, j.Attempt)
		}
		// globex runs on.
		enqueue(t, b.p, job("q", "t"))
		if got := claim(t, b.w, 10, "q"); len(got) != 1 {
			t.Fatalf("globex claimed %d, want 1", len(got))
		}
		// Clearing it through the admin door resumes at once.
		e.mustDo(http.StatusOK, "DELETE", "/v1/quota", a.admin, nil, nil)
		enqueue(t, a.p, job("q", "t"))
		if got := claim(t, a.w, 100, "q"); len(got) != enqueued+1 {
			t.Fatalf("acme claimed %d after the fix, want %d", len(got), enqueued+1)
		}
	})
}

func listIDs(t *testing.T, e *env, token string) []string {
	t.Helper()
	var l JobsList
	e.mustDo(http.StatusOK, "GET", "/v1/jobs", token, nil, &l)
	return ids(l.Jobs)
}

// waitFor pauses a polling loop between tries of a condition with a
// deadline (never as a timing assertion).
func waitFor(d time.Duration) { <-time.After(d) }

// A quota change through the admin door is enforced by the very next
// enqueue, on the same node and with nothing but the broadcast.
func TestQuotaChangeIsEnforcedByTheNextEnqueue(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t, func(c *nodeConfig) { c.QuotaCacheTTL = time.Hour }) // only the broadcast can do it
		tn := e.tenant("acme")
		enqueue(t, tn.p, job("q", "t"))
		e.setQuota(tn.admin, `{"max_pending":1}`)
		_, err := tn.p.Enqueue(ctx(t), job("q", "t"))
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 1 pending >= max_pending 1")
		e.setQuota(tn.admin, `{"max_pending":2}`)
		enqueue(t, tn.p, job("q", "t"))
	})
}
