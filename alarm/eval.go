package alarm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// Store is what the alarms read and write.
type Store interface {
	SettingGet(ctx context.Context, key string) (store.Setting, error)
	SettingPut(ctx context.Context, p store.SettingPutParams) (store.Setting, error)
	SettingList(ctx context.Context, prefix string) ([]store.Setting, error)
	JobCount(ctx context.Context, namespace string) (store.Counts, error)
}

// List returns the alarms of namespace ns, or of every namespace when ns
// is "": raised ones first. Cleared alarms stay listed for KeepCleared.
func List(ctx context.Context, st Store, ns string) ([]Alarm, error) {
	out := []Alarm{}
	if ns != "" {
		set, err := st.SettingGet(ctx, Key(ns))
		if errors.Is(err, store.ErrNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		return append(out, decode(ns, set.Value).alarms()...), nil
	}
	all, err := st.SettingList(ctx, KeyPrefix)
	if err != nil {
		return nil, err
	}
	for _, set := range all {
		if name, ok := namespaceFromKey(set.Key); ok {
			out = append(out, decode(name, set.Value).alarms()...)
		}
	}
	sortAlarms(out)
	return out, nil
}

// Observer is told every alarm after each pass (the flexiq_quota_alarm
// gauge: admin.Metrics).
type Observer interface {
	QuotaAlarms(all []Alarm)
}

// Config is an Evaluator's collaborators.
type Config struct {
	Store Store
	// Owns says whether this node owns namespace ns: only the owner
	// evaluates it.
	Owns func(ns string) bool
	// Rates is this node's view of each namespace's enqueue rate.
	Rates Rates
	// Live, when set, has the pending and running counts the owner's
	// actor last reported (admin.History): a pass then counts nothing in
	// the store for a namespace that limits only those, however long its
	// backlog. Counts read from the store are handed back to it.
	Live     Live
	Observer Observer
	Log      *slog.Logger
	// MaxPerPass bounds the namespaces evaluated in one pass (default
	// 1000); the next pass goes on where this one stopped.
	MaxPerPass int
}

// Live is what a node knows of its namespaces' counts without the store.
type Live interface {
	Live(ns string) (pending, running int64, ok bool)
	Record(ns string, pending, running int64, now time.Time)
}

// Evaluator raises and clears the alarms of the namespaces this node owns.
type Evaluator struct {
	cfg    Config
	cursor int // where the next pass starts among the quota documents
}

// New returns an Evaluator.
func New(cfg Config) *Evaluator {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxPerPass <= 0 {
		cfg.MaxPerPass = 1000
	}
	if cfg.Owns == nil {
		cfg.Owns = func(string) bool { return true }
	}
	return &Evaluator{cfg: cfg}
}

// RunOnce evaluates the namespaces this node owns that have a quota
// document (a namespace without one has no limit to come near), writes
// the alarms that changed and tells the Observer every alarm. It returns
// the changes it wrote.
func (e *Evaluator) RunOnce(ctx context.Context, now time.Time) ([]Change, error) {
	docs, err := e.cfg.Store.SettingList(ctx, quota.KeyPrefix)
	if err != nil {
		return nil, fmt.Errorf("list quota documents: %w", err)
	}
	stored, err := e.cfg.Store.SettingList(ctx, KeyPrefix)
	if err != nil {
		return nil, fmt.Errorf("list alarms: %w", err)
	}
	recs := make(map[string]*record, len(stored))
	for _, set := range stored {
		if ns, ok := namespaceFromKey(set.Key); ok {
			recs[ns] = decode(ns, set.Value)
		}
	}
	withDoc := make(map[string]bool, len(docs))
	for _, d := range docs {
		if ns, ok := quota.NamespaceFromKey(d.Key); ok {
			withDoc[ns] = true
		}
	}

	var changes []Change
	if e.cursor >= len(docs) {
		e.cursor = 0
	}
	evaluated := 0
	for i := 0; i < len(docs) && evaluated < e.cfg.MaxPerPass; i++ {
		d := docs[(e.cursor+i)%len(docs)]
		ns, ok := quota.NamespaceFromKey(d.Key)
		if !ok || !e.cfg.Owns(ns) {
			continue
		}
		evaluated++
		doc, err := quota.Decode(d.Value)
		if err != nil {
			// A stopped namespace: its alarms stay as they are, and the
			// dashboard shows it stopped.
			continue
		}
		readings, err := e.readings(ctx, ns, doc, now)
		if err != nil {
			return changes, err
		}
		cs, err := e.update(ctx, ns, recs[ns], readings, now)
		if err != nil {
			return changes, err
		}
		changes = append(changes, cs...)
		if evaluated == e.cfg.MaxPerPass {
			e.cursor = (e.cursor + i + 1) % len(docs)
		}
	}
	if evaluated < e.cfg.MaxPerPass {
		e.cursor = 0
	}
	// A namespace whose document was cleared has no limit left: its
	// alarms clear.
	orphans := make([]string, 0)
	for ns := range recs {
		if !withDoc[ns] && e.cfg.Owns(ns) {
			orphans = append(orphans, ns)
		}
	}
	sort.Strings(orphans)
	for _, ns := range orphans {
		cs, err := e.update(ctx, ns, recs[ns], nil, now)
		if err != nil {
			return changes, err
		}
		changes = append(changes, cs...)
	}
	if e.cfg.Observer != nil {
		all, err := List(ctx, e.cfg.Store, "")
		if err != nil {
			return changes, fmt.Errorf("list alarms: %w", err)
		}
		e.cfg.Observer.QuotaAlarms(all)
	}
	return changes, nil
}

func (e *Evaluator) readings(ctx context.Context, ns string, doc quota.Document, now time.Time) ([]Reading, error) {
	var c store.Counts
	if NeedsCounts(doc) {
		live := false
		if e.cfg.Live != nil && !needsFinished(doc) {
			c.Pending, c.Running, live = e.cfg.Live.Live(ns)
		}
		if !live {
			var err error
			if c, err = e.cfg.Store.JobCount(ctx, ns); err != nil {
				return nil, fmt.Errorf("count the jobs of namespace %q: %w", ns, err)
			}
			if e.cfg.Live != nil {
				e.cfg.Live.Record(ns, c.Pending, c.Running, now)
			}
		}
	}
	return Readings(ns, doc, c, e.cfg.Rates), nil
}

// update writes ns's alarms when readings change them. The listed record
// tells whether anything changes (most passes change nothing and write
// nothing); the write itself is read-modify-write, conditional on the
// revision, so two nodes that both believe they own ns for a moment (an
// ownership move) cannot undo each other's change.
func (e *Evaluator) update(ctx context.Context, ns string, listed *record, readings []Reading, now time.Time) ([]Change, error) {
	if listed == nil {
		listed = decode(ns, nil)
	}
	dry := listed.clone()
	if dry.apply(readings, now); equal(dry, listed) {
		return nil, nil
	}
	key := Key(ns)
	for attempt := 0; attempt < 3; attempt++ {
		var rev int64
		rec := decode(ns, nil)
		set, err := e.cfg.Store.SettingGet(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("read the alarms of namespace %q: %w", ns, err)
		default:
			rev, rec = set.Revision, decode(ns, set.Value)
		}
		before := rec.clone()
		changes := rec.apply(readings, now)
		if equal(before, rec) {
			return nil, nil
		}
		value := rec.encode()
		if value == nil && len(before.Limits) == 0 {
			return nil, nil
		}
		_, err = e.cfg.Store.SettingPut(ctx, store.SettingPutParams{Key: key, Value: value, Now: now, IfRevision: &rev})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("write the alarms of namespace %q: %w", ns, err)
		}
		for _, c := range changes {
			if c.Raised {
				e.cfg.Log.Warn("quota alarm raised", "namespace", c.Namespace, "limit", c.Limit,
					"percent", c.Reading.Percent, "usage", c.Reading.Usage, "max", c.Reading.Max)
			} else {
				e.cfg.Log.Info("quota alarm cleared", "namespace", c.Namespace, "limit", c.Limit, "percent", c.Reading.Percent)
			}
		}
		return changes, nil
	}
	// Another node kept writing: it owns ns now, or will settle it.
	return nil, nil
}
