package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flexiq/flexiq/api"
)

// Handler runs one job. A nil error acks it with result; an error nacks it
// (retried unless the error wraps ErrNoRetry). Its context ends when the
// job's lease is lost (cause: an *api.Error of reason LEASE_LOST), not when
// the worker stops.
type Handler func(ctx context.Context, job api.Job) (result json.RawMessage, err error)

// ErrNoRetry, wrapped in a handler's error, sends the job straight to the
// dead letters.
var ErrNoRetry = errors.New("do not retry")

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	Queues      []string
	Concurrency int           // jobs at once (default 1)
	Lease       time.Duration // default 30 s; heartbeats every third of it
	// Wait is the long-poll of each claim (default 1 s): the longest a stop
	// waits for a claim in flight.
	Wait time.Duration
	// Prefetch is how many jobs the worker may hold ahead of its free
	// slots (default 0: it claims only for free slots). A prefetched job
	// is claimed, so it is leased, heartbeated and counted as running
	// against max_running and the queue and task caps, like one running;
	// it starts as soon as a slot frees, without a claim's round trip in
	// between. On stop, jobs not started are released (Client.Release):
	// pending again at once, their attempt not spent. A prefetched job
	// whose lease is lost (a heartbeat did not extend it) or has run out
	// by this worker's clock (heartbeats failing) is never started: the
	// node may have given it to another worker. Keep it small when jobs
	// are slow or several workers share a max_running: a prefetched job
	// waits here while another worker could run it.
	Prefetch int
	Name     string
	Log      *slog.Logger
}

// MaxPrefetch bounds WorkerConfig.Prefetch.
const MaxPrefetch = api.MaxClaim

// Worker claims jobs and runs them through a handler.
type Worker struct {
	c   *Client
	cfg WorkerConfig
	h   Handler

	mu      sync.Mutex
	running map[string]*heldJob // prefetched jobs included
	// tokens is Run's held: a token for each job the worker holds.
	tokens chan struct{}

	// Acks wait here for the acker, which sends what has gathered in one
	// request while the worker goes on claiming.
	ackMu   sync.Mutex
	acks    []api.AckItem
	ackWake chan struct{}
}

// heldJob is a job the worker holds under a lease: running, or
// prefetched and waiting for a slot.
type heldJob struct {
	attempt int64
	// deadline is the lease as this worker can vouch for it: when the
	// node handed the job out (leaseDeadline), or the last heartbeat that
	// extended it was sent, plus the lease. Past it the node may have
	// given the job to another worker.
	deadline time.Time
	// lost: a heartbeat came back without the job, so its lease is gone.
	lost bool
	// taken: a slot has taken it from ready (to run or give back).
	taken bool
	// freed: lost while it waited in ready, its token was given back at
	// once, so a claim may take another job in its place; the slot that
	// later finds it does not give it back again.
	freed bool
	// cancel ends the handler's context once the job runs.
	cancel context.CancelCauseFunc
}

