package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/quota"
)

// The noisy-neighbour measurement: namespace B's single-job enqueue and
// claim+ack latency, alone and while namespace A floods. fq bench flood
// runs it against a node; e2e's BenchmarkNoisyNeighbour runs the same code
// in-process, so the two measure one thing.

// FloodConfig is one noisy-neighbour run.
type FloodConfig struct {
	// Queue is B's queue, and the queue A floods in A's namespace.
	Queue   string
	Payload json.RawMessage
	// Jobs is how many jobs B enqueues, and claims and acks, per phase.
	Jobs int
	// Rate paces B: this many single-job enqueues per second, and as many
	// claim+acks, from Producers and Workers goroutines. B is paced, not
	// run flat out, so the flood's cost shows as B's latency rather than
	// as a share of CPU B lost.
	Rate               int
	Producers, Workers int
	// Rounds alternates the phases: B alone then flooded, Rounds times,
	// each with a share of Jobs, pooled per phase.
	Rounds int
	// A's quota for the run: FloodMaxPending jobs are enqueued first so A
	// sits at its max_pending, then FloodRate becomes its enqueue_rate
	// and FloodProducers offer FloodFactor times that rate in single-job
	// calls, every one refused.
	FloodRate       quota.Rate
	FloodFactor     int
	FloodMaxPending int64
	FloodProducers  int
	// SetFloodQuota applies a JSON merge patch to A's quota document
	// (PATCH /v1/quota with A's admin token).
	SetFloodQuota func(ctx context.Context, patch map[string]any) error
	// Progress, when set, hears what the run is doing between phases.
	Progress func(format string, args ...any)
}

// Bounds of a flood run, checked by Check (fq's flags name them).
const (
	MaxFloodJobs      = 1_000_000
	MaxFloodRate      = 100_000   // B's jobs/s
	MaxFloodGoroutine = 4096      // producers, workers, flood producers
	MaxFloodOffered   = 1_000_000 // A's calls/s
	MaxFloodFactor    = 1000
	MaxFloodPending   = 1_000_000
	MaxFloodRounds    = 100
)

// DefaultFloodConfig is fq bench flood without flags: B at 500 jobs/s each
// way for 5000 jobs a phase (10 s, in five rounds of 2 s alone and 2 s
// flooded), A at max_pending 1000 offering ten times its enqueue_rate of
// 500/s.
func DefaultFloodConfig() FloodConfig {
	return FloodConfig{
		Payload: json.RawMessage(`{"bench":true}`),
		Jobs:    5000, Rate: 500, Producers: 8, Workers: 8, Rounds: 5,
		FloodRate:   quota.Rate{Count: 500, Unit: time.Second, Text: "500/s"},
		FloodFactor: 10, FloodMaxPending: 1000, FloodProducers: 32,
	}
}

// Offered is the flood's calls per second: FloodFactor × FloodRate.
func (c FloodConfig) Offered() float64 {
	if c.FloodRate.Unit <= 0 {
		return 0
	}
	return float64(c.FloodFactor) * float64(c.FloodRate.Count) * float64(time.Second) / float64(c.FloodRate.Unit)
}

