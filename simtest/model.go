package simtest

import (
	"slices"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// model is what the simulator knows must be in the store: every job of
// every namespace, its quota history and configuration. It is fed by the
// recording layer right above SQLite (what committed), so it holds the
// truth the actors' answers and counts are checked against.
type model struct {
	ns    map[string]*nsModel
	order []string
}

func newModel(names []string) *model {
	m := &model{ns: map[string]*nsModel{}, order: slices.Clone(names)}
	for _, n := range names {
		m.ns[n] = &nsModel{
			name: n, jobs: map[string]*mjob{}, runQ: map[string]int64{}, runT: map[string]int64{},
			queueCap: map[string]int64{}, taskCap: map[string]int64{}, queueAttempts: map[string]int64{},
		}
	}
	return m
}

// mjob is one job as the model knows it.
type mjob struct {
	id          string
	queue, task string
	status      api.Status
	shed        bool
	noRetry     bool
	attempt     int64
	maxAttempts int64
	priority    int64
	runAt       time.Time // as stored: see storedRunAt
	leaseUntil  time.Time
	uniqueKey   string
	debounceKey string
	payload     string
	// n is the job's place in its namespace's creation order, the order
	// of the store's seq; seq is the store's, once a claim returned it.
	n   int
	seq int64
}

// storedRunAt is run_at as the store keeps it: to the microsecond (see
// docs/protocol.md), so that it reaches the year 9999. A job is due once that is not
// after now, up to a microsecond before the time it was given.
func storedRunAt(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

type nsModel struct {
	name  string
	jobs  map[string]*mjob
	order []*mjob // creation order

	pending, running int64
	runQ, runT       map[string]int64

	quota []quotaRev // quota[i] is revision i+1

	// configuration in force in the store (not necessarily in caches)
	queueCap, taskCap, queueAttempts map[string]int64

	// stretch is the span of the current actor incarnation with one
	// enqueue_rate in force, for the bucket check.
	stretch *stretch
}

type quotaRev struct {
	rev     int64
	at      time.Time
	raw     []byte // nil: cleared
	doc     quota.Document
	corrupt bool
}

// stretch is a run under one rate (and, while BugBucketForgotten is
// tolerated, one actor incarnation): the admitted calls in it, for the
// bucket check.
type stretch struct {
	inc    int
	rate   quota.Rate
	admits []admit
}

type admit struct {
	at time.Time
	n  int64
	w  *writeRec
}

func (n *nsModel) addQuota(rev int64, at time.Time, raw []byte) {
	q := quotaRev{rev: rev, at: at, raw: raw}
	if raw != nil {
		doc, err := quota.Decode(raw)
		q.doc, q.corrupt = doc, err != nil
	}
	for int64(len(n.quota)) < rev-1 {
		n.quota = append(n.quota, quotaRev{rev: int64(len(n.quota) + 1)})
	}
	n.quota = append(n.quota, q)
}

// quotaAt is revision rev (0: never written: no limits).
func (n *nsModel) quotaAt(rev int64) (quotaRev, bool) {
	if rev == 0 {
		return quotaRev{}, true
	}
	if rev < 0 || rev > int64(len(n.quota)) {
		return quotaRev{}, false
	}
	return n.quota[rev-1], true
}

// requiredRev is the newest revision written at or before t: a snapshot
// used at t+TTL must be at least that new.
func (n *nsModel) requiredRev(t time.Time) int64 {
	var rev int64
	for _, q := range n.quota {
		if !q.at.After(t) {
			rev = q.rev
		}
	}
	return rev
}

func (n *nsModel) setConfig(kind, name string, value []byte) {
	switch kind {
	case store.KindQueue:
		qs, err := quota.DecodeQueueSettings(value)
		if err != nil {
			return
		}
		delete(n.queueCap, name)
		delete(n.queueAttempts, name)
		if qs.MaxConcurrent != nil {
			n.queueCap[name] = *qs.MaxConcurrent
		}
		if qs.MaxAttempts != nil {
			n.queueAttempts[name] = *qs.MaxAttempts
		}
	case store.KindTask:
		ts, err := quota.DecodeTaskSettings(value)
		if err != nil {
			return
		}
		delete(n.taskCap, name)
		if ts.MaxConcurrent != nil {
			n.taskCap[name] = *ts.MaxConcurrent
		}
	}
}

// maxAttempts resolves a job's attempt limit as docs/protocol.md says.
func (n *nsModel) maxAttempts(j *mjob) int64 {
	if j.maxAttempts > 0 {
		return j.maxAttempts
	}
	if a, ok := n.queueAttempts[j.queue]; ok {
		return a
	}
	return api.DefaultMaxAttempts
}

func (n *nsModel) add(j *mjob) {
	n.jobs[j.id] = j
	j.n = len(n.order)
	n.order = append(n.order, j)
	n.count(j, 1)
}

// setStatus moves j to st, keeping the counts.
func (n *nsModel) setStatus(j *mjob, st api.Status) {
	n.count(j, -1)
	j.status = st
	n.count(j, 1)
}

func (n *nsModel) count(j *mjob, d int64) {
	switch j.status {
	case api.StatusPending:
		n.pending += d
	case api.StatusRunning:
		n.running += d
		n.runQ[j.queue] += d
		n.runT[j.task] += d
	}
}

// liveUnique is the pending or running job holding unique key k.
func (n *nsModel) liveUnique(k string) *mjob {
	for _, j := range n.order {
		if j.uniqueKey == k && (j.status == api.StatusPending || j.status == api.StatusRunning) {
			return j
		}
	}
	return nil
}

// pendingDebounce is the pending job holding debounce key k.
func (n *nsModel) pendingDebounce(k string) *mjob {
	for _, j := range n.order {
		if j.debounceKey == k && j.status == api.StatusPending {
			return j
		}
	}
	return nil
}

func (n *nsModel) dead() []*mjob {
	var out []*mjob
	for _, j := range n.order {
		if j.status == api.StatusDead {
			out = append(out, j)
		}
	}
	return out
}

// jobCount is how many jobs the model holds, over every namespace.
func (s *Sim) jobCount() int {
	n := 0
	for _, nm := range s.m.ns {
		n += len(nm.jobs)
	}
	return n
}
