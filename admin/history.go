package admin

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flexiq/flexiq/alarm"
	"github.com/flexiq/flexiq/api"
)

// The bounds of the usage history (docs/dashboard.md): it is memory the
// node keeps whoever asks, so it is fixed, not grown by the traffic.
const (
	// DefaultSampleInterval is how often a sample is taken.
	DefaultSampleInterval = 10 * time.Second
	// HistorySamples is how many samples a namespace keeps: an hour at the
	// default interval (a shorter interval keeps less than an hour).
	HistorySamples = 360
	// HistoryNamespaces is how many namespaces are kept at most; past it
	// the one whose actor reported last the longest ago is dropped.
	HistoryNamespaces = 256
)

// History is a node's recent usage per namespace: pending and running
// counts as the namespace's actor reports them (so only for namespaces
// whose actor runs on this node, their owner in a cluster), and the jobs
// enqueued, the calls refused, the jobs shed, the jobs completed, the
// jobs failed for good and the share of the time its actor was busy in
// each interval (from the same counters as flexiq_enqueue_outcomes_total,
// flexiq_enqueue_refusals_total, flexiq_jobs_shed_total,
// flexiq_job_attempts_total and flexiq_actor_busy_seconds_total).
type History struct {
	m        *Metrics
	interval time.Duration
	samples  int
	max      int

	mu     sync.Mutex
	series map[string]*series
	// dropped remembers namespaces evicted (bounded like series): one that
	// comes back starts from the counters' present values, not from zero,
	// so its first sample is not everything since the node started.
	dropped map[string]bool
	order   []string // dropped, oldest first
}

// series is one namespace's ring of samples.
type series struct {
	ring             []sample
	next             int // where the next sample goes once the ring is full
	pending, running int64
	seen             time.Time // the actor's last report
	base             totals    // the counters at the last sample
	based            bool      // base was read (else it is zero)
}

// sample is one interval. Deltas fit in 32 bits: 4 billion jobs in one
// interval is far beyond any node.
type sample struct {
	at                                    int64 // unix milliseconds
	pending, running                      int64
	admitted, enqueued, refused, jobsShed uint32
	completed, failed                     uint32
	busy                                  uint8 // percent of the interval
}

// totals are a namespace's counters since the node started.
type totals struct {
	admitted, enqueued, refused, shed float64
	completed, failed                 float64
	busy                              float64 // seconds
}

// NewHistory starts keeping history from m's reports, one sample per
// interval (DefaultSampleInterval when not positive). Call Sample every
// interval.
func NewHistory(m *Metrics, interval time.Duration) *History {
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	n := int(time.Hour / interval)
	if n > HistorySamples {
		n = HistorySamples
	}
	if n < 2 {
		n = 2
	}
	h := &History{m: m, interval: interval, samples: n, max: HistoryNamespaces,
		series: map[string]*series{}, dropped: map[string]bool{}}
	m.history = h
	return h
}

// Interval is the time between samples.
func (h *History) Interval() time.Duration { return h.interval }

// observe records a namespace's counts (Metrics.Gauges: once per step of
// its actor).
func (h *History) observe(ns string, pending, running int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.observeLocked(ns, pending, running, now)
}

func (h *History) observeLocked(ns string, pending, running int64, now time.Time) {
	s := h.series[ns]
	if s == nil {
		if len(h.series) >= h.max {
			h.evictLocked()
		}
		s = &series{}
		if h.dropped[ns] {
			s.based = false // read at the next sample, which then records nothing
		} else {
			s.based = true // a namespace new to this node: its counters started at zero
		}
		h.series[ns] = s
	}
	s.pending, s.running, s.seen = pending, running, now
}

func (h *History) evictLocked() {
	var oldest string
	var at time.Time
	for ns, s := range h.series {
		if oldest == "" || s.seen.Before(at) {
			oldest, at = ns, s.seen
		}
	}
	h.dropLocked(oldest)
}

// dropLocked removes ns's series and remembers it was dropped.
func (h *History) dropLocked(ns string) {
	delete(h.series, ns)
	if !h.dropped[ns] {
		h.dropped[ns] = true
		h.order = append(h.order, ns)
		if len(h.order) > h.max {
			delete(h.dropped, h.order[0])
			h.order = h.order[1:]
		}
	}
}

