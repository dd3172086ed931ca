package admin

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/alarm"
	"github.com/flexiq/flexiq/api"
)

// Metrics are a node's Prometheus metrics. They implement actors.Observer.
type Metrics struct {
	Registry *prometheus.Registry

	outcomes *prometheus.CounterVec
	refusals *prometheus.CounterVec
	shed     *prometheus.CounterVec
	claimed  *prometheus.CounterVec
	wait     *prometheus.HistogramVec
	attempts *prometheus.CounterVec
	expired  *prometheus.CounterVec
	paced    *prometheus.CounterVec
	pending  *prometheus.GaugeVec
	running  *prometheus.GaugeVec
	// The namespaces' actors: steps, the messages they took, busy time.
	steps    *prometheus.CounterVec
	messages *prometheus.CounterVec
	busy     *prometheus.CounterVec
	// Propagation is what the broadcast listeners report (bus.Observer):
	// quota propagation delays, the arrivals that could not be timed and
	// the broadcasts dropped. (It keeps the name of the histogram it grew
	// from: the node hands n.Metrics.Propagation to
	// bus.SubscribeBroadcasts.)
	Propagation *BroadcastMetrics
	// PeriodicFires counts periodic fires by outcome (admitted, refused, shed).
	PeriodicFires *prometheus.CounterVec
	// RetentionDeleted counts rows deleted by retention, by kind and cause.
	RetentionDeleted *prometheus.CounterVec
	// RetentionSkipped counts namespaces the sweep skipped (unreadable quota).
	RetentionSkipped *prometheus.CounterVec

	// quotaAlarm is 1 for each alarm raised, 0 for one cleared within
	// alarm.KeepCleared (docs/alarms.md); alarmsMu guards alarmSeries, the
	// series it holds, so that those no longer listed are deleted.
	quotaAlarm  *prometheus.GaugeVec
	alarmsMu    sync.Mutex
	alarmSeries map[[2]string]bool
	// history is fed by Gauges when a History was made on m.
	history *History
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
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "flexiq_job_wait_seconds",
			Help:    "How long each job handed to a worker had been due: from its run_at (enqueue, delay or retry time) to its claim.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"namespace"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_job_attempts_total",
			Help: "Attempts by how they ended: completed (acked), retried (failed, to run again), dead (failed for good), released (given back unstarted, the attempt unspent).",
		}, []string{"namespace", "outcome"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_leases_expired_total",
			Help: "Attempts whose lease ran out before an ack or nack (also counted as retried or dead in flexiq_job_attempts_total).",
		}, []string{"namespace"}),
		paced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_refusals_paced_total", Help: "Quota refusals of client calls answered late, past the namespace's burst (docs/protocol.md, Refusals are paced).",
		}, []string{"namespace"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flexiq_pending_jobs", Help: "Pending jobs (delayed included) of namespaces active on this node.",
		}, []string{"namespace"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flexiq_running_jobs", Help: "Running jobs of namespaces active on this node.",
		}, []string{"namespace"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_actor_steps_total", Help: "Steps of namespaces' actors on this node: each decides the messages it took and writes them to the store as one write.",
		}, []string{"namespace"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_actor_messages_total", Help: "Messages (calls, and the node's own) that namespaces' actors took, over flexiq_actor_steps_total: how many share a step's write.",
		}, []string{"namespace"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_actor_busy_seconds_total", Help: "Time namespaces' actors spent in their steps. A rate near 1 means the namespace's calls wait for its one writer: batch them, or spread the load over namespaces.",
		}, []string{"namespace"}),
		Propagation: &BroadcastMetrics{
			delay: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name:    "flexiq_quota_propagation_seconds",
				Help:    "Delay from a quota write's broadcast (sender's clock) to its arrival (this node's clock); only delays from 0 to the cache TTL are recorded.",
				Buckets: []float64{.00025, .0005, .00075, .001, .0015, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
			}),
			skipped: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "flexiq_quota_propagation_skipped_total",
				Help: "Quota broadcasts applied but not timed: the sender's clock put them in the future, beyond the cache TTL, or gave no time.",
			}),
			dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "flexiq_broadcasts_dropped_total",
				Help: "Broadcasts ignored, by subject and reason (oversized, malformed, invalid_namespace, invalid_revision, revision_not_held, unverified, invalid_token_id).",
			}, []string{"subject", "reason"}),
		},
		PeriodicFires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_periodic_fires_total", Help: "Periodic fires by outcome.",
		}, []string{"namespace", "outcome"}),
		RetentionDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_retention_deleted_total", Help: "Rows deleted by retention, by status and cause (ttl, ceiling).",
		}, []string{"status", "cause"}),
		RetentionSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flexiq_retention_skipped_total", Help: "Namespaces the retention sweep skipped because their quota is unreadable.",
		}, []string{"namespace"}),
		quotaAlarm: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flexiq_quota_alarm",
			Help: "1 while a namespace's usage of a limit is at or above 80 % (raised once, cleared below 70 %); 0 for an hour after it cleared.",
		}, []string{"namespace", "limit"}),
		alarmSeries: map[[2]string]bool{},
	}
	m.Registry.MustRegister(m.outcomes, m.refusals, m.shed, m.claimed, m.wait, m.attempts, m.expired, m.paced, m.pending, m.running,
		m.steps, m.messages, m.busy,
		m.Propagation.delay, m.Propagation.skipped, m.Propagation.dropped,
		m.PeriodicFires, m.RetentionDeleted, m.RetentionSkipped, m.quotaAlarm,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		// go_build_info{path,version,checksum}: which build each node runs.
		collectors.NewBuildInfoCollector())
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
	if m.history != nil {
		m.history.observe(ns, pending, running, time.Now())
	}
}