// Check returns the first value out of its bounds, naming the field as
// fq's flag (fq maps it back to the flag as written).
func (c FloodConfig) Check() error {
	type bound struct {
		flag      string
		v, lo, hi int64
	}
	for _, b := range []bound{
		{"jobs", int64(c.Jobs), 1, MaxFloodJobs},
		{"rate", int64(c.Rate), 1, MaxFloodRate},
		{"producers", int64(c.Producers), 1, MaxFloodGoroutine},
		{"workers", int64(c.Workers), 1, MaxFloodGoroutine},
		{"flood-producers", int64(c.FloodProducers), 1, MaxFloodGoroutine},
		{"flood-factor", int64(c.FloodFactor), 1, MaxFloodFactor},
		{"flood-max-pending", c.FloodMaxPending, 0, MaxFloodPending},
		{"rounds", int64(c.Rounds), 1, min(MaxFloodRounds, int64(max(c.Jobs, 1)))},
	} {
		if b.v < b.lo || b.v > b.hi {
			return floodBoundError{flag: b.flag, msg: fmt.Sprintf("must be %d to %d, got %d", b.lo, b.hi, b.v)}
		}
	}
	switch off := c.Offered(); {
	case c.FloodRate.Count < 1 || c.FloodRate.Unit <= 0:
		return floodBoundError{flag: "flood-rate", msg: "must be <count>/<unit> with count >= 1 and unit s, m or h (e.g. 500/s)"}
	case off < 1:
		return floodBoundError{flag: "flood-rate", msg: fmt.Sprintf("the flood (%d × %s) must be at least 1 call/s, got %.3g/s", c.FloodFactor, c.FloodRate, off)}
	case off > MaxFloodOffered:
		return floodBoundError{flag: "flood-rate", msg: fmt.Sprintf("the flood (%d × %s) must be at most %d calls/s, got %.0f/s", c.FloodFactor, c.FloodRate, MaxFloodOffered, off)}
	}
	if !api.ValidName(c.Queue) {
		return floodBoundError{flag: "queue", msg: fmt.Sprintf("must be 1-%d bytes of [A-Za-z0-9._:-], got %q", api.MaxNameBytes, c.Queue)}
	}
	if c.SetFloodQuota == nil {
		return errors.New("bench flood: no way to set namespace A's quota (SetFloodQuota is nil)")
	}
	return nil
}

// floodBoundError is a FloodConfig value out of bounds; flag is its fq
// flag without dashes.
type floodBoundError struct{ flag, msg string }

func (e floodBoundError) Error() string { return "--" + e.flag + ": " + e.msg }

// LatencyStats is one kind of B's calls in one phase.
type LatencyStats struct {
	Jobs          int
	P50, P99, Max time.Duration
	// PerSecond is the jobs per second B achieved: Rate when the node
	// kept up.
	PerSecond float64
}

// FloodPhase is what one phase measured.
type FloodPhase struct {
	Enqueue LatencyStats
	// Claim is a claim of one job and its ack, as one latency.
	Claim   LatencyStats
	Elapsed time.Duration
	// A's calls during the phase (none alone) and how they ended.
	FloodCalls, FloodQueueFull, FloodRateLimited, FloodAccepted int64
	FloodPerSecond                                              float64
}

// FloodResult is B alone and B under the flood.
type FloodResult struct {
	Alone, Flooded FloodPhase
	// Filled is how many jobs were enqueued to bring A to max_pending.
	Filled int64
	// LeftB and LeftA are the jobs left pending in the queue (B's
	// backlog; A's fill and whatever of the flood was accepted).
	LeftB, LeftA int64
	// Rounds are each round's p99 ratios, flooded over alone: on a
	// shared machine, one round disturbed by something else shows here
	// and moves their median little.
	Rounds []RoundRatio
}

// RoundRatio is one round's p99 flooded over alone, for enqueue and for
// claim+ack.
type RoundRatio struct{ Enqueue, Claim float64 }