// Sample closes the interval at now: every namespace kept gets a sample.
func (h *History) Sample(now time.Time) {
	h.mu.Lock()
	names := make(map[string]bool, len(h.series))
	for ns := range h.series {
		names[ns] = true
	}
	h.mu.Unlock()
	tot := h.m.totals(names)

	h.mu.Lock()
	defer h.mu.Unlock()
	at := now.UnixMilli()
	for ns, s := range h.series {
		t := tot[ns]
		if !s.based {
			s.base, s.based = t, true
			continue
		}
		d := sample{at: at, pending: s.pending, running: s.running,
			admitted: delta(t.admitted, s.base.admitted), enqueued: delta(t.enqueued, s.base.enqueued),
			refused: delta(t.refused, s.base.refused), jobsShed: delta(t.shed, s.base.shed),
			completed: delta(t.completed, s.base.completed), failed: delta(t.failed, s.base.failed),
			busy: percentOf(t.busy-s.base.busy, h.interval)}
		s.base = t
		if len(s.ring) < h.samples {
			s.ring = append(s.ring, d)
		} else {
			s.ring[s.next] = d
			s.next = (s.next + 1) % h.samples
		}
	}
}

func delta(now, before float64) uint32 {
	d := now - before
	if d <= 0 {
		return 0
	}
	if d > float64(^uint32(0)) {
		return ^uint32(0)
	}
	return uint32(d)
}

// percentOf is busy seconds as a percent of interval, at most 100.
func percentOf(busy float64, interval time.Duration) uint8 {
	p := math.Round(100 * busy / interval.Seconds())
	switch {
	case p <= 0:
		return 0
	case p >= 100:
		return 100
	}
	return uint8(p)
}

// ordered returns s's samples, oldest first.
func (s *series) ordered() []sample {
	out := make([]sample, 0, len(s.ring))
	out = append(out, s.ring[s.next:]...)
	return append(out, s.ring[:s.next]...)
}

