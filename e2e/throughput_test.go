package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/retention"
	"github.com/flexiq/flexiq/store"
)

// Throughput of one in-process node over NATS with SQLite, everything on
// the same cores. fq bench measures the same against a real node process.

func parallelEnqueue(b *testing.B, e *env, ns string, cs []*client.Client, batch int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	jobs := make([]api.Job, batch)
	for i := range jobs {
		jobs[i] = api.Job{Queue: "bench", Task: "t", Payload: []byte(`{"n":1}`)}
	}
	cpu, actor := cpuTime(), readActor(b, e, ns)
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
	b.ReportMetric((cpuTime()-cpu).Seconds()/b.Elapsed().Seconds(), "cores")
	reportActor(b, actor, readActor(b, e, ns))
}

func benchClients(b *testing.B, e *env, token string, n int) []*client.Client {
	cs := make([]*client.Client, n)
	for i := range cs {
		cs[i] = e.client(token)
	}
	return cs
}

// BenchmarkEnqueueSingle32 is 32 producers enqueuing one job a call, on
// every backend.
//
//	go test -run '^$' -bench 'EnqueueSingle32/redis' -benchtime 100000x ./e2e
func BenchmarkEnqueueSingle32(b *testing.B) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			e := start(b)
			tn := e.tenant("acme")
			parallelEnqueue(b, e, "acme", benchClients(b, e, tn.producer, 32), 1)
		})
	}
}

func BenchmarkEnqueueSingle32AllQuotas(b *testing.B) {
	e := start(b)
	tn := e.tenant("acme")
	e.setQuota(tn.admin, `{"max_pending":1000000000,"enqueue_rate":"1000000000/s","max_running":1000000,"max_archived_rows":1000000000,"max_dead_rows":1000000000}`)
	parallelEnqueue(b, e, "acme", benchClients(b, e, tn.producer, 32), 1)
}

// BenchmarkEnqueueBatch100 is 8 producers enqueuing 100 jobs a call, on
// every backend.
func BenchmarkEnqueueBatch100(b *testing.B) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			e := start(b)
			tn := e.tenant("acme")
			parallelEnqueue(b, e, "acme", benchClients(b, e, tn.producer, 8), 100)
		})
	}
}

// BenchmarkClaimAck32 is the bare protocol on every backend: 32 loops
// that each claim one job (max=1) and ack it.
//
//	go test -run '^$' -bench 'ClaimAck32/postgres' -benchtime 30000x ./e2e
func BenchmarkClaimAck32(b *testing.B) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			e := start(b)
			tn := e.tenant("acme")
			fillQueue(b, tn.p, b.N)
			parallelClaimAck(b, e, "acme", benchClients(b, e, tn.worker, 32))
		})
	}
}

// fillQueue enqueues n jobs into queue bench, 1000 a call.
func fillQueue(b *testing.B, c *client.Client, n int) {
	jobs := make([]api.Job, 1000)
	for i := range jobs {
		jobs[i] = api.Job{Queue: "bench", Task: "t"}
	}
	for done := 0; done < n; done += 1000 {
		if _, err := c.EnqueueMany(context.Background(), jobs[:min(1000, n-done)]); err != nil {
			b.Fatal(err)
		}
	}
}