// Stepped counts a step of ns's actor, the messages it took and its busy
// time. A clock set back during the step (a test's, or a wall clock
// without a monotonic reading) counts as no time: a counter that is
// given a negative value panics.
func (m *Metrics) Stepped(ns string, messages int, busy time.Duration) {
	m.steps.WithLabelValues(ns).Inc()
	m.messages.WithLabelValues(ns).Add(float64(max(messages, 0)))
	m.busy.WithLabelValues(ns).Add(max(busy, 0).Seconds())
}

// QuotaAlarms sets flexiq_quota_alarm to every alarm listed (the store's
// alarm documents, the same on every node): 1 raised, 0 cleared; the
// series of alarms no longer listed are deleted, so the gauge holds no
// more series than the store holds alarms.
func (m *Metrics) QuotaAlarms(all []alarm.Alarm) {
	m.alarmsMu.Lock()
	defer m.alarmsMu.Unlock()
	now := make(map[[2]string]bool, len(all))
	for _, a := range all {
		k := [2]string{a.Namespace, a.Limit}
		now[k] = true
		v := 0.0
		if a.State == alarm.StateRaised {
			v = 1
		}
		m.quotaAlarm.WithLabelValues(a.Namespace, a.Limit).Set(v)
	}
	for k := range m.alarmSeries {
		if !now[k] {
			m.quotaAlarm.DeleteLabelValues(k[0], k[1])
		}
	}
	m.alarmSeries = now
}

// Paced counts a quota refusal held past the burst.
func (m *Metrics) Paced(ns string) { m.paced.WithLabelValues(ns).Inc() }

// Claimed counts jobs handed to workers and how long each had been due.
func (m *Metrics) Claimed(ns string, waits []time.Duration) {
	if len(waits) == 0 {
		return
	}
	m.claimed.WithLabelValues(ns).Add(float64(len(waits)))
	h := m.wait.WithLabelValues(ns)
	for _, d := range waits {
		h.Observe(d.Seconds())
	}
}

// The outcome label of flexiq_job_attempts_total.
const (
	attemptCompleted = "completed"
	attemptRetried   = "retried"
	attemptDead      = "dead"
	attemptReleased  = "released"
)

// Settled counts how a write's attempts ended.
func (m *Metrics) Settled(ns string, s actors.Settled) {
	for _, o := range [...]struct {
		outcome string
		n       int
	}{{attemptCompleted, s.Completed}, {attemptRetried, s.Retried}, {attemptDead, s.Dead}, {attemptReleased, s.Released}} {
		if o.n > 0 {
			m.attempts.WithLabelValues(ns, o.outcome).Add(float64(o.n))
		}
	}
	if s.Expired > 0 {
		m.expired.WithLabelValues(ns).Add(float64(s.Expired))
	}
}

// BroadcastMetrics are the broadcast listeners' metrics; they implement
// bus.Observer.
type BroadcastMetrics struct {
	delay   prometheus.Histogram
	skipped prometheus.Counter
	dropped *prometheus.CounterVec
}

// Propagation records a quota change's propagation delay.
func (b *BroadcastMetrics) Propagation(d time.Duration) { b.delay.Observe(d.Seconds()) }

// PropagationSkipped counts a quota change applied but not timed.
func (b *BroadcastMetrics) PropagationSkipped() { b.skipped.Inc() }

// BroadcastDropped counts a broadcast ignored for reason.
func (b *BroadcastMetrics) BroadcastDropped(subject, reason string) {
	b.dropped.WithLabelValues(subject, reason).Inc()
}

// Deleted counts rows retention deleted.
func (m *Metrics) Deleted(status api.Status, cause string, n int64) {
	m.RetentionDeleted.WithLabelValues(string(status), cause).Add(float64(n))
}

// Skipped counts a namespace retention skipped.
func (m *Metrics) Skipped(ns string) { m.RetentionSkipped.WithLabelValues(ns).Inc() }

// Fired counts a periodic fire by outcome (enqueued, deduplicated, shed,
// refused).
func (m *Metrics) Fired(ns, outcome string) { m.PeriodicFires.WithLabelValues(ns, outcome).Inc() }

// WatchCertificate exports the expiry of the certificate a listener serves
// as flexiq_tls_certificate_expiration_timestamp_seconds{listener}, read
// at each scrape: notAfter reports the certificate in use now, so a
// renewal shows without a restart and an alert can fire before the date.
func (m *Metrics) WatchCertificate(listener string, notAfter func() time.Time) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "flexiq_tls_certificate_expiration_timestamp_seconds",
		Help:        "Unix time at which the certificate a listener serves expires (admin_grpc: the admin door and gRPC; nats: the embedded NATS server).",
		ConstLabels: prometheus.Labels{"listener": listener},
	}, func() float64 { return float64(notAfter().Unix()) }))
}
