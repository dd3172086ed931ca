package simtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/store"
)

// Config is one simulated world. RandomConfig draws one from a seed;
// scripts start from ScriptConfig and set what they need.
type Config struct {
	Seed       uint64
	Namespaces []string
	// Nodes is how many nodes host actors; the admin door is apart, so its
	// broadcasts can be lost for every node.
	Nodes int
	// TTL is the quota cache TTL (FLEXIQ_QUOTA_CACHE_TTL).
	TTL time.Duration
	// Duration is how long producers, workers and chaos act; Drain is how
	// long the world then runs on so leases expire and work settles.
	Duration, Drain time.Duration
	// IdleAfter passivates actors with nothing running or waiting.
	IdleAfter time.Duration
	// Path is the SQLite database: "" for a private temporary one
	// (":memory:"), or a file.
	Path string
	// StepTx runs each actor step as one store transaction, as a node on
	// SQLite does (sqlite.Store.BeginStep); off, every write is its own
	// transaction, as on PostgreSQL and Redis.
	StepTx bool
	// OverlapAcks writes acks beside the actors' next steps when they
	// write call by call (actors.Deps.OverlapAcks, as a node on
	// PostgreSQL or Redis does; ignored with StepTx). The simulator holds
	// each such write for zero to two of its actor's steps, then runs it
	// at the start of one.
	OverlapAcks bool
	// Pace paces the clients' quota refusals (actors.Deps.Pace); the
	// seeds draw a pace far tighter than a node's, so refusals are held
	// across crashes, moves and failed commits.
	Pace actors.Pace

	// Cluster, when set, runs the nodes as one cluster on a shared store
	// (cluster.go): ownership by fenced leases instead of a fixed owner.
	Cluster *ClusterConfig

	Bus    BusConfig
	Faults FaultConfig
	Load   LoadConfig
	Chaos  ChaosConfig
	World  WorldConfig

	// WrapStore, when set, wraps the store every actor sees (above the
	// fault layer): mutation tests break rules here. With StepTx the store
	// it gets has BeginStep; a wrapper that hides it makes the actors
	// write call by call.
	WrapStore func(s actors.Store) actors.Store
	// WrapStep, when set, wraps each step transaction (with StepTx) as the
	// actors see it.
	WrapStep func(tx store.StepTx) store.StepTx
	// WrapSnapshots, when set, wraps each node's quota cache as its actors
	// see it.
	WrapSnapshots func(s actors.Snapshots) actors.Snapshots
	// KeepGoing keeps the simulation running after a violation (mutation
	// tests collect every invariant that fired).
	KeepGoing bool
	// ReconcileEvery is how often (simulated) the whole store is compared
	// with the model, besides restarts and the end; 0 means 5 s.
	ReconcileEvery time.Duration
	// Tolerate names product bugs (Bug… constants) the checks let pass, so
	// a known bug does not hide the next one. Nil tolerates none.
	Tolerate map[string]bool
}

// Known product limits the simulator tolerates by default (KnownBugs);
// TestKnownBugs shows each still happens, so a fix makes it fail and its
// tolerance can go. Fixed since it found them: tokens refunded after a
// write that had committed, max_attempts guessed while the queue settings
// were unreadable, two replays of one dead letter in one group, a heartbeat
// that shortened a lease, events answered "no jobs" while stopped, counts
// used after an update write failed.
const (
	// BugBucketForgotten: the token bucket lives only in the actor's
	// memory, so an actor that restarts or moves starts again with a full
	// bucket: an enqueue_rate per minute or hour may admit one extra burst
	// after a crash or a move. (Passivation waits for the bucket to refill,
	// so it does not.)
	BugBucketForgotten = "bucket-forgotten"
)

// KnownBugs are the limits tolerated by default.
func KnownBugs() map[string]bool {
	return map[string]bool{BugBucketForgotten: true}
}

// BusConfig shapes the simulated NATS.
type BusConfig struct {
	// Requests and replies take MinDelay..MaxDelay each way; independent
	// delays reorder them.
	MinDelay, MaxDelay time.Duration
	// ReplyLoss is the chance a reply never reaches its client (who then
	// times out, not knowing whether the request took effect).
	ReplyLoss float64
	// BroadcastLoss is the chance a quota or configuration broadcast never
	// reaches a given node; BroadcastMaxDelay bounds the delay of the others.
	BroadcastLoss     float64
	BroadcastMaxDelay time.Duration
	// StepLatency bounds how long a delivered message waits before its actor
	// steps, so messages arriving together are decided in one group.
	StepLatency time.Duration
}

// FaultConfig is the chance of each store fault per call.
type FaultConfig struct {
	// BeforeWrite fails a write without touching the store.
	BeforeWrite float64
	// AfterWrite lets a write commit and then reports an error.
	AfterWrite float64
	// MidWrite fails a write part-way through its transaction (the store
	// must roll it back whole).
	MidWrite float64
	// Slow makes a write take up to SlowMax of simulated time.
	Slow    float64
	SlowMax time.Duration
	// Read fails a read (counts, running jobs, quota and configuration).
	Read float64
}