// NewWorker returns a worker; Run starts it. It panics on a Prefetch
// outside 0..MaxPrefetch, a programming error.
func NewWorker(c *Client, cfg WorkerConfig, h Handler) *Worker {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Wait <= 0 {
		cfg.Wait = time.Second
	}
	if cfg.Prefetch < 0 || cfg.Prefetch > MaxPrefetch {
		panic(fmt.Sprintf("client: WorkerConfig.Prefetch must be 0-%d, got %d", MaxPrefetch, cfg.Prefetch))
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Worker{c: c, cfg: cfg, h: h, running: map[string]*heldJob{}, ackWake: make(chan struct{}, 1)}
}

// Run claims and runs jobs until ctx ends, then stops gracefully: no new
// claims, the claim in flight is taken, jobs already started finish, jobs
// prefetched and not started are released, and Run returns once every job
// it held is acked, nacked or released. Handlers get a context that is not
// cancelled by ctx; they should finish on their own. It is cancelled when
// the job's lease is lost (a heartbeat did not extend it; its cause is an
// *api.Error with reason LEASE_LOST): another worker may run the job now,
// and the handler's result is not sent. A prefetched job whose lease is
// lost, or has run out by this worker's clock, is not started at all.
//
// A job's slot frees when its handler returns; its ack is sent in the
// background, together with the acks of other jobs that finished meanwhile
// (one request for all, see Client.AckMany).
func (w *Worker) Run(ctx context.Context) error {
	// held has a token for every job the worker holds (running, or
	// prefetched and waiting in ready): claims ask only for free tokens.
	held := make(chan struct{}, w.cfg.Concurrency+w.cfg.Prefetch)
	// ready also has room for as many jobs lost while they wait, whose
	// tokens went back to claims (heldJob.freed), so a claim does not wait
	// on it unless lost jobs pile up past that.
	ready := make(chan api.Job, 2*(w.cfg.Concurrency+w.cfg.Prefetch))
	w.mu.Lock()
	w.tokens = held
	w.mu.Unlock()
	jobCtx := context.WithoutCancel(ctx)
	hbDone := make(chan struct{})
	go w.heartbeats(jobCtx, hbDone)
	defer close(hbDone)
	ackStop, ackDone := make(chan struct{}), make(chan struct{})
	go w.acker(jobCtx, ackStop, ackDone)
	defer func() { close(ackStop); <-ackDone }()

	// The slots: each runs the ready jobs one at a time until the stop.
	var rwg sync.WaitGroup
	for range w.cfg.Concurrency {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case job := <-ready:
					h, freed := w.usable(job)
					switch {
					case h == nil:
						// Its lease is gone: not ours to start or give back.
					case ctx.Err() != nil:
						// Taken as the stop came: not started, so given back.
						w.release(jobCtx, job, h)
					default:
						w.run(jobCtx, job, h)
					}
					if !freed {
						<-held
					}
				}
			}
		}()
	}

	// Two claims may be in flight at once, so tokens that free while one
	// waits for its reply are claimed by the other instead of idling;
	// three for 64 tokens or more, which keep the namespace's actor busier
	// (in-process, 96 ahead of 32 slots: 7-14 % more jobs/s on SQLite and
	// PostgreSQL than two; a second batched ack in flight added nothing).
	claimers := 1
	if w.cfg.Concurrency+w.cfg.Prefetch >= 4 {
		claimers = 2
	}
	if w.cfg.Concurrency+w.cfg.Prefetch >= 64 {
		claimers = 3
	}
	var cwg sync.WaitGroup
	for range claimers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			w.claimLoop(ctx, jobCtx, held, ready)
		}()
	}
	cwg.Wait()
	rwg.Wait()
	// What is left in ready was never started.
	for {
		select {
		case job := <-ready:
			h, freed := w.usable(job)
			if h != nil {
				w.release(jobCtx, job, h)
			}
			if !freed {
				<-held
			}
			continue
		default:
		}
		break
	}
	return nil
}

// usable returns what the worker holds of a job a slot took from ready,
// to run or give back: nil, and the job forgotten, when its lease is lost
// or has run out by this worker's clock. freed: its token was given back
// already (heldJob.freed).
func (w *Worker) usable(job api.Job) (h *heldJob, freed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h = w.running[job.ID]
	if h == nil || h.attempt != job.Attempt {
		// Not expected: each job in ready has its entry until a slot
		// takes it. Give its token back and go on.
		w.cfg.Log.Warn("a job held ahead is not known; not run", "job", job.ID, "attempt", job.Attempt)
		return nil, false
	}
	if h.lost || !time.Now().Before(h.deadline) {
		delete(w.running, job.ID)
		w.cfg.Log.Warn("lease of a job held ahead ran out before it started; not run", "job", job.ID, "attempt", job.Attempt)
		return nil, h.freed
	}
	h.taken = true
	return h, false
}

