package simtest

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// Run plays the whole world: clients and chaos for Duration, then a drain
// so leases run out and work settles, then a last reconcile. It returns the
// first violation (all of them are in Violations).
func (s *Sim) Run() error {
	s.setup()
	s.end = s.now.Add(s.cfg.Duration)
	for _, ns := range s.cfg.Namespaces {
		for i := 0; i < s.cfg.Load.Producers; i++ {
			p := &producer{s: s, ns: ns, name: fmt.Sprintf("p%d.%s", i+1, ns)}
			s.after(s.expDur(s.cfg.Load.SendEvery), p.act)
		}
		for i := 0; i < s.cfg.Load.Workers; i++ {
			s.spawnWorker(ns)
		}
	}
	s.chaos(s.cfg.Chaos.QuotaEvery, s.randomQuota)
	s.chaos(s.cfg.Chaos.ConfigEvery, s.randomConfig)
	s.chaos(s.cfg.Chaos.RestartEvery, func() {
		n := s.nodes[s.rng.IntN(len(s.nodes))]
		s.restartNode(n, s.rng.IntN(2) == 0)
	})
	if s.cfg.Cluster != nil {
		s.clusterChaos()
	}
	if len(s.nodes) > 1 {
		s.chaos(s.cfg.Chaos.MoveEvery, func() {
			ns := s.cfg.Namespaces[s.rng.IntN(len(s.cfg.Namespaces))]
			s.move(ns, s.nodes[s.rng.IntN(len(s.nodes))])
		})
	}
	s.runUntil(s.end.Add(s.cfg.Drain))
	s.checkSettled()
	s.checkAnswered()
	s.reconcile("at the end")
	if len(s.violations) > 0 {
		return s.violations[0]
	}
	return nil
}

// chaos calls fn at random moments, every mean on average, until the end.
func (s *Sim) chaos(mean time.Duration, fn func()) {
	if mean <= 0 {
		return
	}
	var tick func()
	tick = func() {
		if s.now.After(s.end) {
			return
		}
		fn()
		s.after(s.expDur(mean), tick)
	}
	s.after(s.expDur(mean), tick)
}

// expDur draws an exponential duration of mean m (at least 1 ms).
func (s *Sim) expDur(m time.Duration) time.Duration {
	d := time.Duration(-math.Log(1-s.rng.Float64()) * float64(m))
	return max(d, time.Millisecond)
}

func (s *Sim) randomQuota() {
	ns := s.cfg.Namespaces[s.rng.IntN(len(s.cfg.Namespaces))]
	var raw []byte
	switch r := s.rng.Float64(); {
	case r < s.cfg.Chaos.Corrupt:
		raw = []byte(corruptDocs[s.rng.IntN(len(corruptDocs))])
	case r < s.cfg.Chaos.Corrupt+0.1:
		raw = nil
	default:
		raw = randomDoc(s.rng)
	}
	s.writeQuota(ns, raw, -1)
}

func (s *Sim) randomConfig() {
	ns := s.cfg.Namespaces[s.rng.IntN(len(s.cfg.Namespaces))]
	w := &s.cfg.World
	if s.rng.IntN(2) == 0 {
		if s.rng.IntN(3) == 0 {
			delete(w.QueueCap, "q1")
		} else {
			w.QueueCap["q1"] = s.rng.Int64N(4)
		}
		v, ok := s.queueSettings("q1")
		if !ok {
			v = []byte("{}")
		}
		s.writeConfig(ns, store.KindQueue, "q1", v, -1)
		return
	}
	ts := quota.TaskSettings{}
	if s.rng.IntN(3) != 0 {
		c := s.rng.Int64N(3)
		ts.MaxConcurrent = &c
	}
	s.writeConfig(ns, store.KindTask, "t3", ts.Encode(), -1)
}

// ---------------------------------------------------------------------------
// Producers

type producer struct {
	s    *Sim
	ns   string
	name string
}

func (p *producer) act() {
	s := p.s
	if s.now.After(s.end) {
		return
	}
	calls := 1
	if s.rng.IntN(10) == 0 {
		calls = 2 + s.rng.IntN(3) // a burst: decided together
	}
	for i := 0; i < calls; i++ {
		switch r := s.rng.Float64(); {
		case r < s.cfg.Load.Events:
			p.event()
		case r < s.cfg.Load.Events+s.cfg.Load.Replays:
			if !p.replay() {
				p.enqueue(p.jobs(), 0)
			}
		default:
			p.enqueue(p.jobs(), 0)
		}
	}
	s.after(s.expDur(s.cfg.Load.SendEvery), p.act)
}

