package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/quota"
)

// Bench defaults.
const (
	defaultBenchJobs = 20000
	// Bounds of the flags every mode takes (flood's own are FloodConfig's).
	maxBenchJobs       = 100_000_000
	maxBenchGoroutines = MaxFloodGoroutine
	maxBenchDuration   = time.Hour
	// benchStall ends a work phase that claims nothing for this long (a
	// cap such as max_running 0 in the way).
	benchStall = 15 * time.Second
	benchTask  = "bench"
)

// benchConfig is one bench run.
type benchConfig struct {
	queue     string
	payload   json.RawMessage
	producers int
	workers   int
	prefetch  int // the SDK worker's WorkerConfig.Prefetch
	batch     int
	jobs      int
	duration  time.Duration // enqueue phases run this long instead of jobs
}

// phaseStats is what one phase measured.
type phaseStats struct {
	name     string
	jobs     int64 // jobs enqueued (accepted) or claimed and acked
	requests int
	elapsed  time.Duration
	lat      []time.Duration // one per request (enqueue) or per job (work)
}

func (a *app) bench(cmd *command, args []string) error {
	if len(args) > 0 && args[0] == "flood" {
		cmd = floodCommand // its usage line and --help
	}
	f := a.newFlags(cmd)
	jobs := f.PosInt("jobs", defaultBenchJobs, fmt.Sprintf("jobs per phase, default 20000, at most %d (all: the work phase works the jobs both enqueue phases wrote; flood: default 5000, at most %d)", maxBenchJobs, MaxFloodJobs))
	duration, _ := f.Duration("duration", 0, fmt.Sprintf("run each phase this long instead of --jobs (at most %s)", maxBenchDuration))
	producers := f.PosInt("producers", 32, fmt.Sprintf("concurrent producers of the enqueue phases (default 32; flood: B's, default 8; at most %d)", maxBenchGoroutines))
	batch := f.PosInt("batch", 100, "jobs per EnqueueMany call in enqueue-batch (default 100)")
	workers := f.PosInt("workers", 32, fmt.Sprintf("concurrent workers of the work phase, each claiming one job at a time (default 32; flood: B's, default 8; at most %d)", maxBenchGoroutines))
	queue := f.String("queue", "", "queue to use (default: a fresh bench-<unix ms>; flood: bench-flood-<unix ms>, in both namespaces)")
	payload := f.JSON("payload", `each job's payload (default {"bench":true})`)
	noDrain := f.Bool("no-drain", "leave the jobs the run wrote pending")
	sdkWorker := f.Bool("sdk-worker", "work phase: one Go SDK worker with --workers slots (claims for its free slots, acks in batches) instead of --workers loops of claim (max=1) and ack")
	prefetch := f.Int64("prefetch", fmt.Sprintf("with --sdk-worker: jobs the worker may hold ahead of its free slots (WorkerConfig.Prefetch; default 0, at most %d)", client.MaxPrefetch))
	ff := a.newFloodFlags(f)
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	mode := "all"
	if len(pos) > 0 {
		mode = pos[0]
	}
	switch {
	case len(pos) > 1:
		return usagef(cmd, "fq bench: unexpected argument %q", pos[1])
	case mode != "enqueue" && mode != "enqueue-batch" && mode != "work" && mode != "all" && mode != "flood":
		return usagef(cmd, "fq bench: unknown mode %q (enqueue, enqueue-batch, work, all or flood)", mode)
	case f.given("jobs") && f.given("duration"):
		return usagef(cmd, "fq bench: give --jobs or --duration, not both")
	case f.given("duration") && (*duration <= 0 || *duration > maxBenchDuration):
		return usagef(cmd, "%s: must be more than 0 and at most %s, got %s", written(a.args, "duration"), maxBenchDuration, *duration)
	case *jobs > maxBenchJobs:
		return usagef(cmd, "%s: at most %d jobs per phase, got %d", written(a.args, "jobs"), maxBenchJobs, *jobs)
	case *producers > maxBenchGoroutines:
		return usagef(cmd, "%s: at most %d, got %d", written(a.args, "producers"), maxBenchGoroutines, *producers)
	case *workers > maxBenchGoroutines:
		return usagef(cmd, "%s: at most %d, got %d", written(a.args, "workers"), maxBenchGoroutines, *workers)
	case f.given("prefetch") && !*sdkWorker:
		return usagef(cmd, "%s: only with --sdk-worker", written(a.args, "prefetch"))
	case *prefetch < 0 || *prefetch > client.MaxPrefetch:
		return usagef(cmd, "%s: must be 0-%d, got %d", written(a.args, "prefetch"), client.MaxPrefetch, *prefetch)
	case *batch > api.MaxJobsPerCall:
		return usagef(cmd, "%s: at most %d jobs per call, got %d", written(a.args, "batch"), api.MaxJobsPerCall, *batch)
	}
	cfg := benchConfig{
		queue: *queue, payload: *payload, producers: *producers, workers: *workers,
		prefetch: int(*prefetch), batch: *batch, jobs: *jobs, duration: *duration,
	}
	prefix := "bench"
	if mode == "flood" {
		prefix = "bench-flood"
	}
	if cfg.queue == "" {
		cfg.queue = fmt.Sprintf("%s-%d", prefix, time.Now().UnixMilli())
	}
	if !api.ValidName(cfg.queue) {
		return usagef(cmd, "%s: must be 1-%d bytes of [A-Za-z0-9._:-], got %q", written(a.args, "queue"), api.MaxNameBytes, cfg.queue)
	}
	if mode == "flood" {
		return a.benchFlood(cmd, f, ff, cfg, *noDrain)
	}
	for _, name := range floodOnly {
		if f.given(name) {
			return usagef(cmd, "%s: only fq bench flood takes it", written(a.args, name))
		}
	}
	if len(cfg.payload) == 0 {
		cfg.payload = json.RawMessage(`{"bench":true}`)
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()

	fmt.Fprintf(a.stdout, "bench %s: queue %s, %d producers, batch %d, %d workers\n", mode, cfg.queue, cfg.producers, cfg.batch, cfg.workers)
	fmt.Fprintf(a.stdout, "%-14s %9s %9s %10s %10s %10s %10s %9s\n", "phase", "jobs", "seconds", "jobs/s", "p50", "p99", "max", "requests")
	var pending int64 // jobs the enqueue phases left pending
	if mode == "enqueue" || mode == "all" {
		st, err := a.phase(func() (phaseStats, error) { return a.enqueuePhase(c, cfg, "enqueue", 1) })
		if err != nil {
			return err
		}
		pending += st.jobs
	}
	if mode == "enqueue-batch" || mode == "all" {
		st, err := a.phase(func() (phaseStats, error) { return a.enqueuePhase(c, cfg, "enqueue-batch", cfg.batch) })
		if err != nil {
			return err
		}
		pending += st.jobs
	}
	switch {
	case mode == "work":
		start := time.Now()
		if err := benchFill(a.ctx, c, cfg); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "(%d jobs enqueued for the work phase in %.2fs)\n", cfg.jobs, time.Since(start).Seconds())
		pending = int64(cfg.jobs)
		fallthrough
	case mode == "all":
		// The work phase works what is pending: the jobs enqueued above.
		work := func() (phaseStats, error) { return a.workPhase(c, cfg, "work", pending, 1, cfg.duration) }
		if *sdkWorker {
			work = func() (phaseStats, error) { return a.sdkWorkPhase(c, cfg, "work-sdk", pending, cfg.duration) }
		}
		st, err := a.phase(work)
		if err != nil {
			return err
		}
		pending -= st.jobs
	case !*noDrain && pending > 0:
		start := time.Now()
		st, err := a.workPhase(c, cfg, "drain", pending, 100, 0)
		if err != nil {
			return err
		}
		pending -= st.jobs
		fmt.Fprintf(a.stdout, "(drained %d jobs in %.2fs; --no-drain keeps them)\n", st.jobs, time.Since(start).Seconds())
	}
	if pending > 0 {
		fmt.Fprintf(a.stdout, "(%d jobs left pending in queue %s: fq work --queue %s drains them)\n", pending, cfg.queue, cfg.queue)
	}
	return nil
}