// LoadConfig is the work the clients bring.
type LoadConfig struct {
	// Producers and Workers per namespace.
	Producers, Workers int
	// SendEvery is a producer's mean time between calls.
	SendEvery time.Duration
	// Batch is the chance a call holds 2..MaxBatch jobs.
	Batch    float64
	MaxBatch int
	// Keys is the chance a job carries a client id, a unique key or a
	// debounce key (each drawn separately); Delay the chance it is delayed.
	Keys, Delay float64
	// Events and Replays are the chance a producer's call is an event or a
	// dead-letter replay instead of an enqueue.
	Events, Replays float64
	// WorkMax bounds how long a worker holds a job; Crash is the chance it
	// dies holding it, Nack that it fails it (NoRetry: without retry),
	// Release that it gives it back unstarted (a job it took ahead of a
	// free slot, as a prefetching worker that stops does).
	WorkMax                       time.Duration
	Crash, Nack, NoRetry, Release float64
	// LeaseMin..LeaseMax is the lease a worker asks for; Heartbeat the chance
	// a worker heartbeats while it works.
	LeaseMin, LeaseMax time.Duration
	Heartbeat          float64
}

// ChaosConfig is how often the world is disturbed (mean intervals; 0 never).
type ChaosConfig struct {
	QuotaEvery, ConfigEvery, RestartEvery, MoveEvery time.Duration
	// Corrupt is the chance a quota write stores a document that does not
	// decode (the namespace must stop, the others go on).
	Corrupt float64
}

// WorldConfig is the namespaces' fixed furniture.
type WorldConfig struct {
	Queues, Tasks []string
	// QueueCap and TaskCap are max_concurrent settings written at start
	// (name → cap); QueueAttempts sets max_attempts of queues.
	QueueCap, TaskCap, QueueAttempts map[string]int64
	// Triggers map the event "ev" to these queue/task pairs, in order.
	Triggers [][2]string
	// Quota is each namespace's document at start (raw JSON; "" none).
	Quota map[string]string
}

// ScriptConfig is a quiet world for scripted scenarios: no clients, no
// chaos, no faults, an instant bus.
func ScriptConfig() Config {
	return Config{
		Seed:       1,
		Namespaces: []string{"acme", "beta"},
		Nodes:      1,
		TTL:        2 * time.Second,
		IdleAfter:  time.Minute,
		World: WorldConfig{
			Queues: []string{"q1", "q2"},
			Tasks:  []string{"t1", "t2"},
		},
	}
}

