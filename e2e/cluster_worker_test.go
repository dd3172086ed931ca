package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
)

// A Go SDK worker whose leases run out while its namespace's owner is
// killed (kill -9, separate fq-node processes): the handler that was
// running sees its context end with LEASE_LOST once a heartbeat reaches
// the new owner, the jobs it held ahead never start under the lost
// attempt, and every job completes, none run twice under one attempt.
func TestClusterWorkerLetsGoOfLeasesLostInAFailover(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		admin, prod, work := c.token("acme", "admin"), c.token("acme", "producer"), c.token("acme", "worker")
		victim, survivors := c.ownerOf("acme", c.members)
		p := c.clients(prod, survivors[0])[0]
		wc := c.clients(work, survivors[1])[0]
		wc.Timeout = time.Second // a call to the dead owner fails fast
		const n = 4
		for i := 0; i < n; i++ {
			if _, err := p.Enqueue(ctx(t), job("q", "t")); err != nil {
				t.Fatal(err)
			}
		}

		var (
			mu      sync.Mutex
			started = map[string]int{} // id@attempt → starts
			first   string
			late    []string // started past a second attempt
		)
		running := make(chan struct{})
		cause := make(chan error, 1)
		runCtx, stop := context.WithCancel(context.Background())
		defer stop()
		// A 500 ms lease runs out well inside a failover (about 2 s).
		w := client.NewWorker(wc, client.WorkerConfig{Queues: []string{"q"}, Concurrency: 1, Prefetch: n - 1, Lease: 500 * time.Millisecond},
			func(hctx context.Context, j api.Job) (json.RawMessage, error) {
				mu.Lock()
				started[fmt.Sprintf("%s@%d", j.ID, j.Attempt)]++
				if j.Attempt > 2 {
					late = append(late, fmt.Sprintf("%s@%d", j.ID, j.Attempt))
				}
				isFirst := first == ""
				if isFirst {
					first = j.ID
				}
				mu.Unlock()
				if !isFirst {
					return nil, nil
				}
				close(running)
				select {
				case <-hctx.Done():
					cause <- context.Cause(hctx)
				case <-time.After(60 * time.Second):
					cause <- errors.New("the handler's context did not end")
				}
				return nil, errors.New("interrupted")
			})
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		select {
		case <-running: // one job runs, the others are held ahead
		case <-time.After(30 * time.Second):
			t.Fatal("no job started")
		}
		victim.signal(syscall.SIGKILL)

		if err := <-cause; !isLeaseLost(err) {
			t.Fatalf("the running handler's context ended with %v, want LEASE_LOST", err)
		}
		// Every job ends completed: the lost ones come back (a failed
		// attempt each) and the worker runs them again.
		deadline := time.Now().Add(60 * time.Second)
		for {
			u := c.usage(survivors[0], admin)
			if u.Usage.Archived == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("60 s after the kill: %+v", u.Usage)
			}
			waitFor(100 * time.Millisecond)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for k, times := range started {
			if times > 1 {
				t.Errorf("%s started %d times under one attempt", k, times)
			}
		}
		if len(late) > 0 {
			// The failover costs each job at most the attempt it was
			// claimed under: the next claim, a long poll that gets the
			// job once its backoff ends, runs it.
			t.Errorf("started %v: want every job done by its second attempt", late)
		}
		if started[first+"@1"] != 1 {
			t.Errorf("starts %v: want %s once under attempt 1 (interrupted) and again later", started, first)
		}
	})
}

func isLeaseLost(err error) bool {
	e, ok := api.AsError(err)
	return ok && e.Reason == api.ReasonLeaseLost
}
