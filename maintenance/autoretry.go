package maintenance

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// AutoRetry replays dead letters of queues that set dead_retry_after, once
// they have been dead that long, at most dead_retry_max admitted replays
// per job (unset: no limit). Each replay goes through admission on its own,
// so a quota admits what fits. Shed jobs and dead letters of retry:false
// are never touched.
type AutoRetry struct {
	store  Store
	sender Sender
	log    *slog.Logger
	// PerQueue bounds the replays of one queue per run (default 1000).
	PerQueue int
}

// NewAutoRetry returns the sweep.
func NewAutoRetry(st Store, sender Sender, log *slog.Logger) *AutoRetry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &AutoRetry{store: st, sender: sender, log: log, PerQueue: 1000}
}

// Replay is one replay the sweep asked for, and what came of it.
type Replay struct {
	Namespace, ID string
	Outcome       api.Outcome // "" when refused
	Err           *api.Error
}

// RunOnce replays what is due at now.
func (a *AutoRetry) RunOnce(ctx context.Context, now time.Time) ([]Replay, error) {
	queues, err := a.store.ConfigList(ctx, "", store.KindQueue)
	if err != nil {
		return nil, fmt.Errorf("list queue settings: %w", err)
	}
	type pending struct {
		r  Replay
		ch chan answer
	}
	var sent []pending
	for _, it := range queues {
		qs, err := quota.DecodeQueueSettings(it.Value)
		if err != nil || qs.DeadRetryAfter == nil {
			continue
		}
		max := int64(math.MaxInt64)
		if qs.DeadRetryMax != nil {
			max = *qs.DeadRetryMax
		}
		dead, err := a.store.JobListDeadRetryable(ctx, store.JobListDeadRetryableParams{
			Namespace: it.Namespace, Queue: it.Name, DeadBefore: now.Add(-*qs.DeadRetryAfter),
			MaxReplays: max, Limit: a.PerQueue,
		})
		if err != nil {
			return nil, fmt.Errorf("list dead letters of %s/%s: %w", it.Namespace, it.Name, err)
		}
		for _, j := range dead {
			ch := make(chan answer, 1)
			a.sender.Send(it.Namespace, &actors.Message{
				Op: actors.OpReplay, Body: &api.ReplayRequest{IDs: []string{j.ID}}, AutoRetry: true,
				Reply: func(b any, e *api.Error) { ch <- answer{b, e} },
			})
			sent = append(sent, pending{Replay{Namespace: it.Namespace, ID: j.ID}, ch})
		}
	}
	out := make([]Replay, 0, len(sent))
	for _, s := range sent {
		var ans answer
		select {
		case ans = <-s.ch:
		case <-ctx.Done():
			return out, ctx.Err()
		}
		r := s.r
		if ans.err != nil {
			r.Err = ans.err
			a.log.Debug("auto-retry replay refused", "namespace", r.Namespace, "job", r.ID, "err", ans.err.Message)
		} else if rep, ok := ans.body.(api.EnqueueReply); ok && len(rep.Results) == 1 {
			r.Outcome = rep.Results[0].Outcome
		}
		out = append(out, r)
	}
	return out, nil
}

// Leader says whether this node runs the sweeps now.
type Leader interface {
	IsLeader() bool
}

// Loop runs fn every interval while this node leads, until ctx ends.
func Loop(ctx context.Context, interval time.Duration, leader Leader, now func() time.Time, log *slog.Logger, name string, fn func(context.Context, time.Time) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !leader.IsLeader() {
			continue
		}
		if err := fn(ctx, now()); err != nil && ctx.Err() == nil {
			log.Warn(name+" failed", "err", err)
		}
	}
}
