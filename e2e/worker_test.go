package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
)

// The Go SDK worker runs jobs through its handler with at most Concurrency
// at once, acks (in batches, in the background) or nacks by the handler's
// result, and once Run returns every ack has reached the store.
func TestWorkerRunsAcksAndNacksThenStopsWithNothingInFlight(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		const n = 60
		jobs := make([]api.Job, n)
		for i := range jobs {
			jobs[i] = job("q", "t")
			jobs[i].Payload = json.RawMessage(fmt.Sprint(i))
		}
		res := enqueue(t, tn.p, jobs...)
		ids := make(map[string]int, n) // id → payload number
		for i, r := range res {
			ids[r.ID] = i
		}

		var (
			mu             sync.Mutex
			seen           = map[string]bool{}
			active, peak   atomic.Int64
			runCtx, cancel = context.WithCancel(context.Background())
		)
		defer cancel()
		w := client.NewWorker(e.client(tn.worker), client.WorkerConfig{Queues: []string{"q"}, Concurrency: 8},
			func(_ context.Context, j api.Job) (json.RawMessage, error) {
				now := active.Add(1)
				defer active.Add(-1)
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				var k int
				if err := json.Unmarshal(j.Payload, &k); err != nil {
					return nil, err
				}
				mu.Lock()
				seen[j.ID] = true
				if len(seen) == n {
					cancel()
				}
				mu.Unlock()
				switch {
				case k%10 == 3:
					return nil, errors.New("try again")
				case k%10 == 7:
					return nil, fmt.Errorf("bad input: %w", client.ErrNoRetry)
				}
				return json.RawMessage(fmt.Sprintf(`{"k":%d}`, k)), nil
			})
		if err := w.Run(runCtx); err != nil {
			t.Fatal(err)
		}
		if p := peak.Load(); p > 8 || p < 1 {
			t.Errorf("peak concurrency %d, want 1..8", p)
		}
		// No waiting: Run returned, so every answer is in the store.
		for id, k := range ids {
			j := e.job(tn.admin, id)
			switch {
			case k%10 == 3:
				// A backoff may run out (0.8 s) before the last job is seen,
				// so a retried job may have failed twice.
				if j.Status != api.StatusPending || j.Error != "try again" || j.Attempt < 1 {
					t.Errorf("job %d: %s %q attempt %d, want pending for a retry", k, j.Status, j.Error, j.Attempt)
				}
			case k%10 == 7:
				if j.Status != api.StatusDead {
					t.Errorf("job %d: %s, want dead (no retry)", k, j.Status)
				}
			default:
				if j.Status != api.StatusCompleted || string(j.Result) != fmt.Sprintf(`{"k":%d}`, k) {
					t.Errorf("job %d: %s result %s, want completed with its result", k, j.Status, j.Result)
				}
			}
		}
	})
}

// A worker with Prefetch holds jobs ahead of its free slots: they are
// claimed, so they count as running against max_running (no other worker
// gets them), and when it stops, those it never started are released:
// pending again, their attempt not spent, and the next claim takes them.
func TestWorkerPrefetchCountsAsRunningAndReleasesOnStop(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_running":4}`)
		var ids []string
		for _, r := range enqueue(t, tn.p, job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t")) {
			ids = append(ids, r.ID)
		}
		started, unblock := make(chan string, 8), make(chan struct{})
		runCtx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := client.NewWorker(e.client(tn.worker), client.WorkerConfig{Queues: []string{"q"}, Concurrency: 1, Prefetch: 3},
			func(_ context.Context, j api.Job) (json.RawMessage, error) {
				started <- j.ID
				<-unblock
				return nil, nil
			})
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		first := <-started
		// One running and three prefetched: max_running is reached.
		deadline := time.Now().Add(20 * time.Second)
		for {
			u := e.usage(tn.admin)
			if u.Usage.Running == 4 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("with one job started and Prefetch 3: %+v, want 4 running", u.Usage)
			}
			waitFor(10 * time.Millisecond)
		}
		if got := claim(t, e.client(tn.worker), 1, "q"); len(got) != 0 {
			t.Fatalf("another worker claimed %d jobs while the prefetched ones held max_running", len(got))
		}
		cancel()
		close(unblock)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if u := e.usage(tn.admin); u.Usage.Running != 0 || u.Usage.Pending != 5 || u.Usage.Archived != 1 {
			t.Fatalf("after the stop: %+v, want the started job completed and 5 pending", u.Usage)
		}
		for _, id := range ids {
			if id == first {
				continue
			}
			if j := e.job(tn.admin, id); j.Status != api.StatusPending || j.Attempt != 0 {
				t.Errorf("job %s after the stop: %s attempt %d, want pending with no attempt spent", id, j.Status, j.Attempt)
			}
		}
	})
}