// phase runs one measured phase and prints its row, then, when the token
// may read the node's metrics (the root token), how busy the namespace's
// actor was meanwhile (actorLine).
func (a *app) phase(run func() (phaseStats, error)) (phaseStats, error) {
	// The share is of the time from the first read's start to the second
	// read's end, which holds the node's two readings: so it is never
	// more than the whole, whatever the actor did around the phase.
	start := time.Now()
	before, readable := a.actorCounters()
	st, err := run()
	if err != nil {
		return st, err
	}
	a.printPhase(st)
	if readable {
		if after, ok := a.actorCounters(); ok {
			if line := actorLine(before, after, time.Since(start)); line != "" {
				fmt.Fprintln(a.stdout, line)
			}
		}
	}
	return st, nil
}

// metricsWait bounds each read of the node's metrics around a phase.
const metricsWait = 2 * time.Second

// actorCounters are the counters of the root token's namespace's actor
// (default) on the node fq talks to: flexiq_actor_steps_total,
// flexiq_actor_messages_total and flexiq_actor_busy_seconds_total.
type actorCounters struct{ steps, messages, busy float64 }

// actorCounters reads them from /metrics; ok is false when the token may
// not (only the root token may: the metrics name every namespace) or the
// page does not parse.
func (a *app) actorCounters() (actorCounters, bool) {
	// The figures are a bonus: a node whose admin door does not answer
	// soon does not hold the bench up.
	ctx, cancel := context.WithTimeout(a.ctx, metricsWait)
	defer cancel()
	page, err := a.adminCtx(ctx, "GET", "/metrics", nil, nil)
	if err != nil {
		return actorCounters{}, false
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return actorCounters{}, false
	}
	value := func(name string) float64 {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" && l.GetValue() == quota.DefaultNamespace {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0 // no step of the namespace on this node yet
	}
	return actorCounters{
		steps:    value("flexiq_actor_steps_total"),
		messages: value("flexiq_actor_messages_total"),
		busy:     value("flexiq_actor_busy_seconds_total"),
	}, true
}

