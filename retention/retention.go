// Package retention is the retention leader of docs/quotas.md: on nodes where
// maintenance is on, and on one of them at a time, each tick first deletes
// completed and dead jobs past their TTL, then trims each namespace over its
// max_archived_rows / max_dead_rows ceiling, oldest first, at most Batch
// rows per namespace per kind per tick, so a namespace far over a new
// ceiling converges over several ticks and no delete holds the store long.
//
// It never touches pending or running jobs. A namespace whose quota cannot
// be read is skipped with a warning: neither its TTL nor a ceiling deletes
// its rows (it is stopped: SPEC's fail closed), nor is it trimmed as if
// unlimited.
package retention

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// Store is what retention reads and deletes.
type Store interface {
	SettingList(ctx context.Context, prefix string) ([]store.Setting, error)
	JobDeleteFinishedBefore(ctx context.Context, p store.JobDeleteFinishedBeforeParams) (int64, error)
	JobDeleteOverCeiling(ctx context.Context, p store.JobDeleteOverCeilingParams) (int64, error)
}

// Leader says whether this node is the retention leader now. A single node
// always is; a cluster fills this from a lease.
type Leader interface {
	IsLeader() bool
}

// AlwaysLeader is the leader of a one-node system.
type AlwaysLeader struct{}

// IsLeader is always true.
func (AlwaysLeader) IsLeader() bool { return true }

// Observer counts what a tick did (admin.Metrics fills it).
type Observer interface {
	Deleted(status api.Status, cause string, n int64)
	Skipped(namespace string)
}

type nopObserver struct{}

func (nopObserver) Deleted(api.Status, string, int64) {}
func (nopObserver) Skipped(string)                    {}

// Config configures the cleaner. Zero fields take the defaults of docs/configuration.md.
type Config struct {
	ArchiveTTL time.Duration // default 168h
	DeadTTL    time.Duration // default 720h
	Interval   time.Duration // default 30s
	Batch      int           // default 1000
	// Chunk is the most rows one delete removes (default 250): a tick's
	// batch goes out in several short transactions, so other namespaces'
	// writes slip in between instead of waiting for one long delete.
	Chunk int
	// MaxTTLBatches bounds the TTL batches of one tick (default 100), so a
	// huge backlog of expired rows is worked off over ticks too.
	MaxTTLBatches int
}

func (c Config) withDefaults() Config {
	c.ArchiveTTL = cmp.Or(c.ArchiveTTL, 168*time.Hour)
	c.DeadTTL = cmp.Or(c.DeadTTL, 720*time.Hour)
	c.Interval = cmp.Or(c.Interval, 30*time.Second)
	c.Batch = cmp.Or(c.Batch, 1000)
	c.Chunk = min(cmp.Or(c.Chunk, 250), c.Batch)
	c.MaxTTLBatches = cmp.Or(c.MaxTTLBatches, 100)
	return c
}

// Cleaner runs the sweeps.
type Cleaner struct {
	cfg    Config
	store  Store
	leader Leader
	obs    Observer
	log    *slog.Logger
	now    func() time.Time
}

// New returns a cleaner. leader, obs and log may be nil.
func New(cfg Config, st Store, leader Leader, obs Observer, log *slog.Logger, now func() time.Time) *Cleaner {
	if leader == nil {
		leader = AlwaysLeader{}
	}
	if obs == nil {
		obs = nopObserver{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return &Cleaner{cfg: cfg.withDefaults(), store: st, leader: leader, obs: obs, log: log, now: now}
}

// Result is what one tick did.
type Result struct {
	TTLCompleted, TTLDead int64
	// Ceiling holds rows deleted per namespace and status.
	Ceiling map[string]map[api.Status]int64
	// Skipped lists namespaces whose quota could not be read.
	Skipped []string
}

// Run ticks every Interval until ctx ends.
func (c *Cleaner) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if c.leader.IsLeader() {
			if _, err := c.RunOnce(ctx, c.now()); err != nil && ctx.Err() == nil {
				c.log.Warn("retention tick failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce is one tick at now: TTL sweeps, then row ceilings. A namespace
// whose quota cannot be read is skipped by both: it is stopped, and loses
// nothing (docs/quotas.md).
func (c *Cleaner) RunOnce(ctx context.Context, now time.Time) (Result, error) {
	res := Result{Ceiling: map[string]map[api.Status]int64{}}
	docs, err := c.store.SettingList(ctx, quota.KeyPrefix)
	if err != nil {
		return res, fmt.Errorf("list quotas: %w", err)
	}
	type readable struct {
		ns  string
		doc quota.Document
	}
	var ceilings []readable
	for _, set := range docs {
		ns, ok := quota.NamespaceFromKey(set.Key)
		if !ok {
			continue
		}
		doc, derr := quota.Decode(set.Value)
		if derr != nil {
			c.log.Warn("retention skips a namespace whose quota cannot be read", "namespace", ns, "err", derr)
			c.obs.Skipped(ns)
			res.Skipped = append(res.Skipped, ns)
			continue
		}
		ceilings = append(ceilings, readable{ns, doc})
	}
	if res.TTLCompleted, err = c.ttl(ctx, api.StatusCompleted, now.Add(-c.cfg.ArchiveTTL), res.Skipped); err != nil {
		return res, err
	}
	if res.TTLDead, err = c.ttl(ctx, api.StatusDead, now.Add(-c.cfg.DeadTTL), res.Skipped); err != nil {
		return res, err
	}
	for _, r := range ceilings {
		ns, doc := r.ns, r.doc
		for _, k := range []struct {
			status api.Status
			keep   *int64
		}{{api.StatusCompleted, doc.MaxArchivedRows}, {api.StatusDead, doc.MaxDeadRows}} {
			if k.keep == nil {
				continue
			}
			var n int64
			for n < int64(c.cfg.Batch) {
				d, err := c.store.JobDeleteOverCeiling(ctx, store.JobDeleteOverCeilingParams{
					Namespace: ns, Status: k.status, Keep: *k.keep, Limit: min(c.cfg.Chunk, c.cfg.Batch-int(n)),
				})
				if err != nil {
					return res, fmt.Errorf("trim %s rows of %s: %w", k.status, ns, err)
				}
				n += d
				if d < int64(min(c.cfg.Chunk, c.cfg.Batch-int(n-d))) {
					break // under the ceiling now
				}
			}
			if n > 0 {
				if res.Ceiling[ns] == nil {
					res.Ceiling[ns] = map[api.Status]int64{}
				}
				res.Ceiling[ns][k.status] = n
				c.obs.Deleted(k.status, "ceiling", n)
			}
		}
	}
	return res, nil
}

// ttl deletes rows of status that finished before cutoff, but those of
// the skipped namespaces, a chunk at a time, until a chunk comes back
// short (or the tick's bound).
func (c *Cleaner) ttl(ctx context.Context, status api.Status, cutoff time.Time, skip []string) (int64, error) {
	var total int64
	for i := 0; i < c.cfg.MaxTTLBatches*c.cfg.Batch/c.cfg.Chunk; i++ {
		n, err := c.store.JobDeleteFinishedBefore(ctx, store.JobDeleteFinishedBeforeParams{Status: status, Before: cutoff, Limit: c.cfg.Chunk, Skip: skip})
		if err != nil {
			return total, fmt.Errorf("ttl sweep of %s jobs: %w", status, err)
		}
		total += n
		if n < int64(c.cfg.Chunk) {
			break
		}
	}
	if total > 0 {
		c.obs.Deleted(status, "ttl", total)
	}
	return total, nil
}