// MedianRatio is the median of the rounds' ratios.
func (r FloodResult) MedianRatio() RoundRatio {
	med := func(get func(RoundRatio) float64) float64 {
		xs := make([]float64, len(r.Rounds))
		for i, x := range r.Rounds {
			xs[i] = get(x)
		}
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return RoundRatio{
		Enqueue: med(func(x RoundRatio) float64 { return x.Enqueue }),
		Claim:   med(func(x RoundRatio) float64 { return x.Claim }),
	}
}

// EnqueueRatio is B's enqueue p99 flooded over alone.
func (r FloodResult) EnqueueRatio() float64 { return ratio(r.Flooded.Enqueue.P99, r.Alone.Enqueue.P99) }

// ClaimRatio is B's claim+ack p99 flooded over alone.
func (r FloodResult) ClaimRatio() float64 { return ratio(r.Flooded.Claim.P99, r.Alone.Claim.P99) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// MeasureFlood runs the noisy-neighbour scenario: bNS and aNS are clients
// of namespaces B and A (each token must be able to enqueue, and B's to
// claim and ack). It gives B a backlog of cfg.Jobs (so no claim waits for
// an enqueue), fills A to its max_pending and sets its enqueue_rate, warms
// B up, then measures B alone, then B while A floods (cfg.Rounds times).
func MeasureFlood(ctx context.Context, bNS, aNS *client.Client, cfg FloodConfig) (FloodResult, error) {
	var res FloodResult
	if err := cfg.Check(); err != nil {
		return res, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	start := time.Now()
	if err := fillQueue(ctx, bNS, cfg.Queue, cfg.Payload, cfg.Jobs); err != nil {
		return res, fmt.Errorf("bench flood: namespace B's backlog: %w", err)
	}
	res.LeftB = int64(cfg.Jobs)
	progress("%d jobs in B's queue as a backlog, so no claim waits for an enqueue (%.2fs)", cfg.Jobs, time.Since(start).Seconds())

	// A fills without a rate (at the rate it could take minutes), then
	// gets the rate it will be flooded at.
	start = time.Now()
	if err := cfg.SetFloodQuota(ctx, map[string]any{
		quota.FieldMaxPending: cfg.FloodMaxPending, quota.FieldEnqueueRate: nil, quota.FieldOnExcess: string(quota.Reject),
	}); err != nil {
		return res, fmt.Errorf("bench flood: set namespace A's max_pending: %w", err)
	}
	filled, err := fillToMaxPending(ctx, aNS, cfg)
	res.Filled, res.LeftA = filled, filled
	if err != nil {
		return res, fmt.Errorf("bench flood: fill namespace A to its max_pending: %w", err)
	}
	if err := cfg.SetFloodQuota(ctx, map[string]any{quota.FieldEnqueueRate: cfg.FloodRate.String()}); err != nil {
		return res, fmt.Errorf("bench flood: set namespace A's enqueue_rate: %w", err)
	}
	progress("namespace A at max_pending %d (%d jobs enqueued, %.2fs), enqueue_rate %s", cfg.FloodMaxPending, filled, time.Since(start).Seconds(), cfg.FloodRate)

	// The first calls of a namespace load its counts and warm the store's
	// caches: not what either phase should measure.
	warm := cfg
	warm.Jobs = min(cfg.Jobs, max(cfg.Rate/2, 50))
	if _, err := measureB(ctx, bNS, warm, warm.Jobs); err != nil {
		return res, err
	}
	// Alone, then flooded, Rounds times over, each time a share of Jobs:
	// whatever else the machine does then falls on both phases alike.
	var alone, flooded bSamples
	var fc floodCounts
	for r := 0; r < cfg.Rounds; r++ {
		n := cfg.Jobs / cfg.Rounds
		if r < cfg.Jobs%cfg.Rounds {
			n++
		}
		sa, err := measureB(ctx, bNS, cfg, n)
		if err != nil {
			return res, err
		}
		alone.add(sa)
		sf, c, err := measureFlooded(ctx, bNS, aNS, cfg, n)
		if err != nil {
			return res, err
		}
		flooded.add(sf)
		pa, pf := sa.phase(), sf.phase()
		res.Rounds = append(res.Rounds, RoundRatio{
			Enqueue: ratio(pf.Enqueue.P99, pa.Enqueue.P99), Claim: ratio(pf.Claim.P99, pa.Claim.P99),
		})
		fc.calls += c.calls
		fc.queueFull += c.queueFull
		fc.rateLimited += c.rateLimited
		fc.accepted += c.accepted
		res.LeftA += c.total
		if cfg.Rounds > 1 {
			progress("round %d of %d done", r+1, cfg.Rounds)
		}
	}
	res.Alone, res.Flooded = alone.phase(), flooded.phase()
	p := &res.Flooded
	p.FloodCalls, p.FloodQueueFull, p.FloodRateLimited, p.FloodAccepted = fc.calls, fc.queueFull, fc.rateLimited, fc.accepted
	if s := p.Elapsed.Seconds(); s > 0 {
		p.FloodPerSecond = float64(p.FloodCalls) / s
	}
	return res, nil
}

// measureFlooded runs n of B's jobs while A floods. The counts are A's
// calls answered while B ran; total is every call A had accepted, B
// running or not (they are left pending in A's queue).
func measureFlooded(ctx context.Context, bNS, aNS *client.Client, cfg FloodConfig, n int) (bSamples, floodCounts, error) {
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	f := startFlood(fctx, aNS, cfg)
	// B starts once the flood is answered, so no share of the phase
	// runs without it.
	select {
	case <-f.running:
	case <-f.done:
	}
	before := f.snapshot()
	var s bSamples
	err := f.failed()
	if err == nil {
		s, err = measureB(ctx, bNS, cfg, n)
	}
	after := f.snapshot()
	stop()
	<-f.done
	if err == nil {
		err = f.failed()
	}
	c := floodCounts{
		calls: after.calls - before.calls, queueFull: after.queueFull - before.queueFull,
		rateLimited: after.rateLimited - before.rateLimited, accepted: after.accepted - before.accepted,
		total: f.snapshot().accepted,
	}
	return s, c, err
}

// bSamples are B's latencies over one or more stretches of a phase.
type bSamples struct {
	enq, claim         []time.Duration
	enqTime, claimTime time.Duration // how long the enqueues (claims) took
	elapsed            time.Duration
}

func (b *bSamples) add(o bSamples) {
	b.enq = append(b.enq, o.enq...)
	b.claim = append(b.claim, o.claim...)
	b.enqTime += o.enqTime
	b.claimTime += o.claimTime
	b.elapsed += o.elapsed
}

func (b *bSamples) phase() FloodPhase {
	st := func(lat []time.Duration, d time.Duration) LatencyStats {
		s := LatencyStats{Jobs: len(lat)}
		s.P50, s.P99, s.Max = percentiles(lat)
		if d > 0 {
			s.PerSecond = float64(len(lat)) / d.Seconds()
		}
		return s
	}
	return FloodPhase{Enqueue: st(b.enq, b.enqTime), Claim: st(b.claim, b.claimTime), Elapsed: b.elapsed}
}

// fillQueue enqueues n jobs into queue, 1000 a call, untimed.
func fillQueue(ctx context.Context, c *client.Client, queue string, payload json.RawMessage, n int) error {
	const chunk = 1000
	jobs := make([]api.Job, min(chunk, n))
	for i := range jobs {
		jobs[i] = api.Job{Queue: queue, Task: benchTask, Payload: payload}
	}
	for left := n; left > 0; left -= chunk {
		if _, err := c.EnqueueMany(ctx, jobs[:min(chunk, left)]); err != nil {
			return err
		}
	}
	return nil
}

// fillToMaxPending enqueues into A until a single job is refused
// QUEUE_FULL; the namespace may hold jobs already, so the count to add is
// found by halving the batch at each refusal.
func fillToMaxPending(ctx context.Context, c *client.Client, cfg FloodConfig) (int64, error) {
	jobs := make([]api.Job, 1000)
	for i := range jobs {
		jobs[i] = api.Job{Queue: cfg.Queue, Task: benchTask, Payload: cfg.Payload}
	}
	var filled int64
	n := int(min(int64(len(jobs)), max(cfg.FloodMaxPending, 1)))
	for n > 0 {
		_, err := c.EnqueueMany(ctx, jobs[:n])
		if e, ok := api.AsError(err); ok && e.Reason == api.ReasonQueueFull {
			n /= 2
			continue
		}
		if err != nil {
			return filled, err
		}
		filled += int64(n)
	}
	return filled, nil
}

// measureB runs n of B's single-job enqueues and n claim+acks, each
// paced at cfg.Rate per second, at the same time.
func measureB(ctx context.Context, c *client.Client, cfg FloodConfig, n int) (bSamples, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := &firstError{cancel: cancel}
	interval := time.Second / time.Duration(cfg.Rate)
	start := time.Now()
	var enqEnd, claimEnd atomic.Int64
	enq := paced(ctx, cfg.Producers, n, start, interval, &enqEnd, func(int) error {
		_, err := c.Enqueue(ctx, api.Job{Queue: cfg.Queue, Task: benchTask, Payload: cfg.Payload})
		if err != nil {
			return fmt.Errorf("bench flood: namespace B's enqueue: %w", err)
		}
		return nil
	}, fail)
	claims := paced(ctx, cfg.Workers, n, start, interval, &claimEnd, func(w int) error {
		jobs, err := c.Claim(ctx, api.ClaimRequest{Queues: []string{cfg.Queue}, Max: 1, LeaseMS: 60000, Worker: fmt.Sprintf("fq-bench-flood-%d", w)})
		if err != nil {
			return fmt.Errorf("bench flood: namespace B's claim: %w", err)
		}
		if len(jobs) == 0 {
			// B's backlog holds a phase's jobs: only another worker or a
			// cap can leave a claim empty.
			return fmt.Errorf("bench flood: a claim of queue %s found no job although B's backlog holds %d: is another worker taking them, or a cap (max_running, max_concurrent) in the way?", cfg.Queue, cfg.Jobs)
		}
		if err := c.Ack(ctx, jobs[0].ID, jobs[0].Attempt, nil); err != nil {
			return fmt.Errorf("bench flood: namespace B's ack: %w", err)
		}
		return nil
	}, fail)
	s := bSamples{enq: enq(), claim: claims()}
	if fail.err != nil {
		return s, fail.err
	}
	if err := ctx.Err(); err != nil {
		return s, err
	}
	s.enqTime = time.Duration(enqEnd.Load() - start.UnixNano())
	s.claimTime = time.Duration(claimEnd.Load() - start.UnixNano())
	s.elapsed = max(s.enqTime, s.claimTime)
	return s, nil
}

// paced starts n goroutines that make total calls between them, call k
// due at start + k×interval; each call is timed from when it is sent (a
// call that falls behind its schedule is sent at once). The returned
// function waits for them and returns the latencies. end receives the
// time (unix ns) the last call returned.
func paced(ctx context.Context, n, total int, start time.Time, interval time.Duration, end *atomic.Int64, call func(g int) error, fail *firstError) func() []time.Duration {
	lats := make([][]time.Duration, n)
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := g; k < total && ctx.Err() == nil; k += n {
				if !sleepUntil(ctx, start.Add(time.Duration(k)*interval)) {
					return
				}
				t0 := time.Now()
				if err := call(g); err != nil {
					if ctx.Err() == nil {
						fail.set(err)
					}
					return
				}
				now := time.Now()
				lats[g] = append(lats[g], now.Sub(t0))
				for {
					e := end.Load()
					if now.UnixNano() <= e || end.CompareAndSwap(e, now.UnixNano()) {
						break
					}
				}
			}
		}(g)
	}
	return func() []time.Duration {
		wg.Wait()
		var out []time.Duration
		for _, l := range lats {
			out = append(out, l...)
		}
		return out
	}
}

// sleepUntil waits for t or ctx, reporting false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// flood is A's producers, offering cfg.Offered() single-job calls a
// second until its context ends.
type flood struct {
	running chan struct{} // closed when the first call is answered
	done    chan struct{} // closed when every producer returned
	runOnce sync.Once
	// mu keeps the counts consistent with one another: a snapshot never
	// holds a call without its outcome.
	mu     sync.Mutex
	counts floodCounts
	err    error
}

type floodCounts struct{ calls, queueFull, rateLimited, accepted, total int64 }

func (f *flood) snapshot() floodCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

func (f *flood) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// answered counts one call of A by how it ended; any other error than
// A's quota refusing it ends the flood.
func (f *flood) answered(err error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, refused := api.AsError(err)
	switch {
	case err == nil:
		f.counts.accepted++
	case refused && e.Reason == api.ReasonQueueFull:
		f.counts.queueFull++
	case refused && e.Reason == api.ReasonRateLimited:
		f.counts.rateLimited++
	default:
		if f.err == nil {
			f.err = fmt.Errorf("bench flood: namespace A's enqueue: %w", err)
		}
		return false
	}
	f.counts.calls++
	return true
}

func startFlood(ctx context.Context, c *client.Client, cfg FloodConfig) *flood {
	f := &flood{running: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(ctx)
	interval := time.Duration(float64(time.Second) / cfg.Offered())
	start := time.Now()
	job := api.Job{Queue: cfg.Queue, Task: benchTask, Payload: cfg.Payload}
	var wg sync.WaitGroup
	for g := 0; g < cfg.FloodProducers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := int64(g); ctx.Err() == nil; k += int64(cfg.FloodProducers) {
				if !sleepUntil(ctx, start.Add(time.Duration(k)*interval)) {
					return
				}
				_, err := c.Enqueue(ctx, job)
				if ctx.Err() != nil {
					return // stopped: the call in flight tells nothing
				}
				if !f.answered(err) {
					cancel()
					return
				}
				f.runOnce.Do(func() { close(f.running) })
			}
		}(g)
	}
	go func() {
		wg.Wait()
		cancel()
		close(f.done)
	}()
	return f
}