// actorLine says how busy the namespace's actor was over elapsed (a
// phase and the reads around it) and how many messages shared a step,
// from its counters before and after; "" when it took no step on this
// node (in a cluster its owner may be another node).
func actorLine(before, after actorCounters, elapsed time.Duration) string {
	steps := after.steps - before.steps
	if steps <= 0 || elapsed <= 0 {
		return ""
	}
	busy := (after.busy - before.busy) / elapsed.Seconds()
	return fmt.Sprintf("  (namespace %s's actor: busy %.0f %% of the phase, %.1f messages a step)",
		quota.DefaultNamespace, 100*busy, (after.messages-before.messages)/steps)
}

func (a *app) printPhase(st phaseStats) {
	sec := st.elapsed.Seconds()
	rate := 0.0
	if sec > 0 {
		rate = float64(st.jobs) / sec
	}
	p50, p99, max := percentiles(st.lat)
	lat := []string{latText(p50), latText(p99), latText(max)}
	if len(st.lat) == 0 {
		lat = []string{"-", "-", "-"} // not measured (the SDK worker)
	}
	req := strconv.Itoa(st.requests)
	if st.requests < 0 {
		req = "-"
	}
	fmt.Fprintf(a.stdout, "%-14s %9d %9.2f %10.0f %10s %10s %10s %9s\n",
		st.name, st.jobs, sec, rate, lat[0], lat[1], lat[2], req)
}

// percentiles returns p50, p99 and the maximum of lat (nearest rank).
func percentiles(lat []time.Duration) (p50, p99, max time.Duration) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999999) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(s) {
			i = len(s) - 1
		}
		return s[i]
	}
	return rank(0.50), rank(0.99), s[len(s)-1]
}

func latText(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}

// firstError keeps the first failure of a phase and stops the others.
type firstError struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.once.Do(func() {
		f.err = err
		f.cancel()
	})
}