// forget drops h, the worker's hold on job, unless the job was claimed
// again since (a job given back may come back to this worker's next
// claim, under the same attempt) and the entry is that claim's.
func (w *Worker) forget(job api.Job, h *heldJob) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running[job.ID] == h {
		delete(w.running, job.ID)
	}
}

// claimLoop claims jobs for the free tokens and hands them to the slots
// until ctx ends.
func (w *Worker) claimLoop(ctx, jobCtx context.Context, held chan struct{}, ready chan<- api.Job) {
	leaseMS := w.cfg.Lease.Milliseconds()
	for ctx.Err() == nil {
		// Take every free token, waiting for at least one.
		select {
		case held <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		free := 1
	fill:
		for free < cap(held) && free < api.MaxClaim {
			select {
			case held <- struct{}{}:
				free++
			default:
				break fill
			}
		}
		sent := time.Now()
		jobs, err := w.c.Claim(jobCtx, api.ClaimRequest{
			Queues: w.cfg.Queues, Max: free, WaitMS: w.cfg.Wait.Milliseconds(), LeaseMS: leaseMS, Worker: w.cfg.Name,
		})
		if err != nil {
			w.cfg.Log.Warn("claim failed", "err", err)
			for i := 0; i < free; i++ {
				<-held
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		recv := time.Now()
		for i := len(jobs); i < free; i++ {
			<-held
		}
		for _, job := range jobs {
			h := &heldJob{attempt: job.Attempt, deadline: leaseDeadline(job, sent, recv, w.cfg.Lease)}
			w.mu.Lock()
			w.running[job.ID] = h
			w.mu.Unlock()
			// ready has a place for every token and as many lost jobs
			// (heldJob.freed); past that the job waits for a slot, or is
			// given back if the worker stops first.
			select {
			case ready <- job:
			case <-ctx.Done():
				select {
				case ready <- job:
				default:
					w.mu.Lock()
					h.taken = true
					w.mu.Unlock()
					w.release(jobCtx, job, h)
					<-held
				}
			}
		}
	}
}

// leaseDeadline is when the lease of job, claimed by a request sent at
// sent and answered at recv, runs out by this worker's clock. The node
// starts the lease when it hands the job out: at once, or later in a long
// poll, when a job comes due (possibly more than a lease after sent). It
// says when in lease_until, by its own clock; read as this worker's, the
// start is kept between sent and recv, so a clock ahead or behind the
// node's moves the deadline by at most the claim's round trip (and never
// past recv plus the lease). Without lease_until it is sent plus the lease.
func leaseDeadline(job api.Job, sent, recv time.Time, lease time.Duration) time.Time {
	var start time.Duration // after sent
	if job.LeaseUntil != nil {
		// Sub on a time without a monotonic reading compares wall clocks;
		// the result is added to sent, which keeps its monotonic reading.
		start = min(max(job.LeaseUntil.Add(-lease).Sub(sent), 0), recv.Sub(sent))
	}
	return sent.Add(start + lease)
}

// release gives back a job that was not started.
func (w *Worker) release(ctx context.Context, job api.Job, h *heldJob) {
	defer w.forget(job, h)
	if err := w.c.Release(ctx, job.ID, job.Attempt); err != nil {
		w.cfg.Log.Warn("release failed", "job", job.ID, "err", err)
	}
}

func (w *Worker) run(ctx context.Context, job api.Job, h *heldJob) {
	// The handler's context ends if a heartbeat finds the lease lost.
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.mu.Lock()
	h.cancel = cancel
	if h.lost {
		// Lost since the slot took it: the handler learns at once.
		cancel(api.LeaseLost(job.ID))
	}
	w.mu.Unlock()
	result, err := w.safeHandle(hctx, job)
	w.forget(job, h)
	w.mu.Lock()
	lost := h.lost
	w.mu.Unlock()
	if lost {
		// Another worker may hold the job now: an ack or nack under this
		// attempt would only be refused.
		w.cfg.Log.Warn("job finished after its lease was lost; result not sent", "job", job.ID, "attempt", job.Attempt)
		return
	}
	if err == nil {
		w.ackMu.Lock()
		w.acks = append(w.acks, api.AckItem{ID: job.ID, Attempt: job.Attempt, Result: result})
		w.ackMu.Unlock()
		select {
		case w.ackWake <- struct{}{}:
		default:
		}
		return
	}
	if _, nerr := w.c.Nack(ctx, job.ID, job.Attempt, err.Error(), !errors.Is(err, ErrNoRetry)); nerr != nil {
		w.cfg.Log.Warn("nack failed", "job", job.ID, "err", nerr)
	}
}

func (w *Worker) safeHandle(ctx context.Context, job api.Job) (result json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("handler panicked")
		}
	}()
	return w.h(ctx, job)
}

// acker sends the queued acks, all that have gathered in one request, until
// stop; then it sends what is left and closes done.
func (w *Worker) acker(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		stopping := false
		select {
		case <-w.ackWake:
		case <-stop:
			stopping = true
		}
		for {
			w.ackMu.Lock()
			n := min(len(w.acks), api.MaxClaim)
			batch := append([]api.AckItem(nil), w.acks[:n]...)
			w.acks = append(w.acks[:0], w.acks[n:]...)
			w.ackMu.Unlock()
			if n == 0 {
				break
			}
			w.sendAcks(ctx, batch)
		}
		if stopping {
			return
		}
	}
}