// Admitted is the jobs namespace ns had admitted per unit over the last
// unit, or over the last interval when that is longer (alarm.Rates). Less
// history than the window reads as what it holds, not scaled up: a
// namespace seen for ten minutes that spent 90 % of an hourly rate has
// spent it. ok is false for a namespace this node keeps no history of.
func (h *History) Admitted(ns string, unit time.Duration) (float64, bool) {
	if unit <= 0 {
		return 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.series[ns]
	if s == nil {
		return 0, false
	}
	window := unit
	if window < h.interval {
		window = h.interval
	}
	n := int((window + h.interval - 1) / h.interval)
	samples := s.ordered()
	if n > len(samples) {
		n = len(samples)
	}
	var sum float64
	for _, x := range samples[len(samples)-n:] {
		sum += float64(x.admitted)
	}
	return sum * float64(unit) / float64(window), true
}

// HistoryReply is GET /v1/usage/history's body: one column per series,
// oldest first, so a chart reads it as it is.
type HistoryReply struct {
	Namespace  string `json:"namespace"`
	Node       string `json:"node"`
	Owner      string `json:"owner"`
	IntervalMS int64  `json:"interval_ms"`
	// At is each sample's end, in unix milliseconds.
	At       []int64 `json:"at"`
	Pending  []int64 `json:"pending"`
	Running  []int64 `json:"running"`
	Enqueued []int64 `json:"enqueued"`
	Refused  []int64 `json:"refused"`
	Shed     []int64 `json:"shed"`
	// Completed are the jobs acked, Failed those that failed for good
	// (dead, shed ones aside), per interval.
	Completed []int64 `json:"completed"`
	Failed    []int64 `json:"failed"`
	// Busy is the percent of each interval the namespace's actor spent in
	// its steps (deciding and writing to the store): near 100 its calls
	// wait for its one writer.
	Busy []int64 `json:"busy"`
	// EnqueueRate is the namespace's enqueue_rate beside the jobs it had
	// admitted per unit lately; null when no rate is set.
	EnqueueRate *alarm.Reading `json:"enqueue_rate"`
}

// Get returns ns's samples, oldest first; none for a namespace this node
// keeps no history of.
func (h *History) Get(ns string) HistoryReply {
	out := HistoryReply{Namespace: ns, IntervalMS: h.interval.Milliseconds(),
		At: []int64{}, Pending: []int64{}, Running: []int64{}, Enqueued: []int64{}, Refused: []int64{}, Shed: []int64{},
		Completed: []int64{}, Failed: []int64{}, Busy: []int64{}}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.series[ns]
	if s == nil {
		return out
	}
	for _, x := range s.ordered() {
		out.At = append(out.At, x.at)
		out.Pending = append(out.Pending, x.pending)
		out.Running = append(out.Running, x.running)
		out.Enqueued = append(out.Enqueued, int64(x.enqueued))
		out.Refused = append(out.Refused, int64(x.refused))
		out.Shed = append(out.Shed, int64(x.jobsShed))
		out.Completed = append(out.Completed, int64(x.completed))
		out.Failed = append(out.Failed, int64(x.failed))
		out.Busy = append(out.Busy, int64(x.busy))
	}
	return out
}

// Live is namespace ns's pending and running jobs as its actor last
// reported them on this node (alarm.Live); ok is false when this node
// keeps no report of ns. Only the owner's actor changes those counts and
// it reports them after every step, so a report stays true while the
// namespace idles; Forget drops the reports of namespaces this node no
// longer owns.
func (h *History) Live(ns string) (pending, running int64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.series[ns]
	if s == nil {
		return 0, 0, false
	}
	return s.pending, s.running, true
}

// Record takes counts read from the store as namespace ns's report, for a
// namespace whose actor has not reported on this node yet. Once it has,
// its reports win: counts read from the store before one of its steps
// committed would otherwise overwrite what it reported after, and stay
// until its next step (an alarm that never rose: a CI run saw it).
func (h *History) Record(ns string, pending, running int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.series[ns] != nil {
		return
	}
	h.observeLocked(ns, pending, running, now)
}

// Forget drops the namespaces match selects (their partitions moved to
// another node): their counts and charts live there now. One that comes
// back starts afresh, as after an eviction.
func (h *History) Forget(match func(ns string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ns := range h.series {
		if match(ns) {
			h.dropLocked(ns)
		}
	}
}

// Len is how many namespaces the history keeps.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.series)
}

// totals reads the counters of the namespaces in names. It reads them
// once per sample rather than counting in Outcomes and Refused, which the
// actors call once per job: the sample pays, not the enqueue.
func (m *Metrics) totals(names map[string]bool) map[string]totals {
	out := make(map[string]totals, len(names))
	// add collects c's series of the namespaces in names into out: to
	// each its totals and the series' labels and value.
	add := func(c prometheus.Collector, to func(t *totals, labels map[string]string, v float64)) {
		collect(c, func(labels map[string]string, v float64) {
			ns := labels["namespace"]
			if !names[ns] {
				return
			}
			t := out[ns]
			to(&t, labels, v)
			out[ns] = t
		})
	}
	add(m.outcomes, func(t *totals, labels map[string]string, v float64) {
		switch api.Outcome(labels["outcome"]) {
		case api.OutcomeShed:
			t.shed += v
		case api.OutcomeEnqueued:
			t.enqueued += v
			t.admitted += v
		default: // deduplicated, coalesced: admitted, a token spent
			t.admitted += v
		}
	})
	add(m.attempts, func(t *totals, labels map[string]string, v float64) {
		switch labels["outcome"] {
		case attemptCompleted:
			t.completed += v
		case attemptDead:
			t.failed += v
		}
	})
	add(m.refusals, func(t *totals, _ map[string]string, v float64) { t.refused += v })
	add(m.busy, func(t *totals, _ map[string]string, v float64) { t.busy += v })
	return out
}

// collect calls fn with each series of c.
func collect(c prometheus.Collector, fn func(labels map[string]string, v float64)) {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil {
			continue
		}
		labels := make(map[string]string, len(d.GetLabel()))
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		var v float64
		switch {
		case d.GetCounter() != nil:
			v = d.GetCounter().GetValue()
		case d.GetGauge() != nil:
			v = d.GetGauge().GetValue()
		}
		fn(labels, v)
	}
}
