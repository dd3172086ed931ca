// Package maintenance holds the leader's recurring producers: periodic
// (cron) fires and the dead-letter auto-retry sweep. Both enqueue through
// the namespace actors, so every fire and every replay meets the same
// admission as any other producer.
package maintenance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// Store is what the sweeps read and write.
type Store interface {
	ConfigList(ctx context.Context, namespace, kind string) ([]store.ConfigItem, error)
	ConfigGet(ctx context.Context, namespace, kind, name string) (store.ConfigItem, error)
	ConfigPut(ctx context.Context, p store.ConfigPutParams) (store.ConfigItem, error)
	JobListDeadRetryable(ctx context.Context, p store.JobListDeadRetryableParams) ([]store.Job, error)
}

// Sender hands a message to a namespace's actor (actors.System).
type Sender interface {
	Send(ns string, m *actors.Message)
}

// Observer counts fires by outcome.
type Observer interface {
	Fired(ns, outcome string)
}

type nopObserver struct{}

func (nopObserver) Fired(string, string) {}

// cronParser takes 5-field cron and descriptors such as "@every 30s".
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses a schedule of at most api.MaxCronBytes. An @every
// shorter than a second is refused: the parser would quietly make -5s or 0s
// into 1s, a schedule that fires every second, which nobody who wrote it
// meant.
func ParseCron(spec string) (cron.Schedule, error) {
	if len(spec) > api.MaxCronBytes {
		return nil, fmt.Errorf("must be at most %d bytes, got %d", api.MaxCronBytes, len(spec))
	}
	if rest, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("@every: %w", err)
		}
		if d < time.Second {
			return nil, fmt.Errorf("@every takes a duration of at least 1s, got %v", d)
		}
	}
	return cronParser.Parse(spec)
}

// periodicState is what is kept of a schedule's fires: the tick it last
// fired for, and which definition (by creation seq) that was.
type periodicState struct {
	Seq  int64     `json:"seq"`
	Last time.Time `json:"last"`
}

// Periodic fires cron schedules.
type Periodic struct {
	store  Store
	sender Sender
	obs    Observer
	log    *slog.Logger
	// parse is ParseCron; tests count its calls.
	parse func(string) (cron.Schedule, error)

	// mu guards cache: each definition's parsed schedule, kept while the
	// stored definition stays the same. RunOnce runs every second for
	// every schedule of every namespace; parsing them all each time, and
	// logging a bad one each time, would cost more than firing them.
	mu    sync.Mutex
	cache map[defKey]*schedule
}

// defKey names a definition.
type defKey struct{ ns, name string }

// schedule is what RunOnce keeps of one stored definition.
type schedule struct {
	value  []byte       // the definition as stored
	def    api.Periodic // decoded; zero when value is unreadable
	parsed bool         // def.Cron was parsed: sched, or err
	sched  cron.Schedule
	err    error
}