func (w *Worker) sendAcks(ctx context.Context, batch []api.AckItem) {
	if len(batch) == 1 {
		// One ack alone goes in the plain form (docs/protocol.md).
		if err := w.c.Ack(ctx, batch[0].ID, batch[0].Attempt, batch[0].Result); err != nil {
			w.cfg.Log.Warn("ack failed", "job", batch[0].ID, "err", err)
		}
		return
	}
	results, err := w.c.AckMany(ctx, batch)
	if err != nil {
		w.cfg.Log.Warn("ack failed", "jobs", len(batch), "err", err)
		return
	}
	for _, r := range results {
		if r.Error != nil {
			w.cfg.Log.Warn("ack failed", "job", r.ID, "err", r.Error)
		}
	}
}

// heartbeats extends the leases of running jobs every third of the lease.
func (w *Worker) heartbeats(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(w.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		w.mu.Lock()
		held := make(map[string]*heldJob, len(w.running))
		for id, h := range w.running {
			if !h.lost {
				held[id] = h
			}
		}
		w.mu.Unlock()
		if len(held) == 0 {
			continue
		}
		ids := make([]string, 0, len(held))
		for id := range held {
			ids = append(ids, id)
		}
		// A heartbeat names at most api.MaxClaim jobs: a worker holding
		// more sends several.
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), api.MaxClaim)]
			ids = ids[len(chunk):]
			w.beat(ctx, chunk, held)
		}
	}
}

// beat extends the leases of ids, jobs the worker held when the tick
// began, and lets go of those the node did not extend.
func (w *Worker) beat(ctx context.Context, ids []string, held map[string]*heldJob) {
	sent := time.Now()
	extended, err := w.c.Heartbeat(ctx, w.cfg.Lease.Milliseconds(), ids...)
	if err != nil {
		// The leases run on; a job held ahead past its deadline is not
		// started.
		w.cfg.Log.Warn("heartbeat failed", "err", err)
		return
	}
	kept := make(map[string]bool, len(extended))
	for _, id := range extended {
		kept[id] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		h := held[id]
		if w.running[id] != h {
			continue // finished meanwhile
		}
		if kept[id] {
			h.deadline = sent.Add(w.cfg.Lease)
			continue
		}
		h.lost = true
		w.cfg.Log.Warn("lease lost: a heartbeat did not extend it", "job", id, "attempt", h.attempt)
		if h.cancel != nil {
			h.cancel(api.LeaseLost(id))
		}
		if !h.taken && !h.freed {
			// Waiting in ready, never to start: its token goes back now,
			// so a claim may take another job in its place.
			h.freed = true
			<-w.tokens
		}
	}
}