// parallelClaimAck claims (one job a claim) and acks b.N jobs of queue
// bench with one worker per client.
func parallelClaimAck(b *testing.B, e *env, ns string, cs []*client.Client) {
	var done atomic.Int64
	var wg sync.WaitGroup
	cpu, actor := cpuTime(), readActor(b, e, ns)
	b.ResetTimer()
	for _, c := range cs {
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
	b.ReportMetric((cpuTime()-cpu).Seconds()/b.Elapsed().Seconds(), "cores")
	reportActor(b, actor, readActor(b, e, ns))
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
func BenchmarkWorkerConcurrency32(b *testing.B) { workerBench(b, 0) }

// BenchmarkWorkerPrefetch is BenchmarkWorkerConcurrency32 on every
// backend, with the worker holding up to 0, 32 or 96 jobs ahead of its 32
// slots (WorkerConfig.Prefetch).
//
//	go test -run '^$' -bench WorkerPrefetch -benchtime 50000x ./e2e
func BenchmarkWorkerPrefetch(b *testing.B) {
	for _, backend := range backends {
		for _, prefetch := range []int{0, 32, 96} {
			b.Run(fmt.Sprintf("%s/prefetch=%d", backend, prefetch), func(b *testing.B) { workerBench(b, prefetch) })
		}
	}
}

func workerBench(b *testing.B, prefetch int) {
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
	w := client.NewWorker(e.client(tn.worker), client.WorkerConfig{Queues: []string{"bench"}, Concurrency: 32, Prefetch: prefetch},
		func(context.Context, api.Job) (json.RawMessage, error) {
			if done.Add(1) == int64(b.N) {
				cancel()
			}
			return nil, nil
		})
	cpu, actor := cpuTime(), readActor(b, e, "acme")
	b.ResetTimer()
	if err := w.Run(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric((cpuTime()-cpu).Seconds()/b.Elapsed().Seconds(), "cores")
	reportActor(b, actor, readActor(b, e, "acme"))
}

// actorReading is a namespace's actor counters on the node
// (flexiq_actor_steps_total, _messages_total, _busy_seconds_total).
type actorReading struct{ steps, messages, busy float64 }

// readActor reads ns's actor counters from the node's /metrics.
func readActor(b *testing.B, e *env, ns string) actorReading {
	b.Helper()
	status, page := e.do("GET", "/metrics", e.root, nil)
	if status != http.StatusOK {
		b.Fatalf("GET /metrics: %d", status)
	}
	value := func(name string) float64 {
		v, _ := seriesValue(b, page, name+`{namespace="`+ns+`"}`)
		return v
	}
	return actorReading{
		steps:    value("flexiq_actor_steps_total"),
		messages: value("flexiq_actor_messages_total"),
		busy:     value("flexiq_actor_busy_seconds_total"),
	}
}

// reportActor reports how busy the namespace's actor was over the run
// (actor-busy, a share of the elapsed time) and the messages its steps
// took on the mean (msgs/step), as fq bench prints them.
func reportActor(b *testing.B, before, after actorReading) {
	steps := after.steps - before.steps
	if steps <= 0 {
		return
	}
	b.ReportMetric((after.busy-before.busy)/b.Elapsed().Seconds(), "actor-busy")
	b.ReportMetric((after.messages-before.messages)/steps, "msgs/step")
}

// cpuTime is the CPU time (user and system) the process has used: over a
// benchmark's run, how much of the machine it kept busy.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEnqueueSingle32Backlog1M is BenchmarkEnqueueSingle32 with a
// million jobs already pending in the namespace: admission never counts
// the backlog, and inserts stay at the right edge of the indexes.
func BenchmarkEnqueueSingle32Backlog1M(b *testing.B) {
	e := start(b)
	tn := e.tenant("acme")
	ids := actors.NewIDGen(rand.New(rand.NewPCG(1, 1)))
	now := time.Now()
	for n := 0; n < 1_000_000; n += 1000 {
		jobs := make([]store.NewJob, 1000)
		for i := range jobs {
			jobs[i] = store.NewJob{ID: ids.New(now), Generated: true, Queue: "bench", Task: "t", RunAt: now, Payload: []byte(`{"n":1}`)}
		}
		if _, err := e.node.Store.JobEnqueueMany(context.Background(), store.JobEnqueueManyParams{Namespace: "acme", Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
			b.Fatal(err)
		}
	}
	parallelEnqueue(b, e, "acme", benchClients(b, e, tn.producer, 32), 1)
}

// BenchmarkNeighbourDuringTrim measures another namespace's throughput —
// single-job enqueues, and claim+ack — while a namespace 100 000 rows over a
// new max_archived_rows is trimmed (1000 rows a tick, a tick every 100 ms or
// 500 ms: 300 and 60 times the default cadence), against the same at rest.
// Run with a fixed count, e.g. -benchtime 60000x, so all measure the same
// work.
func BenchmarkNeighbourDuringTrim(b *testing.B) {
	for _, work := range []string{"enqueue", "claim-ack"} {
		for _, every := range []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond} {
			name := "rest"
			if every > 0 {
				name = "trim-every-" + every.String()
			}
			b.Run(work+"/"+name, func(b *testing.B) { neighbourDuringTrim(b, work, every) })
		}
	}
}

func neighbourDuringTrim(b *testing.B, work string, every time.Duration) {
	e := start(b)
	st := e.node.Store
	ctxb := context.Background()
	ids := actors.NewIDGen(rand.New(rand.NewPCG(2, 2)))
	now := time.Now().Add(-time.Hour)
	for n := 0; n < 100_000; n += 1000 {
		jobs := make([]store.NewJob, 1000)
		for i := range jobs {
			jobs[i] = store.NewJob{ID: ids.New(now), Generated: true, Queue: "q", Task: "t", RunAt: now}
		}
		if _, err := st.JobEnqueueMany(ctxb, store.JobEnqueueManyParams{Namespace: "big", Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
			b.Fatal(err)
		}
		got, err := st.JobClaimMany(ctxb, store.JobClaimManyParams{Namespace: "big", Now: now, Claims: []store.ClaimSpec{{Queues: []string{"q"}, Max: 1000, LeaseUntil: now.Add(time.Hour)}}})
		if err != nil {
			b.Fatal(err)
		}
		ups := make([]store.JobUpdate, len(got[0]))
		for i, j := range got[0] {
			ups[i] = store.JobUpdate{ID: j.ID, Attempt: j.Attempt, Kind: store.UpdateComplete}
		}
		if _, err := st.JobUpdateMany(ctxb, store.JobUpdateManyParams{Namespace: "big", Now: now, Updates: ups}); err != nil {
			b.Fatal(err)
		}
	}
	big := e.tenant("big")
	e.setQuota(big.admin, `{"max_archived_rows":0}`)
	other := e.tenant("other")
	if work == "claim-ack" {
		fillQueue(b, other.p, b.N)
	}
	var ticks, trimmed atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	if every > 0 {
		c := retention.New(retention.Config{Batch: 1000}, st, nil, nil, nil, nil)
		go func() {
			defer close(done)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				res, err := c.RunOnce(ctxb, time.Now())
				if err != nil {
					b.Error(err)
					return
				}
				n := res.Ceiling["big"][api.StatusCompleted]
				if n > 1000 {
					b.Errorf("a tick deleted %d rows, more than the batch", n)
				}
				if n == 0 {
					return
				}
				ticks.Add(1)
				trimmed.Add(n)
			}
		}()
	} else {
		close(done)
	}
	if work == "enqueue" {
		parallelEnqueue(b, e, "other", benchClients(b, e, other.producer, 32), 1)
	} else {
		parallelClaimAck(b, e, "other", benchClients(b, e, other.worker, 32))
	}
	close(stop)
	<-done
	b.ReportMetric(float64(ticks.Load()), "trim-ticks")
	b.ReportMetric(float64(trimmed.Load()), "rows-trimmed")
}