// jobs draws one call's jobs (without their batch tags).
func (p *producer) jobs() []api.Job {
	s, l := p.s, p.s.cfg.Load
	n := 1
	if s.rng.Float64() < l.Batch {
		n = 2 + s.rng.IntN(max(l.MaxBatch-1, 1))
	}
	w := s.cfg.World
	jobs := make([]api.Job, n)
	for i := range jobs {
		j := api.Job{
			Queue:    w.Queues[s.rng.IntN(len(w.Queues))],
			Task:     w.Tasks[s.rng.IntN(len(w.Tasks))],
			Priority: s.rng.Int64N(3),
		}
		if s.rng.Float64() < l.Keys {
			j.ID = fmt.Sprintf("c%d", s.rng.IntN(30))
		}
		if s.rng.Float64() < l.Keys {
			j.UniqueKey = fmt.Sprintf("u%d", s.rng.IntN(4))
		}
		if s.rng.Float64() < l.Keys {
			j.Debounce = &api.Debounce{Key: fmt.Sprintf("d%d", s.rng.IntN(3)), WindowMS: s.rng.Int64N(3000)}
		}
		if s.rng.Float64() < l.Delay {
			if s.rng.IntN(4) == 0 {
				at := s.now.Add(time.Duration(s.rng.Int64N(5000)) * time.Millisecond)
				j.RunAt = &at
			} else {
				j.DelayMS = s.rng.Int64N(5000)
			}
		}
		if s.rng.IntN(5) == 0 {
			a := 1 + s.rng.Int64N(3)
			j.MaxAttempts = &a
		}
		jobs[i] = j
	}
	return jobs
}

// enqueue sends one call; a call that failed for a reason a client would
// retry is sent again (same jobs, client ids included) a while later.
func (p *producer) enqueue(jobs []api.Job, retry int) {
	s := p.s
	b := s.newBatch(p.ns, kindEnqueue)
	b.jobs = make([]api.Job, len(jobs))
	for i, j := range jobs {
		j.Payload = json.RawMessage(fmt.Sprintf(`{"b":%d,"i":%d}`, b.id, i))
		b.jobs[i] = j
	}
	m := s.newMsg(actors.OpEnqueue, p.ns, p.name, &api.EnqueueRequest{Jobs: b.jobs})
	m.batch = b
	b.msg = m
	again := func() {
		if retry < 2 && s.rng.IntN(3) != 0 {
			s.after(100*time.Millisecond+s.expDur(300*time.Millisecond), func() { p.enqueue(jobs, retry+1) })
		}
	}
	m.onReply = func(_ any, err *api.Error) {
		if err != nil && err.Code == api.CodeUnavailable {
			again()
		}
	}
	m.onTimeout = again
	s.send(m)
}

func (p *producer) event() {
	s := p.s
	b := s.newBatch(p.ns, kindEvent)
	name := "ev"
	if s.rng.IntN(10) == 0 {
		name = "nothing"
	} else {
		b.triggers = s.cfg.World.Triggers
	}
	m := s.newMsg(actors.OpEvent, p.ns, p.name, &api.EventRequest{Name: name, Payload: json.RawMessage(fmt.Sprintf(`{"e":%d}`, b.id))})
	m.batch = b
	b.msg = m
	s.send(m)
}

// replay asks for one or two dead letters back (as an admin, or as the
// auto-retry sweep); false when there are none.
func (p *producer) replay() bool {
	s := p.s
	dead := s.m.ns[p.ns].dead()
	if len(dead) == 0 {
		return false
	}
	ids := []string{dead[s.rng.IntN(len(dead))].id}
	if len(dead) > 1 && s.rng.IntN(3) == 0 {
		if other := dead[s.rng.IntN(len(dead))].id; other != ids[0] {
			ids = append(ids, other)
		}
	}
	b := s.newBatch(p.ns, kindReplay)
	b.replayIDs = ids
	b.autoRetry = s.rng.IntN(2) == 0
	m := s.newMsg(actors.OpReplay, p.ns, p.name, &api.ReplayRequest{IDs: ids})
	m.batch = b
	b.msg = m
	s.send(m)
	return true
}

// ---------------------------------------------------------------------------
// Workers

type worker struct {
	s        *Sim
	ns, name string
	queues   []string
	capacity int
	claiming bool
	dead     bool
	held     map[string]*held
}

type held struct {
	id       string
	attempt  int64
	leaseMS  int64
	finished bool
}

func (s *Sim) spawnWorker(ns string) {
	s.nworkers[ns]++
	w := &worker{s: s, ns: ns, name: fmt.Sprintf("w%d.%s", s.nworkers[ns], ns), capacity: 1 + s.rng.IntN(3), held: map[string]*held{}}
	w.queues = slices.Clone(s.cfg.World.Queues)
	if s.rng.IntN(3) == 0 {
		w.queues = []string{w.queues[s.rng.IntN(len(w.queues))]}
	}
	s.after(s.expDur(200*time.Millisecond), w.act)
}

func (w *worker) quitting() bool {
	return w.dead || w.s.now.After(w.s.end.Add(w.s.cfg.Drain))
}

