// Package cachebust is the per-node cache of each namespace's quota and
// configuration (queue and task settings, triggers) and its invalidation.
//
// A node may use a cached copy for at most the TTL (FLEXIQ_QUOTA_CACHE_TTL,
// 2 s). Every write also broadcasts on fq.v1.quota.changed (or
// fq.v1.config.changed); Invalidate drops the copy at once, so in practice a
// change is enforced in milliseconds and the TTL bounds it when a broadcast
// is lost. A revision that arrives by broadcast is remembered once the
// store confirms it holds it (InvalidateVerified), so a load that raced
// with the write and read an older document is not trusted, and a forged
// revision cannot make a namespace's copy untrusted for good.
package cachebust

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// Store is what the cache reads.
type Store interface {
	SettingGet(ctx context.Context, key string) (store.Setting, error)
	ConfigList(ctx context.Context, namespace, kind string) ([]store.ConfigItem, error)
}

// Snapshot is what a namespace runs under.
type Snapshot struct {
	Quota    quota.Document
	Revision int64
	// Err is set when the namespace must stop (fail closed): its quota
	// document or configuration cannot be read (UNAVAILABLE) or decoded
	// (FAILED_PRECONDITION / QUOTA_UNREADABLE).
	Err      *api.Error
	Queues   map[string]quota.QueueSettings
	Tasks    map[string]quota.TaskSettings
	Triggers []api.Trigger
	// LoadedAt is when the snapshot was read from the store.
	LoadedAt time.Time
}

type entry struct {
	snap  Snapshot
	valid bool
	// minRev is the newest quota revision a broadcast announced; a snapshot
	// older than it is stale.
	minRev int64
	used   time.Time
}

// Cache is one node's cache. It is safe for concurrent use.
type Cache struct {
	store Store
	ttl   time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry
	gets    int
}

// New returns a cache reading st, trusting a copy for ttl.
func New(st Store, ttl time.Duration, log *slog.Logger) *Cache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{store: st, ttl: ttl, log: log, entries: map[string]*entry{}}
}

// TTL is how long a copy is trusted.
func (c *Cache) TTL() time.Duration { return c.ttl }

// Get returns ns's snapshot at now, reading the store when the cached copy
// is missing, older than the TTL or invalidated. A store error comes back as
// a snapshot with Err UNAVAILABLE, and is not cached.
func (c *Cache) Get(ctx context.Context, ns string, now time.Time) Snapshot {
	c.mu.Lock()
	e := c.entries[ns]
	if e != nil && e.valid && now.Sub(e.snap.LoadedAt) < c.ttl && e.snap.Revision >= e.minRev {
		e.used = now
		snap := e.snap
		c.mu.Unlock()
		return snap
	}
	c.gets++
	if c.gets%1024 == 0 {
		c.pruneLocked(now)
	}
	c.mu.Unlock()

	snap, err := c.load(ctx, ns, now)
	if err != nil {
		c.log.Warn("namespace configuration unreadable: store error", "namespace", ns, "err", err)
		return Snapshot{Err: api.Errorf(api.CodeUnavailable, "", "store unavailable: cannot read the quota of namespace '%s'", ns), LoadedAt: now}
	}
	c.mu.Lock()
	e = c.entries[ns]
	if e == nil {
		e = &entry{}
		c.entries[ns] = e
	}
	// Never let an older read replace a newer one.
	if !e.valid || snap.Revision >= e.snap.Revision {
		e.snap, e.valid = snap, true
	}
	e.used = now
	out := e.snap
	c.mu.Unlock()
	return out
}

// pruneLocked forgets namespaces not used for a while, so a node that
// touched many namespaces once does not keep them all.
func (c *Cache) pruneLocked(now time.Time) {
	for ns, e := range c.entries {
		if now.Sub(e.used) > 10*c.ttl && now.Sub(e.used) > time.Minute {
			delete(c.entries, ns)
		}
	}
}

// Invalidate drops ns's copy after a quota write of revision rev; a copy
// already at rev or newer stays. rev is remembered and trusted as it is:
// call Invalidate only with a revision this node knows the store holds
// (its own committed write). A revision that arrives by broadcast goes
// through InvalidateVerified.
func (c *Cache) Invalidate(ns string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[ns]
	if e == nil {
		return
	}
	if rev > e.minRev {
		e.minRev = rev
	}
	if e.snap.Revision < rev {
		e.valid = false
	}
}

// ErrRevisionNotHeld is a broadcast's claim of a quota revision that the
// store does not hold.
var ErrRevisionNotHeld = errors.New("the store does not hold the announced quota revision")