// enqueuePhase enqueues from cfg.producers goroutines, batch jobs per call,
// until cfg.jobs are enqueued or cfg.duration has passed. A refusal ends
// the phase: a load generator that is refused measures nothing useful.
func (a *app) enqueuePhase(c *client.Client, cfg benchConfig, name string, batch int) (phaseStats, error) {
	ctx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	var remaining, accepted atomic.Int64
	remaining.Store(int64(cfg.jobs))
	lats := make([][]time.Duration, cfg.producers)
	job := api.Job{Queue: cfg.queue, Task: benchTask, Payload: cfg.payload}
	start := time.Now()
	deadline := start.Add(cfg.duration)
	var wg sync.WaitGroup
	for p := 0; p < cfg.producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			jobs := make([]api.Job, batch)
			for i := range jobs {
				jobs[i] = job
			}
			for ctx.Err() == nil {
				n := batch
				if cfg.duration > 0 {
					if !time.Now().Before(deadline) {
						return
					}
				} else {
					left := remaining.Add(-int64(batch))
					if left <= -int64(batch) {
						return
					}
					if left < 0 {
						n = batch + int(left)
					}
				}
				t0 := time.Now()
				res, err := c.EnqueueMany(ctx, jobs[:n])
				d := time.Since(t0)
				if err != nil {
					if ctx.Err() == nil {
						fail.set(err)
					}
					return
				}
				lats[p] = append(lats[p], d)
				for _, r := range res {
					if r.Outcome == api.OutcomeEnqueued {
						accepted.Add(1)
					}
				}
			}
		}(p)
	}
	wg.Wait()
	st := phaseStats{name: name, jobs: accepted.Load(), elapsed: time.Since(start)}
	if fail.err != nil {
		return st, fmt.Errorf("bench %s: %w", name, fail.err)
	}
	if err := a.ctx.Err(); err != nil {
		return st, err
	}
	for _, l := range lats {
		st.lat = append(st.lat, l...)
	}
	st.requests = len(st.lat)
	return st, nil
}

// benchFill enqueues cfg.jobs jobs for the work phase, untimed.
func benchFill(ctx context.Context, c *client.Client, cfg benchConfig) error {
	if err := fillQueue(ctx, c, cfg.queue, cfg.payload, cfg.jobs); err != nil {
		return fmt.Errorf("bench work: enqueue the jobs to work: %w", err)
	}
	return nil
}

// workPhase claims and acks total jobs of cfg.queue from cfg.workers
// goroutines, each claiming up to claimMax at a time, for at most limit
// (0: no limit). Latency is per job: its claim and its ack.
func (a *app) workPhase(c *client.Client, cfg benchConfig, name string, total int64, claimMax int, limit time.Duration) (phaseStats, error) {
	ctx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	var done atomic.Int64
	var lastProgress atomic.Int64
	lastProgress.Store(time.Now().UnixNano())
	lats := make([][]time.Duration, cfg.workers)
	requests := make([]int, cfg.workers)
	var endOnce sync.Once
	var end time.Time
	start := time.Now()
	// Past the limit, workers finish the job in hand (acked, not left
	// running until its lease ends) and claim no more.
	var timeUp atomic.Bool
	if limit > 0 {
		timer := time.AfterFunc(limit, func() { timeUp.Store(true) })
		defer timer.Stop()
	}
	var wg sync.WaitGroup
	for w := 0; w < cfg.workers && total > 0; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			req := api.ClaimRequest{
				Queues: []string{cfg.queue}, Max: claimMax, WaitMS: 250, LeaseMS: 60000,
				Worker: fmt.Sprintf("fq-bench-%d", w),
			}
			for ctx.Err() == nil && !timeUp.Load() && done.Load() < total {
				t0 := time.Now()
				jobs, err := c.Claim(ctx, req)
				requests[w]++
				if err != nil {
					if ctx.Err() == nil {
						fail.set(fmt.Errorf("claim: %w", err))
					}
					return
				}
				if len(jobs) == 0 {
					if time.Since(time.Unix(0, lastProgress.Load())) > benchStall {
						fail.set(fmt.Errorf("no job of queue %s could be claimed for %s with %d of %d done: is a cap (max_running, max_concurrent) in the way?",
							cfg.queue, benchStall, done.Load(), total))
					}
					continue
				}
				claimed := time.Since(t0)
				for _, j := range jobs {
					t1 := time.Now()
					if err := c.Ack(ctx, j.ID, j.Attempt, nil); err != nil {
						if ctx.Err() == nil {
							fail.set(fmt.Errorf("ack: %w", err))
						}
						return
					}
					// The claim's time is shared by the jobs it brought.
					lats[w] = append(lats[w], claimed/time.Duration(len(jobs))+time.Since(t1))
				}
				lastProgress.Store(time.Now().UnixNano())
				if done.Add(int64(len(jobs))) >= total {
					endOnce.Do(func() {
						end = time.Now()
						cancel() // release the claims still parked
					})
				}
			}
		}(w)
	}
	wg.Wait()
	endOnce.Do(func() { end = time.Now() })
	st := phaseStats{name: name, jobs: done.Load(), elapsed: end.Sub(start)}
	if fail.err != nil {
		return st, fmt.Errorf("bench %s: %w", name, fail.err)
	}
	if err := a.ctx.Err(); err != nil {
		return st, err
	}
	for w := range lats {
		st.lat = append(st.lat, lats[w]...)
		st.requests += requests[w]
	}
	return st, nil
}

