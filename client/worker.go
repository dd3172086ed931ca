package client

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/flexiq/flexiq/api"
)

// Handler runs one job. A nil error acks it with result; an error nacks it
// (retried unless the error wraps ErrNoRetry).
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
	Name string
	Log  *slog.Logger
}

// Worker claims jobs and runs them through a handler.
type Worker struct {
	c   *Client
	cfg WorkerConfig
	h   Handler

	mu      sync.Mutex
	running map[string]int64 // id → attempt

	// Acks wait here for the acker, which sends what has gathered in one
	// request while the worker goes on claiming.
	ackMu   sync.Mutex
	acks    []api.AckItem
	ackWake chan struct{}
}

// NewWorker returns a worker; Run starts it.
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
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Worker{c: c, cfg: cfg, h: h, running: map[string]int64{}, ackWake: make(chan struct{}, 1)}
}

// Run claims and runs jobs until ctx ends, then stops gracefully: no new
// claims, the claim in flight is taken and its jobs run, and Run returns
// once every running job is acked or nacked. Handlers get a context that is
// not cancelled by ctx; they should finish on their own.
//
// A job's slot frees when its handler returns; its ack is sent in the
// background, together with the acks of other jobs that finished meanwhile
// (one request for all, see Client.AckMany).
func (w *Worker) Run(ctx context.Context) error {
	slots := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	jobCtx := context.WithoutCancel(ctx)
	hbDone := make(chan struct{})
	go w.heartbeats(jobCtx, hbDone)
	defer close(hbDone)
	ackStop, ackDone := make(chan struct{}), make(chan struct{})
	go w.acker(jobCtx, ackStop, ackDone)
	defer func() { close(ackStop); <-ackDone }()

	// Two claims may be in flight at once, so slots that free while one
	// waits for its reply are claimed by the other instead of idling.
	claimers := 1
	if w.cfg.Concurrency >= 4 {
		claimers = 2
	}
	var cwg sync.WaitGroup
	for range claimers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			w.claimLoop(ctx, jobCtx, slots, &wg)
		}()
	}
	cwg.Wait()
	wg.Wait()
	return nil
}

// claimLoop claims jobs for free slots and starts them until ctx ends.
func (w *Worker) claimLoop(ctx, jobCtx context.Context, slots chan struct{}, wg *sync.WaitGroup) {
	leaseMS := w.cfg.Lease.Milliseconds()
	for ctx.Err() == nil {
		// Take every free slot, waiting for at least one.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		free := 1
	fill:
		for free < w.cfg.Concurrency {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break fill
			}
		}
		jobs, err := w.c.Claim(jobCtx, api.ClaimRequest{
			Queues: w.cfg.Queues, Max: free, WaitMS: w.cfg.Wait.Milliseconds(), LeaseMS: leaseMS, Worker: w.cfg.Name,
		})
		if err != nil {
			w.cfg.Log.Warn("claim failed", "err", err)
			for i := 0; i < free; i++ {
				<-slots
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		for i := len(jobs); i < free; i++ {
			<-slots
		}
		for _, job := range jobs {
			w.mu.Lock()
			w.running[job.ID] = job.Attempt
			w.mu.Unlock()
			wg.Add(1)
			go func(job api.Job) {
				defer wg.Done()
				defer func() { <-slots }()
				w.run(jobCtx, job)
			}(job)
		}
	}
}

func (w *Worker) run(ctx context.Context, job api.Job) {
	defer func() {
		w.mu.Lock()
		delete(w.running, job.ID)
		w.mu.Unlock()
	}()
	result, err := w.safeHandle(ctx, job)
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
		ids := make([]string, 0, len(w.running))
		for id := range w.running {
			ids = append(ids, id)
		}
		w.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		if _, err := w.c.Heartbeat(ctx, w.cfg.Lease.Milliseconds(), ids...); err != nil {
			w.cfg.Log.Warn("heartbeat failed", "err", err)
		}
	}
}