// InvalidateVerified is Invalidate for a revision announced by another
// node's broadcast, which this node cannot simply believe: remembered as
// it is, a made-up revision (2^63-1, say) would leave ns's copy older than
// it forever, so the cache would read the store on every Get. The claim
// is checked against the store first, and only a revision the store holds
// is remembered; one it does not hold changes nothing and comes back as
// ErrRevisionNotHeld.
//
// The check cannot miss a genuine write: the admin door publishes only
// after the write has committed (admin writeQuota), so by the time the
// broadcast arrives any new read sees it. (A store that served reads from
// a lagging replica would make a genuine broadcast look ahead of the
// store; it is then dropped and the TTL still bounds the staleness.)
//
// To keep a flood of broadcasts cheap, the store is read only when the
// claim could change something: ns is cached and its copy is older than
// rev. A store error leaves the claim unverified: the copy is dropped,
// since reading again is always safe, but rev is not remembered, and the
// error is returned.
func (c *Cache) InvalidateVerified(ctx context.Context, ns string, rev int64) error {
	c.mu.Lock()
	e := c.entries[ns]
	moot := e == nil || e.snap.Revision >= rev || e.minRev >= rev
	c.mu.Unlock()
	if moot {
		return nil
	}
	var held int64
	set, err := c.store.SettingGet(ctx, quota.Key(ns))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		c.mu.Lock()
		if e := c.entries[ns]; e != nil {
			e.valid = false
		}
		c.mu.Unlock()
		return fmt.Errorf("verify quota revision %d of namespace %q: %w", rev, ns, err)
	default:
		held = set.Revision
	}
	if held < rev {
		return fmt.Errorf("%w: namespace %q revision %d, the store holds %d", ErrRevisionNotHeld, ns, rev, held)
	}
	c.Invalidate(ns, rev)
	return nil
}

// InvalidateConfig drops ns's copy after a configuration write.
func (c *Cache) InvalidateConfig(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[ns]; e != nil {
		e.valid = false
	}
}

// Len reports how many namespaces are cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// load reads ns's quota and configuration. A document that does not decode
// is not an error of the store: the snapshot carries QUOTA_UNREADABLE.
func (c *Cache) load(ctx context.Context, ns string, now time.Time) (Snapshot, error) {
	snap := Snapshot{LoadedAt: now}
	set, err := c.store.SettingGet(ctx, quota.Key(ns))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return snap, err
	default:
		snap.Revision = set.Revision
		if set.Value != nil {
			doc, derr := quota.Decode(set.Value)
			if derr != nil {
				c.log.Warn("quota document unreadable: namespace stopped until it is fixed or cleared",
					"namespace", ns, "revision", set.Revision, "err", derr)
				snap.Err = Unreadable(ns, derr)
			}
			snap.Quota = doc
		}
	}
	queues, err := c.store.ConfigList(ctx, ns, store.KindQueue)
	if err != nil {
		return snap, err
	}
	for _, it := range queues {
		qs, derr := quota.DecodeQueueSettings(it.Value)
		if derr != nil {
			snap.Err = api.Errorf(api.CodeFailedPrecondition, api.ReasonQuotaUnreadable,
				"settings of queue '%s' in namespace '%s' cannot be read: %v", it.Name, ns, derr)
			continue
		}
		if snap.Queues == nil {
			snap.Queues = map[string]quota.QueueSettings{}
		}
		snap.Queues[it.Name] = qs
	}
	tasks, err := c.store.ConfigList(ctx, ns, store.KindTask)
	if err != nil {
		return snap, err
	}
	for _, it := range tasks {
		ts, derr := quota.DecodeTaskSettings(it.Value)
		if derr != nil {
			snap.Err = api.Errorf(api.CodeFailedPrecondition, api.ReasonQuotaUnreadable,
				"settings of task '%s' in namespace '%s' cannot be read: %v", it.Name, ns, derr)
			continue
		}
		if snap.Tasks == nil {
			snap.Tasks = map[string]quota.TaskSettings{}
		}
		snap.Tasks[it.Name] = ts
	}
	triggers, err := c.store.ConfigList(ctx, ns, store.KindTrigger)
	if err != nil {
		return snap, err
	}
	for _, it := range triggers {
		var tr api.Trigger
		if derr := json.Unmarshal(it.Value, &tr); derr != nil {
			c.log.Warn("trigger unreadable; skipped", "namespace", ns, "trigger", it.Name, "err", derr)
			continue
		}
		tr.ID = it.Name
		snap.Triggers = append(snap.Triggers, tr)
	}
	return snap, nil
}

// Unreadable is the fail-closed error of a namespace whose quota document
// does not decode.
func Unreadable(ns string, cause error) *api.Error {
	return api.Errorf(api.CodeFailedPrecondition, api.ReasonQuotaUnreadable,
		"quota of namespace '%s' cannot be read: %s", ns, fmt.Sprint(cause))
}
