package admin

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
)

func TestHistorySamples(t *testing.T) {
	m := NewMetrics()
	h := NewHistory(m, 10*time.Second)
	t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)

	if got := h.Get("acme"); len(got.At) != 0 {
		t.Fatalf("a namespace never seen: %+v", got)
	}
	m.Outcomes("acme", api.OutcomeEnqueued, 3)
	m.Outcomes("acme", api.OutcomeDeduplicated, 1)
	m.Refused("acme", api.ReasonQueueFull)
	m.Refused("acme", api.ReasonRateLimited)
	m.Outcomes("acme", api.OutcomeShed, 2)
	m.Gauges("acme", 5, 1)
	m.Stepped("acme", 3, 2500*time.Millisecond)
	m.Outcomes("other", api.OutcomeEnqueued, 7) // never reported gauges: not kept
	h.Sample(t0)
	h.Sample(t0.Add(10 * time.Second))
	m.Outcomes("acme", api.OutcomeEnqueued, 4)
	m.Settled("acme", actors.Settled{Completed: 2, Retried: 1, Dead: 1, Released: 1, Expired: 1})
	m.Settled("other", actors.Settled{Completed: 5})
	m.Gauges("acme", 9, 0)
	m.Stepped("acme", 1, 4*time.Second)
	m.Stepped("acme", 2, 996*time.Millisecond)
	m.Stepped("other", 2, 9*time.Second)
	h.Sample(t0.Add(20 * time.Second))

	got := h.Get("acme")
	want := HistoryReply{Namespace: "acme", IntervalMS: 10000,
		At:      []int64{t0.UnixMilli(), t0.Add(10 * time.Second).UnixMilli(), t0.Add(20 * time.Second).UnixMilli()},
		Pending: []int64{5, 5, 9}, Running: []int64{1, 1, 0}, Enqueued: []int64{3, 0, 4}, Refused: []int64{2, 0, 0}, Shed: []int64{2, 0, 0},
		Completed: []int64{0, 0, 2}, Failed: []int64{0, 0, 1}, Busy: []int64{25, 0, 50}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history\n got %+v\nwant %+v", got, want)
	}
	if h.Len() != 1 {
		t.Fatalf("kept %d namespaces, want 1", h.Len())
	}
	// A step timed by a clock set back counts no time (and does not panic).
	m.Stepped("acme", 1, -time.Second)
	// Steps counted in one interval that began in the one before can add
	// up to more than it: the share stops at 100.
	for busy, want := range map[float64]uint8{-1: 0, 0.04: 0, 0.05: 1, 9.94: 99, 12: 100} {
		if got := percentOf(busy, 10*time.Second); got != want {
			t.Errorf("percentOf(%vs of 10s) = %d, want %d", busy, got, want)
		}
	}

	// Admitted per unit: enqueued and deduplicated count, shed does not.
	if r, ok := h.Admitted("acme", time.Second); !ok || r != 0.4 {
		t.Fatalf("per second over the last interval: %v %v, want 0.4", r, ok)
	}
	if r, _ := h.Admitted("acme", time.Minute); r != 8 {
		t.Fatalf("per minute (less history than a minute, not scaled up): %v, want 8", r)
	}
	if _, ok := h.Admitted("other", time.Second); ok {
		t.Fatal("a namespace without history has a rate")
	}
}

// The ring keeps the last HistorySamples samples, oldest first.
func TestHistoryRingBound(t *testing.T) {
	m := NewMetrics()
	h := NewHistory(m, 10*time.Second)
	t0 := time.Unix(0, 0)
	for i := 0; i < HistorySamples+40; i++ {
		m.Gauges("acme", int64(i), 0)
		h.Sample(t0.Add(time.Duration(i) * 10 * time.Second))
	}
	got := h.Get("acme")
	if len(got.At) != HistorySamples || got.Pending[0] != 40 || got.Pending[HistorySamples-1] != HistorySamples+39 {
		t.Fatalf("%d samples, first %d, last %d", len(got.At), got.Pending[0], got.Pending[len(got.Pending)-1])
	}
	for i := 1; i < len(got.At); i++ {
		if got.At[i] <= got.At[i-1] {
			t.Fatalf("samples out of order at %d", i)
		}
	}
	// A short interval keeps fewer than an hour's samples, never more.
	if n := NewHistory(NewMetrics(), time.Second).samples; n != HistorySamples {
		t.Fatalf("1 s interval keeps %d samples", n)
	}
	if n := NewHistory(NewMetrics(), time.Minute).samples; n != 60 {
		t.Fatalf("1 min interval keeps %d samples, want 60 (an hour)", n)
	}
}