// NewPeriodic returns the periodic firer.
func NewPeriodic(st Store, sender Sender, obs Observer, log *slog.Logger) *Periodic {
	if obs == nil {
		obs = nopObserver{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Periodic{store: st, sender: sender, obs: obs, log: log, parse: ParseCron, cache: map[defKey]*schedule{}}
}

// schedule returns def's schedule, decoding and parsing it only when the
// stored definition changed since the last tick, and the cron text only
// when that changed. An unreadable definition or a bad schedule is logged
// once per change, then skipped quietly on every tick until it changes.
func (p *Periodic) schedule(def store.ConfigItem) *schedule {
	k := defKey{def.Namespace, def.Name}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cache[k]
	if old != nil && bytes.Equal(old.value, def.Value) {
		return old
	}
	sc := &schedule{value: bytes.Clone(def.Value)}
	p.cache[k] = sc
	if err := json.Unmarshal(def.Value, &sc.def); err != nil {
		p.log.Warn("periodic job unreadable; skipped until it changes", "namespace", def.Namespace, "name", def.Name, "err", err)
		return sc
	}
	if old != nil && old.parsed && old.def.Cron == sc.def.Cron {
		sc.parsed, sc.sched, sc.err = true, old.sched, old.err
		return sc
	}
	sc.parsed = true
	if sc.sched, sc.err = p.parse(sc.def.Cron); sc.err != nil {
		p.log.Warn("periodic job has a bad schedule; skipped until it changes", "namespace", def.Namespace, "name", def.Name, "err", sc.err)
	}
	return sc
}

// forget drops the schedules of definitions no longer stored.
func (p *Periodic) forget(stored map[defKey]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.cache {
		if !stored[k] {
			delete(p.cache, k)
		}
	}
}

// Fire is one fire RunOnce made.
type Fire struct {
	Namespace, Name string
	Tick            time.Time
	Outcome         string // enqueued, deduplicated, shed, refused
	Err             *api.Error
}

// RunOnce fires every schedule due at now, at most once per schedule: the
// latest tick not after now. Ticks missed while no node ran give one
// catch-up fire. The fire is claimed in the store (compare-and-set on the
// schedule's state) before it is enqueued, so a tick fires at most once
// across restarts and racing nodes; the job id is derived from the tick, so
// a duplicate enqueue would also be deduplicated.
func (p *Periodic) RunOnce(ctx context.Context, now time.Time) ([]Fire, error) {
	defs, err := p.store.ConfigList(ctx, "", store.KindPeriodic)
	if err != nil {
		return nil, fmt.Errorf("list periodic jobs: %w", err)
	}
	type pending struct {
		fire Fire
		ch   chan answer
	}
	var fires []pending
	stored := make(map[defKey]bool, len(defs))
	for _, def := range defs {
		stored[defKey{def.Namespace, def.Name}] = true
	}
	p.forget(stored)
	for _, def := range defs {
		sc := p.schedule(def)
		if sc.sched == nil {
			continue
		}
		pj := sc.def
		tick, ok, err := p.claim(ctx, def, sc.sched, now)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		ch := make(chan answer, 1)
		p.sender.Send(def.Namespace, &actors.Message{
			Op: actors.OpEnqueue,
			Body: &api.EnqueueRequest{Jobs: []api.Job{{
				ID: fireID(pj.Name, tick), Queue: pj.Queue, Task: pj.Task, Payload: pj.Payload,
			}}},
			Reply: func(b any, e *api.Error) { ch <- answer{b, e} },
		})
		fires = append(fires, pending{Fire{Namespace: def.Namespace, Name: pj.Name, Tick: tick}, ch})
	}
	out := make([]Fire, 0, len(fires))
	for _, f := range fires {
		var a answer
		select {
		case a = <-f.ch:
		case <-ctx.Done():
			return out, ctx.Err()
		}
		fire := f.fire
		if a.err != nil {
			fire.Outcome, fire.Err = "refused", a.err
			p.log.Warn("periodic fire refused", "namespace", fire.Namespace, "name", fire.Name, "tick", fire.Tick, "err", a.err.Message)
		} else if r, ok := a.body.(api.EnqueueReply); ok && len(r.Results) == 1 {
			fire.Outcome = string(r.Results[0].Outcome)
		}
		p.obs.Fired(fire.Namespace, fire.Outcome)
		out = append(out, fire)
	}
	return out, nil
}

// claim decides whether def is due at now and, if so, records the tick as
// fired; ok is false when it is not due or another node got there first.
func (p *Periodic) claim(ctx context.Context, def store.ConfigItem, sched cron.Schedule, now time.Time) (time.Time, bool, error) {
	var (
		st  periodicState
		rev int64
	)
	cur, err := p.store.ConfigGet(ctx, def.Namespace, store.KindPeriodicState, def.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return time.Time{}, false, fmt.Errorf("read periodic state: %w", err)
	default:
		rev = cur.Revision
		if json.Unmarshal(cur.Value, &st) != nil {
			st = periodicState{}
		}
	}
	if st.Seq != def.Seq || st.Last.IsZero() {
		// A new definition (or one re-created under the same name) starts
		// counting from its creation.
		st = periodicState{Seq: def.Seq, Last: def.UpdatedAt}
	}
	next := sched.Next(st.Last)
	if next.IsZero() || next.After(now) {
		return time.Time{}, false, nil
	}
	// One catch-up fire for every tick missed: the latest not after now.
	tick := next
	for i := 0; i < 1_000_000; i++ {
		n := sched.Next(tick)
		if n.IsZero() || n.After(now) {
			break
		}
		tick = n
	}
	value, _ := json.Marshal(periodicState{Seq: def.Seq, Last: tick})
	_, err = p.store.ConfigPut(ctx, store.ConfigPutParams{
		Item:       store.ConfigItem{Namespace: def.Namespace, Kind: store.KindPeriodicState, Name: def.Name, Value: value},
		Now:        now,
		IfRevision: &rev,
	})
	if errors.Is(err, store.ErrConflict) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("record periodic fire: %w", err)
	}
	return tick, true, nil
}

// fireID is the job id of a schedule's fire for tick: the same on every
// node, and at most 128 bytes.
func fireID(name string, tick time.Time) string {
	id := fmt.Sprintf("periodic:%s:%d", name, tick.Unix())
	if len(id) <= api.MaxIDBytes {
		return id
	}
	h := sha256.Sum256([]byte(name))
	return fmt.Sprintf("periodic:%s:%d", hex.EncodeToString(h[:16]), tick.Unix())
}

type answer struct {
	body any
	err  *api.Error
}
