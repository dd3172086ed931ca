package maintenance

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/internal/testlog"
	"github.com/flexiq/flexiq/store"
)

// memStore holds configuration items in memory: what Periodic reads and
// writes.
type memStore struct {
	mu    sync.Mutex
	items map[[3]string]store.ConfigItem
	seq   int64
}

func newMemStore() *memStore { return &memStore{items: map[[3]string]store.ConfigItem{}} }

func (m *memStore) ConfigList(_ context.Context, ns, kind string) ([]store.ConfigItem, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.ConfigItem
	for k, it := range m.items {
		if k[1] == kind && (ns == "" || k[0] == ns) {
			out = append(out, it)
		}
	}
	// Creation order, as the store lists them.
	slices.SortFunc(out, func(a, b store.ConfigItem) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

func (m *memStore) ConfigGet(_ context.Context, ns, kind, name string) (store.ConfigItem, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it, ok := m.items[[3]string{ns, kind, name}]
	if !ok {
		return it, store.ErrNotFound
	}
	return it, nil
}

func (m *memStore) ConfigPut(_ context.Context, p store.ConfigPutParams) (store.ConfigItem, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [3]string{p.Item.Namespace, p.Item.Kind, p.Item.Name}
	cur, ok := m.items[k]
	if p.IfRevision != nil && *p.IfRevision != cur.Revision {
		return cur, store.ErrConflict
	}
	it := p.Item
	it.UpdatedAt, it.Revision = p.Now, cur.Revision+1
	if ok {
		it.Seq = cur.Seq
	} else {
		m.seq++
		it.Seq = m.seq
	}
	m.items[k] = it
	return it, nil
}

func (m *memStore) JobListDeadRetryable(context.Context, store.JobListDeadRetryableParams) ([]store.Job, error) {
	return nil, nil
}

// define stores a periodic definition as the admin door does.
func (m *memStore) define(t *testing.T, ns string, pj api.Periodic, at time.Time) {
	t.Helper()
	v, err := json.Marshal(pj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ConfigPut(context.Background(), store.ConfigPutParams{
		Item: store.ConfigItem{Namespace: ns, Kind: store.KindPeriodic, Name: pj.Name, Value: v}, Now: at,
	}); err != nil {
		t.Fatal(err)
	}
}

// enqueued answers every enqueue at once, as an actor admitting it would.
type enqueued struct{}

func (enqueued) Send(_ string, m *actors.Message) {
	req := m.Body.(*api.EnqueueRequest)
	m.Reply(api.EnqueueReply{Results: []api.EnqueueResult{{ID: req.Jobs[0].ID, Outcome: api.OutcomeEnqueued}}}, nil)
}

// A schedule is parsed once per change of its text, not on every tick,
// and a bad or over-long one is logged once per change and skipped, while
// the good ones keep firing.
func TestPeriodicParsesEachScheduleOncePerChange(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := newMemStore()
	st.define(t, "acme", api.Periodic{Name: "good", Cron: "@every 1s", Queue: "q", Task: "t"}, t0)
	st.define(t, "acme", api.Periodic{Name: "bad", Cron: "not a schedule", Queue: "q", Task: "t"}, t0)
	st.define(t, "beta", api.Periodic{Name: "long", Cron: "@every 1s" + strings.Repeat(" ", api.MaxCronBytes), Queue: "q", Task: "t"}, t0)

	var logs testlog.Buffer
	p := NewPeriodic(st, enqueued{}, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	parsed := map[string]int{}
	p.parse = func(spec string) (cron.Schedule, error) {
		parsed[spec]++
		return ParseCron(spec)
	}
	tick := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			fires, err := p.RunOnce(t.Context(), t0.Add(time.Duration(i)*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if len(fires) != 1 || fires[0].Name != "good" || fires[0].Outcome != "enqueued" {
				t.Fatalf("tick %d fired %+v, want good once", i, fires)
			}
		}
	}
	const ticks = 50
	tick(1, ticks)
	want := map[string]int{"@every 1s": 1, "not a schedule": 1, "@every 1s" + strings.Repeat(" ", api.MaxCronBytes): 1}
	if fmt.Sprint(parsed) != fmt.Sprint(want) {
		t.Errorf("over %d ticks parsed %v, want each schedule once", ticks, parsed)
	}
	if n := strings.Count(logs.String(), "bad schedule"); n != 2 {
		t.Errorf("%d bad-schedule warnings over %d ticks, want 2 (bad and long, once each):\n%s", n, ticks, logs.String())
	}
	if n := strings.Count(logs.String(), fmt.Sprintf("must be at most %d bytes", api.MaxCronBytes)); n != 1 {
		t.Errorf("the over-long schedule was reported %d times, want once naming the limit", n)
	}

	// A new payload under the same schedule is not a new schedule; a new
	// schedule text is parsed once, and a bad one fixed stops warning.
	st.define(t, "acme", api.Periodic{Name: "good", Cron: "@every 1s", Queue: "q", Task: "t", Payload: json.RawMessage(`{"v":2}`)}, t0)
	st.define(t, "acme", api.Periodic{Name: "bad", Cron: "@every 1h", Queue: "q", Task: "t"}, t0)
	tick(ticks+1, ticks)
	want["@every 1h"] = 1
	if fmt.Sprint(parsed) != fmt.Sprint(want) {
		t.Errorf("after the changes parsed %v, want %v", parsed, want)
	}
	if n := strings.Count(logs.String(), "bad schedule"); n != 2 {
		t.Errorf("%d bad-schedule warnings after fixing one, want still 2", n)
	}
}
