package e2e

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
)

// Throughput of one in-process node over NATS with SQLite, everything on
// the same cores. fq bench measures the same against a real node process.

func parallelEnqueue(b *testing.B, cs []*client.Client, batch int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	jobs := make([]api.Job, batch)
	for i := range jobs {
		jobs[i] = api.Job{Queue: "bench", Task: "t", Payload: []byte(`{"n":1}`)}
	}
	b.ResetTimer()
	for _, c := range cs {
		wg.Add(1)
		go func(c *client.Client) {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := c.EnqueueMany(context.Background(), jobs); err != nil {
					b.Error(err)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}

func benchClients(b *testing.B, e *env, token string, n int) []*client.Client {
	cs := make([]*client.Client, n)
	for i := range cs {
		cs[i] = e.client(token)
	}
	return cs
}

func BenchmarkEnqueueSingle32(b *testing.B) {
	e := start(b)
	tn := e.tenant("acme")
	parallelEnqueue(b, benchClients(b, e, tn.producer, 32), 1)
}

func BenchmarkEnqueueSingle32AllQuotas(b *testing.B) {
	e := start(b)
	tn := e.tenant("acme")
	e.setQuota(tn.admin, `{"max_pending":1000000000,"enqueue_rate":"1000000000/s","max_running":1000000,"max_archived_rows":1000000000,"max_dead_rows":1000000000}`)
	parallelEnqueue(b, benchClients(b, e, tn.producer, 32), 1)
}

func BenchmarkEnqueueBatch100(b *testing.B) {
	e := start(b)
	tn := e.tenant("acme")
	parallelEnqueue(b, benchClients(b, e, tn.producer, 8), 100)
}

func BenchmarkClaimAck32(b *testing.B) {
	e := start(b)
	tn := e.tenant("acme")
	jobs := make([]api.Job, 1000)
	for i := range jobs {
		jobs[i] = api.Job{Queue: "bench", Task: "t"}
	}
	for n := 0; n < b.N; n += 1000 {
		if _, err := tn.p.EnqueueMany(context.Background(), jobs[:min(1000, b.N-n)]); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for _, c := range benchClients(b, e, tn.worker, 32) {
		wg.Add(1)
		go func(c *client.Client) {
			defer wg.Done()
			for done.Load() < int64(b.N) {
				got, err := c.Claim(context.Background(), api.ClaimRequest{Queues: []string{"bench"}, Max: 1, LeaseMS: 60000})
				if err != nil {
					b.Error(err)
					return
				}
				for _, j := range got {
					if err := c.Ack(context.Background(), j.ID, j.Attempt, nil); err != nil {
						b.Error(err)
						return
					}
					done.Add(1)
				}
				if len(got) == 0 && done.Load() >= int64(b.N) {
					return
				}
			}
		}(c)
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkIdleNamespaces touches 10 000 namespaces once each and reports
// the heap they leave behind once their actors have gone idle.
func BenchmarkIdleNamespaces(b *testing.B) {
	for i := 0; i < b.N; i++ {
		e := start(b, func(c *nodeConfig) { c.IdleAfter = 200 * time.Millisecond })
		c := e.client(e.root)
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		const namespaces = 10000
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for n := 0; n < namespaces; n++ {
			sem <- struct{}{}
			wg.Add(1)
			go func(n int) {
				defer wg.Done()
				defer func() { <-sem }()
				// Each namespace: its actor spawns, loads, decides, writes.
				ns := e.node.Actors
				ch := make(chan struct{})
				ns.Send(nsName(n), actorEnqueue(ch))
				<-ch
			}(n)
		}
		wg.Wait()
		_ = c
		for e.node.Actors.Len() > 0 {
			waitFor(50 * time.Millisecond)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "MiB-heap")
		e.stop()
	}
}

func nsName(n int) string { return "tenant-" + itoa(n) }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func actorEnqueue(done chan struct{}) *actors.Message {
	return &actors.Message{
		Op:    actors.OpEnqueue,
		Body:  &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}},
		Reply: func(any, *api.Error) { close(done) },
	}
}

// BenchmarkWorkerConcurrency32 runs the Go client's Worker with 32 slots:
// it claims as many jobs as it has free slots and acks each.
func BenchmarkWorkerConcurrency32(b *testing.B) {
	e := start(b)
	tn := e.tenant("acme")
	jobs := make([]api.Job, 1000)
	for i := range jobs {
		jobs[i] = api.Job{Queue: "bench", Task: "t"}
	}
	for n := 0; n < b.N; n += 1000 {
		if _, err := tn.p.EnqueueMany(context.Background(), jobs[:min(1000, b.N-n)]); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	w := client.NewWorker(e.client(tn.worker), client.WorkerConfig{Queues: []string{"bench"}, Concurrency: 32},
		func(context.Context, api.Job) (json.RawMessage, error) {
			if done.Add(1) == int64(b.N) {
				cancel()
			}
			return nil, nil
		})
	b.ResetTimer()
	if err := w.Run(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