// RandomConfig draws a world from seed. scale stretches (or shrinks) how
// long it runs; 1 is the default size of TestSeeds.
func RandomConfig(seed uint64, scale float64) Config {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	pick := func(p float64) bool { return r.Float64() < p }
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	c := Config{
		Seed:       seed,
		Namespaces: []string{"acme", "beta", "core"}[:2+r.IntN(2)],
		Nodes:      1 + r.IntN(3),
		TTL:        []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}[r.IntN(3)],
		IdleAfter:  between(2*time.Second, 20*time.Second),
		Tolerate:   KnownBugs(),
		// Half the seeds each way, without a draw: every other field of
		// a seed's world stays what it was.
		StepTx: seed%2 == 0,
		// As a node does, but for one in four of the seeds that write
		// call by call (seed%8 == 3, the odd seeds being those).
		OverlapAcks: seed%8 != 3,
	}
	c.Duration = time.Duration(float64(between(6*time.Second, 16*time.Second)) * scale)
	// Long enough for every lease to run out and be noticed.
	c.Bus = BusConfig{
		MinDelay:          0,
		MaxDelay:          []time.Duration{time.Millisecond, 5 * time.Millisecond, 40 * time.Millisecond}[r.IntN(3)],
		StepLatency:       []time.Duration{0, time.Millisecond, 5 * time.Millisecond}[r.IntN(3)],
		BroadcastMaxDelay: between(time.Millisecond, 300*time.Millisecond),
	}
	if pick(0.5) {
		c.Bus.ReplyLoss = 0.02
	}
	c.Bus.BroadcastLoss = []float64{0, 0.3, 1}[r.IntN(3)]
	switch r.IntN(4) {
	case 0: // no faults
	case 1:
		c.Faults = FaultConfig{BeforeWrite: 0.02, AfterWrite: 0.02, MidWrite: 0.02, Slow: 0.05, SlowMax: 50 * time.Millisecond, Read: 0.01}
	default:
		c.Faults = FaultConfig{BeforeWrite: 0.05, AfterWrite: 0.06, MidWrite: 0.05, Slow: 0.1, SlowMax: 400 * time.Millisecond, Read: 0.03}
	}
	c.Load = LoadConfig{
		Producers: 1 + r.IntN(2),
		Workers:   1 + r.IntN(3),
		SendEvery: between(80*time.Millisecond, 600*time.Millisecond),
		Batch:     []float64{0, 0.3, 0.6}[r.IntN(3)],
		MaxBatch:  2 + r.IntN(5),
		Keys:      []float64{0, 0.1, 0.3}[r.IntN(3)],
		Delay:     []float64{0, 0.1, 0.3}[r.IntN(3)],
		Events:    0.05,
		Replays:   0.05,
		WorkMax:   between(200*time.Millisecond, 4*time.Second),
		Crash:     []float64{0, 0.03, 0.1}[r.IntN(3)],
		Nack:      []float64{0, 0.1, 0.3}[r.IntN(3)],
		NoRetry:   0.2,
		LeaseMin:  time.Second,
		LeaseMax:  between(time.Second, 6*time.Second),
		Heartbeat: 0.5,
	}
	// Derived, not drawn: the draws of every seed stay as they were.
	c.Load.Release = c.Load.Nack / 2
	c.Drain = c.Load.LeaseMax + 2*time.Second
	c.Chaos = ChaosConfig{
		QuotaEvery:  between(time.Second, 6*time.Second),
		ConfigEvery: between(3*time.Second, 20*time.Second),
		Corrupt:     []float64{0, 0.1, 0.25}[r.IntN(3)],
	}
	if pick(0.7) {
		c.Chaos.RestartEvery = between(2*time.Second, 12*time.Second)
	}
	if c.Nodes > 1 && pick(0.7) {
		c.Chaos.MoveEvery = between(2*time.Second, 10*time.Second)
	}
	c.World = WorldConfig{
		Queues:        []string{"q1", "q2"},
		Tasks:         []string{"t1", "t2", "t3"},
		QueueCap:      map[string]int64{},
		TaskCap:       map[string]int64{},
		QueueAttempts: map[string]int64{"q2": 2 + r.Int64N(3)},
		Triggers:      [][2]string{{"q1", "t1"}, {"q2", "t2"}},
		Quota:         map[string]string{},
	}
	if pick(0.5) {
		c.World.QueueCap["q1"] = 1 + r.Int64N(3)
	}
	if pick(0.5) {
		c.World.TaskCap["t3"] = r.Int64N(3)
	}
	for _, ns := range c.Namespaces {
		if pick(0.8) {
			c.World.Quota[ns] = string(randomDoc(r))
		}
	}
	// Drawn from a source of its own, so the draws above, and so every
	// seed's world, stay as they were before the pace.
	pr := rand.New(rand.NewPCG(seed, 0x9ace))
	if pr.IntN(4) != 0 {
		c.Pace = actors.Pace{
			Burst:    pr.IntN(4),
			Interval: time.Duration(20+pr.IntN(280)) * time.Millisecond,
			MaxHold:  time.Duration(100+pr.IntN(1400)) * time.Millisecond,
			MaxHeld:  1 + pr.IntN(6),
		}
	}
	return c
}

// String is the one-line summary that heads a trace.
func (c *Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d ns=%s nodes=%d ttl=%s run=%s", c.Seed, strings.Join(c.Namespaces, ","), c.Nodes, c.TTL, c.Duration)
	fmt.Fprintf(&b, " bus=%s..%s loss=%.2f bcastloss=%.2f", c.Bus.MinDelay, c.Bus.MaxDelay, c.Bus.ReplyLoss, c.Bus.BroadcastLoss)
	f := c.Faults
	fmt.Fprintf(&b, " faults=%.2f/%.2f/%.2f/%.2f/%.2f", f.BeforeWrite, f.AfterWrite, f.MidWrite, f.Slow, f.Read)
	l := c.Load
	fmt.Fprintf(&b, " load=%dp%dw/%s", l.Producers, l.Workers, l.SendEvery)
	ch := c.Chaos
	fmt.Fprintf(&b, " chaos=q%s c%s r%s m%s corrupt=%.2f", ch.QuotaEvery, ch.ConfigEvery, ch.RestartEvery, ch.MoveEvery, ch.Corrupt)
	if c.StepTx {
		b.WriteString(" steptx")
	}
	b.WriteString(c.Cluster.String())
	return b.String()
}

// corruptDocs are stored quota documents that do not decode: the namespace
// must fail closed.
var corruptDocs = []string{
	`{"MAX_PENDING":3}`,
	`{"max_pending":-1}`,
	`{"enqueue_rate":"fast"}`,
	`{"max_pending":"7"}`,
	`not json`,
	`{"max_running":2,"extra":true}`,
}

// randomDoc is a valid quota document: some limits, often tight.
func randomDoc(r *rand.Rand) []byte {
	var parts []string
	if r.IntN(2) == 0 {
		parts = append(parts, fmt.Sprintf(`"max_pending":%d`, r.IntN(16)))
	}
	if r.IntN(3) == 0 {
		parts = append(parts, `"on_excess":"drop"`)
	}
	if r.IntN(3) == 0 {
		unit := []string{"s", "s", "m"}[r.IntN(3)]
		parts = append(parts, fmt.Sprintf(`"enqueue_rate":"%d/%s"`, 1+r.IntN(8), unit))
	}
	if r.IntN(5) < 2 {
		parts = append(parts, fmt.Sprintf(`"max_running":%d`, r.IntN(5)))
	}
	return []byte("{" + strings.Join(parts, ",") + "}")
}
