package alarm

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The hysteresis: raised at 80 %, held down to 70 %, cleared below it,
// and not raised again until 80 %.
func TestNextHysteresis(t *testing.T) {
	raised := false
	for _, step := range []struct {
		percent float64
		want    bool
	}{
		{0, false}, {79.9, false}, {80, true}, {95, true}, {75, true}, {70, true},
		{69.9, false}, {75, false}, {79.9, false}, {80, true}, {100, true}, {150, true}, {0, false},
	} {
		raised = Next(raised, step.percent)
		if raised != step.want {
			t.Fatalf("at %v %%: raised %v, want %v", step.percent, raised, step.want)
		}
	}
}

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		usage float64
		max   int64
		want  float64
	}{{0, 10, 0}, {8, 10, 80}, {15, 10, 150}, {0, 0, 0}, {1, 0, 100}} {
		if got := Percent(c.usage, c.max); got != c.want {
			t.Errorf("Percent(%v, %v) = %v, want %v", c.usage, c.max, got, c.want)
		}
	}
}

type fixedRates map[string]float64

func (f fixedRates) Admitted(ns string, unit time.Duration) (float64, bool) {
	v, ok := f[ns]
	return v, ok
}

func TestReadings(t *testing.T) {
	doc, err := quota.Decode([]byte(`{"max_pending":10,"enqueue_rate":"200/s","max_running":0,"max_dead_rows":100}`))
	if err != nil {
		t.Fatal(err)
	}
	rs := Readings("acme", doc, store.Counts{Pending: 9, Running: 0, Dead: 50}, fixedRates{"acme": 50})
	want := []Reading{
		{Limit: "max_pending", Usage: 9, Max: 10, Percent: 90},
		{Limit: "enqueue_rate", Usage: 50, Max: 200, Percent: 25, Rate: "200/s"},
		{Limit: "max_running", Usage: 0, Max: 0, Percent: 0},
		{Limit: "max_dead_rows", Usage: 50, Max: 100, Percent: 50},
	}
	if len(rs) != len(want) {
		t.Fatalf("readings %+v", rs)
	}
	for i := range want {
		if rs[i] != want[i] {
			t.Errorf("reading %d = %+v, want %+v", i, rs[i], want[i])
		}
	}
	if c, _ := Closest(rs); c.Limit != "max_pending" {
		t.Errorf("closest %+v", c)
	}
	if NeedsCounts(quota.Document{EnqueueRate: doc.EnqueueRate}) {
		t.Error("a rate alone needs no count")
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for _, ns := range []string{"default", "acme", "a:b", "café", "x:1:y"} {
		got, ok := namespaceFromKey(Key(ns))
		if !ok || got != ns {
			t.Errorf("namespaceFromKey(Key(%q)) = %q, %v", ns, got, ok)
		}
	}
	for _, k := range []string{"flexiq:alarm:", "flexiq:alarm:3:ab", "flexiq:alarm:x:ab", "quota:ns:4:acme"} {
		if _, ok := namespaceFromKey(k); ok {
			t.Errorf("namespaceFromKey(%q) accepted", k)
		}
	}
}

// A namespace's alarms on a real store: raised once (however long it
// stays high), kept through the band between 70 and 80 %, cleared below,
// cleared when the limit is unset or the document cleared, forgotten an
// hour after clearing; only the owner evaluates; every change is one
// write and a pass that changes nothing writes nothing.
func TestEvaluator(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cs := &countingStore{Store: st, counts: map[string]store.Counts{}}
	var seen []Alarm
	owned := map[string]bool{"acme": true, "other": true}
	e := New(Config{Store: cs, Owns: func(ns string) bool { return owned[ns] }, Observer: observerFunc(func(all []Alarm) { seen = all }), MaxPerPass: 1})
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	setQuota := func(ns, doc string) {
		var v []byte
		if doc != "" {
			v = []byte(doc)
		}
		if _, err := st.SettingPut(ctx, store.SettingPutParams{Key: quota.Key(ns), Value: v, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	pass := func(pending int64) []Change {
		t.Helper()
		cs.counts["acme"] = store.Counts{Pending: pending}
		now = now.Add(10 * time.Second)
		// MaxPerPass 1 and two documents: two passes see both.
		c1, err := e.RunOnce(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := e.RunOnce(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		return append(c1, c2...)
	}
	list := func() []Alarm {
		t.Helper()
		as, err := List(ctx, st, "acme")
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	setQuota("acme", `{"max_pending":100}`)
	setQuota("zzz", `{"max_pending":1}`) // not owned here: never evaluated
	cs.counts["zzz"] = store.Counts{Pending: 5}

	if c := pass(79); len(c) != 0 || len(list()) != 0 {
		t.Fatalf("at 79 %%: %+v %+v", c, list())
	}
	c := pass(80)
	if len(c) != 1 || !c[0].Raised || c[0].Limit != "max_pending" || c[0].Reading.Percent != 80 {
		t.Fatalf("at 80 %%: %+v", c)
	}
	raisedAt := now
	writes := cs.writes
	for _, p := range []int64{95, 100, 120, 75, 70} {
		if c := pass(p); len(c) != 0 {
			t.Fatalf("at %d %%, already raised: %+v", p, c)
		}
	}
	if cs.writes != writes {
		t.Fatalf("passes that changed nothing wrote %d times", cs.writes-writes)
	}
	as := list()
	if len(as) != 1 || as[0].State != StateRaised || !as[0].RaisedAt.Equal(raisedAt) || as[0].Usage != 80 || as[0].Max != 100 {
		t.Fatalf("raised alarm: %+v", as)
	}
	if len(seen) != 1 || seen[0].State != StateRaised {
		t.Fatalf("observer saw %+v", seen)
	}
	if all, _ := List(ctx, st, ""); len(all) != 1 {
		t.Fatalf("zzz (owned elsewhere) was evaluated: %+v", all)
	}
	c = pass(69)
	if len(c) != 1 || c[0].Raised {
		t.Fatalf("at 69 %%: %+v", c)
	}
	if as := list(); len(as) != 1 || as[0].State != StateCleared || as[0].ClearedAt == nil || as[0].Percent != 69 {
		t.Fatalf("cleared alarm: %+v", as)
	}
	if c := pass(79); len(c) != 0 {
		t.Fatalf("at 79 %% after clearing: %+v", c)
	}
	if c := pass(85); len(c) != 1 || !c[0].Raised {
		t.Fatalf("raised again at 85 %%: %+v", c)
	}

	// Unset the limit: nothing counts against it.
	setQuota("acme", `{"max_running":5}`)
	if c := pass(85); len(c) != 1 || c[0].Raised || c[0].Limit != "max_pending" {
		t.Fatalf("limit unset: %+v", c)
	}
	// Raise again, then clear the whole document.
	setQuota("acme", `{"max_pending":100}`)
	pass(90)
	setQuota("acme", "")
	if c := pass(90); len(c) != 1 || c[0].Raised {
		t.Fatalf("document cleared: %+v", c)
	}
	// An hour after clearing, the entry is forgotten and the key deleted.
	now = now.Add(KeepCleared)
	pass(0)
	if as := list(); len(as) != 0 {
		t.Fatalf("an hour after clearing: %+v", as)
	}
	if len(seen) != 0 {
		t.Fatalf("observer still sees %+v", seen)
	}
}

// An alarm document that a previous owner wrote in between is not
// overwritten blindly: the write is conditional, re-read and re-applied.
func TestEvaluatorConflict(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	if _, err := st.SettingPut(ctx, store.SettingPutParams{Key: quota.Key("acme"), Value: []byte(`{"max_pending":10}`), Now: now}); err != nil {
		t.Fatal(err)
	}
	// A deleted alarm document: its revision is no longer 0.
	if _, err := st.SettingPut(ctx, store.SettingPutParams{Key: Key("acme"), Value: []byte(`{"namespace":"acme","limits":{}}`), Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SettingPut(ctx, store.SettingPutParams{Key: Key("acme"), Now: now}); err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: st, counts: map[string]store.Counts{"acme": {Pending: 9}}}
	c, err := New(Config{Store: cs}).RunOnce(ctx, now)
	if err != nil || len(c) != 1 || !c[0].Raised {
		t.Fatalf("over a deleted document: %+v %v", c, err)
	}
}

type observerFunc func([]Alarm)

func (f observerFunc) QuotaAlarms(all []Alarm) { f(all) }

// countingStore counts writes and gives the job counts the test sets.
type countingStore struct {
	store.Store
	counts map[string]store.Counts
	writes int
	reads  int // JobCount calls
}

func (c *countingStore) JobCount(_ context.Context, ns string) (store.Counts, error) {
	c.reads++
	n, ok := c.counts[ns]
	if !ok {
		return store.Counts{}, errors.New("no counts for " + ns)
	}
	return n, nil
}

func (c *countingStore) SettingPut(ctx context.Context, p store.SettingPutParams) (store.Setting, error) {
	c.writes++
	return c.Store.SettingPut(ctx, p)
}

// liveCounts is a Live over a map, as admin.History is over the actors'
// reports.
type liveCounts map[string][2]int64

func (l liveCounts) Live(ns string) (int64, int64, bool) {
	c, ok := l[ns]
	return c[0], c[1], ok
}

func (l liveCounts) Record(ns string, pending, running int64, _ time.Time) {
	l[ns] = [2]int64{pending, running}
}

// With the owner's live counts, a namespace that limits only pending and
// running jobs is evaluated without counting its backlog in the store:
// the store is counted once, for a namespace no actor has reported yet,
// and that count is kept; a limit on finished rows is still counted there.
func TestEvaluatorCountsTheStoreOnlyWhenItMust(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	if _, err := st.SettingPut(ctx, store.SettingPutParams{Key: quota.Key("acme"), Value: []byte(`{"max_pending":10}`), Now: now}); err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: st, counts: map[string]store.Counts{"acme": {Pending: 9}}}
	live := liveCounts{}
	e := New(Config{Store: cs, Live: live})
	pass := func() []Change {
		t.Helper()
		now = now.Add(10 * time.Second)
		c, err := e.RunOnce(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := pass(); len(c) != 1 || !c[0].Raised || cs.reads != 1 {
		t.Fatalf("first pass: %+v after %d store counts, want acme raised from one count", c, cs.reads)
	}
	// The actor reports 6 pending (60 %): cleared, from the report alone.
	live["acme"] = [2]int64{6, 0}
	if c := pass(); len(c) != 1 || c[0].Raised || cs.reads != 1 {
		t.Fatalf("second pass: %+v after %d store counts, want acme cleared with no count", c, cs.reads)
	}
	if _, err := st.SettingPut(ctx, store.SettingPutParams{Key: quota.Key("acme"), Value: []byte(`{"max_pending":10,"max_dead_rows":5}`), Now: now}); err != nil {
		t.Fatal(err)
	}
	pass()
	if cs.reads != 2 {
		t.Fatalf("%d store counts with max_dead_rows set, want one more", cs.reads)
	}
}