// At most HistoryNamespaces namespaces are kept: the one reported least
// recently goes. One that comes back starts afresh, its first sample not
// a spike of everything since the node started.
func TestHistoryNamespaceBound(t *testing.T) {
	m := NewMetrics()
	h := NewHistory(m, 10*time.Second)
	t0 := time.Unix(1000, 0)
	m.Outcomes("first", api.OutcomeEnqueued, 1000)
	m.Gauges("first", 1, 0)
	for i := 0; i < HistoryNamespaces; i++ {
		m.Gauges(fmt.Sprintf("ns-%d", i), 1, 0)
	}
	if h.Len() != HistoryNamespaces {
		t.Fatalf("kept %d namespaces, want %d", h.Len(), HistoryNamespaces)
	}
	if got := h.Get("first"); len(got.At) != 0 {
		t.Fatal("the least recently reported namespace was kept")
	}
	// "first" comes back (evicting another).
	m.Outcomes("first", api.OutcomeEnqueued, 5)
	m.Gauges("first", 2, 0)
	h.Sample(t0)
	if got := h.Get("first"); len(got.At) != 0 {
		t.Fatalf("a returning namespace's first sample: %+v", got)
	}
	m.Outcomes("first", api.OutcomeEnqueued, 3)
	h.Sample(t0.Add(10 * time.Second))
	if got := h.Get("first"); len(got.Enqueued) != 1 || got.Enqueued[0] != 3 {
		t.Fatalf("after its return: %+v", got.Enqueued)
	}
	if h.Len() != HistoryNamespaces {
		t.Fatalf("kept %d namespaces, want %d", h.Len(), HistoryNamespaces)
	}
}

// Live is the actor's last report; Forget drops the namespaces that moved
// to another node, charts and counts alike.
func TestHistoryLiveAndForget(t *testing.T) {
	m := NewMetrics()
	h := NewHistory(m, 10*time.Second)
	if _, _, ok := h.Live("acme"); ok {
		t.Fatal("a namespace never reported is live")
	}
	m.Gauges("acme", 7, 2)
	m.Gauges("other", 1, 0)
	if p, r, ok := h.Live("acme"); !ok || p != 7 || r != 2 {
		t.Fatalf("Live(acme) = %d, %d, %v; want 7, 2, true", p, r, ok)
	}
	h.Forget(func(ns string) bool { return ns == "acme" })
	if _, _, ok := h.Live("acme"); ok {
		t.Fatal("a forgotten namespace is still live")
	}
	if _, _, ok := h.Live("other"); !ok {
		t.Fatal("Forget dropped a namespace it did not select")
	}
}

// Counts read from the store (Record) are taken only for a namespace whose
// actor has not reported: read before a step committed, they must not
// overwrite what the actor reported after it.
func TestRecordDoesNotOverwriteTheActorsReport(t *testing.T) {
	m := NewMetrics()
	h := NewHistory(m, 10*time.Second)
	now := time.Now()
	h.Record("fresh", 3, 1, now)
	if p, r, ok := h.Live("fresh"); !ok || p != 3 || r != 1 {
		t.Fatalf("a namespace not reported yet: Live = %d, %d, %v; want the store's 3, 1", p, r, ok)
	}
	m.Gauges("acme", 8, 0) // the actor, after its step
	h.Record("acme", 0, 0, now)
	if p, _, _ := h.Live("acme"); p != 8 {
		t.Fatalf("Live pending = %d after a stale store read, want the actor's 8", p)
	}
	m.Gauges("fresh", 5, 0)
	if p, _, _ := h.Live("fresh"); p != 5 {
		t.Fatalf("the actor's report after a store read: Live pending = %d, want 5", p)
	}
}

// /metrics says which build runs (go_build_info), so nodes can be told
// apart in a rolling upgrade.
func TestMetricsHaveTheBuild(t *testing.T) {
	mfs, err := NewMetrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "go_build_info" {
			return
		}
	}
	t.Fatal("no go_build_info")
}