// act claims when the worker has room and no claim out.
func (w *worker) act() {
	s := w.s
	// After the run, workers finish what they hold and claim no more: the
	// drain is for leases to run out and be noticed.
	if w.quitting() || w.claiming || len(w.held) >= w.capacity || s.now.After(s.end) {
		return
	}
	l := s.cfg.Load
	lease := l.LeaseMin
	if l.LeaseMax > l.LeaseMin {
		lease += time.Duration(s.rng.Int64N(int64(l.LeaseMax - l.LeaseMin)))
	}
	req := &api.ClaimRequest{Queues: w.queues, Max: w.capacity - len(w.held), LeaseMS: lease.Milliseconds(), Worker: w.name}
	if s.rng.IntN(3) != 0 {
		req.WaitMS = 200 + s.rng.Int64N(3000)
	}
	m := s.newMsg(actors.OpClaim, w.ns, w.name, req)
	m.timeout = time.Duration(req.WaitMS)*time.Millisecond + 3*time.Second
	w.claiming = true
	m.onReply = func(body any, err *api.Error) {
		w.claiming = false
		if w.dead {
			return
		}
		if rep, ok := body.(api.ClaimReply); ok && err == nil {
			for _, j := range rep.Jobs {
				w.work(j, req.LeaseMS)
			}
			if len(rep.Jobs) > 0 {
				w.act()
				return
			}
		}
		s.after(100*time.Millisecond+s.expDur(400*time.Millisecond), w.act)
	}
	m.onTimeout = func() {
		w.claiming = false
		s.after(s.expDur(300*time.Millisecond), w.act)
	}
	s.send(m)
}

// work holds a job for a while, heartbeating or not, then acks, nacks or
// crashes.
func (w *worker) work(j api.Job, leaseMS int64) {
	s, l := w.s, w.s.cfg.Load
	h := &held{id: j.ID, attempt: j.Attempt, leaseMS: leaseMS}
	w.held[j.ID] = h
	d := time.Duration(s.rng.Int64N(int64(l.WorkMax)) + 1)
	if s.rng.Float64() < l.Heartbeat {
		// Heartbeats may ask for another lease than the claim did, shorter
		// or longer: the lease runs from each heartbeat.
		hbMS := leaseMS
		if s.rng.IntN(2) == 0 {
			hbMS = l.LeaseMin.Milliseconds() + s.rng.Int64N(max(l.LeaseMax.Milliseconds()-l.LeaseMin.Milliseconds(), 1))
		}
		every := time.Duration(hbMS) * time.Millisecond / 2
		var beat func()
		beat = func() {
			if w.dead || h.finished {
				return
			}
			m := s.newMsg(actors.OpHeartbeat, w.ns, w.name, &api.HeartbeatRequest{IDs: []string{j.ID}, LeaseMS: hbMS})
			s.send(m)
			s.after(every, beat)
		}
		s.after(every, beat)
	}
	s.after(d, func() {
		if w.dead {
			return
		}
		h.finished = true
		r := s.rng.Float64()
		switch {
		case r < l.Crash:
			w.crash()
			return
		case r < l.Crash+l.Nack:
			req := &api.NackRequest{ID: j.ID, Error: "boom"}
			if s.rng.Float64() < l.NoRetry {
				f := false
				req.Retry = &f
			}
			if s.rng.IntN(2) == 0 {
				req.Attempt = j.Attempt
			}
			w.finish(s.newMsg(actors.OpNack, w.ns, w.name, req), h)
		case r < l.Crash+l.Nack+l.Release:
			req := &api.NackRequest{ID: j.ID, Release: true}
			if s.rng.IntN(2) == 0 {
				req.Attempt = j.Attempt
			}
			w.finish(s.newMsg(actors.OpNack, w.ns, w.name, req), h)
		default:
			req := &api.AckRequest{ID: j.ID, Result: json.RawMessage(`{"ok":true}`)}
			if s.rng.IntN(2) == 0 {
				req.Attempt = j.Attempt
			}
			w.finish(s.newMsg(actors.OpAck, w.ns, w.name, req), h)
		}
	})
}

func (w *worker) finish(m *msgRec, h *held) {
	m.attempt = h.attempt
	done := func() {
		delete(w.held, h.id)
		w.act()
	}
	m.onReply = func(any, *api.Error) { done() }
	m.onTimeout = done
	w.s.send(m)
}

// crash kills the worker holding its jobs: their leases must run out and
// free the slots. Another worker takes its place a while later.
func (w *worker) crash() {
	s := w.s
	w.dead = true
	ids := sortedKeys(w.held)
	s.logf("%s crash holding %s", w.name, s.aliasList(ids))
	if !s.now.After(s.end) {
		s.after(time.Second+s.expDur(time.Second), func() { s.spawnWorker(w.ns) })
	}
}
