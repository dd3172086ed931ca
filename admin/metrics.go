package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/flexiq/flexiq/api"
)

// Metrics are a node's Prometheus metrics. They implement actors.Observer.
type Metrics struct {
	Registry *prometheus.Registry

	outcomes    *prometheus.CounterVec
	refusals    *prometheus.CounterVec
	shed        *prometheus.CounterVec
	claimed     *prometheus.CounterVec
	pending     *prometheus.GaugeVec
	running     *prometheus.GaugeVec
	propagation prometheus.Histogram
	// PeriodicFires counts periodic fires by outcome (admitted, refused, shed).
	PeriodicFires *prometheus.CounterVec
	// RetentionDeleted counts rows deleted by retention, by kind and cause.
	RetentionDeleted *prometheus.CounterVec
	// RetentionSkipped counts namespaces the sweep skipped (unreadable quota).
	RetentionSkipped *prometheus.CounterVec
}

// NewMetrics registers the node's metrics on a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_enqueue_outcomes_total", Help: "Jobs by enqueue outcome (enqueued, deduplicated, coalesced, shed).",
		}, []string{"namespace", "outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_enqueue_refusals_total", Help: "Enqueue calls over quota or stopped, by reason (rejected or shed).",
		}, []string{"namespace", "reason"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_jobs_shed_total", Help: "Jobs written as dead letters by drop mode.",
		}, []string{"namespace"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_jobs_claimed_total", Help: "Jobs handed to workers.",
		}, []string{"namespace"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flexiq_pending_jobs", Help: "Pending jobs (delayed included) of namespaces active on this node.",
		}, []string{"namespace"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flexiq_running_jobs", Help: "Running jobs of namespaces active on this node.",
		}, []string{"namespace"}),
		propagation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flexiq_quota_propagation_seconds",
			Help:    "Delay from a quota write's broadcast to its arrival at this node.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		PeriodicFires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_periodic_fires_total", Help: "Periodic fires by outcome.",
		}, []string{"namespace", "outcome"}),
		RetentionDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_retention_deleted_total", Help: "Rows deleted by retention, by status and cause (ttl, ceiling).",
		}, []string{"status", "cause"}),
		RetentionSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_retention_skipped_total", Help: "Namespaces the retention sweep skipped because their quota is unreadable.",
		}, []string{"namespace"}),
	}
	m.Registry.MustRegister(m.outcomes, m.refusals, m.shed, m.claimed, m.pending, m.running, m.propagation,
		m.PeriodicFires, m.RetentionDeleted, m.RetentionSkipped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Outcomes counts jobs by outcome.
func (m *Metrics) Outcomes(ns string, outcome api.Outcome, n int) {
	m.outcomes.WithLabelValues(ns, string(outcome)).Add(float64(n))
	if outcome == api.OutcomeShed {
		m.shed.WithLabelValues(ns).Add(float64(n))
	}
}

// Refused counts a refused or shed call.
func (m *Metrics) Refused(ns string, reason api.Reason) {
	m.refusals.WithLabelValues(ns, string(reason)).Inc()
}

// Gauges sets a namespace's counts.
func (m *Metrics) Gauges(ns string, pending, running int64) {
	m.pending.WithLabelValues(ns).Set(float64(pending))
	m.running.WithLabelValues(ns).Set(float64(running))
}

// Claimed counts jobs handed out.
func (m *Metrics) Claimed(ns string, n int) {
	if n > 0 {
		m.claimed.WithLabelValues(ns).Add(float64(n))
	}
}

// Propagation records a quota change's propagation delay.
func (m *Metrics) Propagation(d time.Duration) { m.propagation.Observe(d.Seconds()) }

// Deleted counts rows retention deleted.
func (m *Metrics) Deleted(status api.Status, cause string, n int64) {
	m.RetentionDeleted.WithLabelValues(string(status), cause).Add(float64(n))
}

// Skipped counts a namespace retention skipped.
func (m *Metrics) Skipped(ns string) { m.RetentionSkipped.WithLabelValues(ns).Inc() }

// Fired counts a periodic fire by outcome (enqueued, deduplicated, shed,
// refused).
func (m *Metrics) Fired(ns, outcome string) { m.PeriodicFires.WithLabelValues(ns, outcome).Inc() }