// sdkWorkPhase works total jobs of cfg.queue with one client.Worker of
// cfg.workers slots and a handler that does nothing, for at most limit
// (0: no limit). The phase ends when Run has returned, so every ack has
// been answered. The worker does not show per-job latency or requests.
func (a *app) sdkWorkPhase(c *client.Client, cfg benchConfig, name string, total int64, limit time.Duration) (phaseStats, error) {
	ctx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	var done atomic.Int64
	warned := &warnCounter{}
	w := client.NewWorker(c, client.WorkerConfig{
		Queues: []string{cfg.queue}, Concurrency: cfg.workers, Prefetch: cfg.prefetch, Lease: time.Minute, Wait: 250 * time.Millisecond,
		Name: "fq-bench", Log: slog.New(warned),
	}, func(context.Context, api.Job) (json.RawMessage, error) {
		if done.Add(1) == total {
			cancel()
		}
		return nil, nil
	})
	if limit > 0 {
		timer := time.AfterFunc(limit, cancel)
		defer timer.Stop()
	}
	// A cap in the way leaves the worker waiting forever: give up then.
	watchStop, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		last, lastAt := int64(0), time.Now()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-watchStop:
				return
			case <-t.C:
			}
			if n := done.Load(); n != last {
				last, lastAt = n, time.Now()
			} else if time.Since(lastAt) > benchStall {
				fail.set(fmt.Errorf("no job of queue %s could be claimed for %s with %d of %d done: is a cap (max_running, max_concurrent) in the way?",
					cfg.queue, benchStall, n, total))
				return
			}
		}
	}()
	start := time.Now()
	err := w.Run(ctx)
	st := phaseStats{name: name, jobs: done.Load(), elapsed: time.Since(start), requests: -1}
	close(watchStop)
	<-watchDone // it may still be setting fail
	if err == nil && fail.err == nil && warned.n.Load() > 0 {
		err = fmt.Errorf("%d claims or acks failed (first: %s)", warned.n.Load(), warned.first())
	}
	switch {
	case fail.err != nil:
		return st, fmt.Errorf("bench %s: %w", name, fail.err)
	case a.ctx.Err() != nil:
		return st, a.ctx.Err()
	case err != nil:
		return st, fmt.Errorf("bench %s: %w", name, err)
	}
	return st, nil
}

// warnCounter is a slog handler that counts what the worker warns about.
type warnCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	msg   string
	attrs []slog.Attr
}

func (h *warnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if h.n.Add(1) == 1 {
		h.mu.Lock()
		h.msg = r.Message
		r.Attrs(func(a slog.Attr) bool { h.attrs = append(h.attrs, a); return true })
		h.mu.Unlock()
	}
	return nil
}

func (h *warnCounter) first() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.msg, " ", h.attrs)
}

func (h *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnCounter) WithGroup(string) slog.Handler      { return h }
