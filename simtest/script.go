package simtest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// Script drives a quiet world one command at a time, for the readable
// scenarios of testdata/*.txt (in the manner of etcd-io/raft's interaction
// tests). Each command answers with the trace lines it caused.
//
//	world ns=acme,beta nodes=1 ttl=2s bus=1ms qcap=q1:1 tcap=t1:1 attempts=q1:3 overlap=2[,mid] steptx=on
//	quota acme [broadcast=lost|<delay>] {"max_pending":2} | clear | <raw text>
//	enqueue acme [n=3] [queue=q1] [task=t1] [id=x] [unique=u] [debounce=d:1000] [delay=2s] [priority=1]
//	event acme [name=ev]
//	replay acme <job>...
//	claim <worker> acme [max=1] [wait=0] [lease=30s] [queues=q1,q2]
//	ack|nack <worker> [job=<job>] [retry=false] [attempt=yes] [keep=yes]  (keep: it may be sent again)
//	heartbeat <worker> [lease=30s]
//	crash <worker>            (forgets what it holds: its leases run out)
//	run <duration>            (let the world run)
//	restart <node> [graceful] | move <ns> <node>
//	fault before|after|mid|slow:<d>|read <op>   (the next such call)
//	counts <ns> | jobs <ns> | check
type Script struct {
	s       *Sim
	workers map[string]*scriptWorker
	out     []string
}

type scriptWorker struct {
	name, ns string
	held     []api.Job
}

// NewScript starts a scripted world.
func NewScript() *Script {
	return &Script{workers: map[string]*scriptWorker{}}
}

// Close releases the world.
func (sc *Script) Close() {
	if sc.s != nil {
		sc.s.Close()
	}
}

// Do runs one command line and returns what it printed.
func (sc *Script) Do(line string) (string, error) {
	sc.out = nil
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return "", nil
	}
	cmd, args := fields[0], fields[1:]
	if cmd != "world" && sc.s == nil {
		if _, err := sc.Do("world"); err != nil {
			return "", err
		}
		sc.out = nil
	}
	nv := len(sc.violations())
	var err error
	switch cmd {
	case "world":
		err = sc.world(args)
	case "quota":
		err = sc.quota(args)
	case "enqueue":
		err = sc.enqueue(args)
	case "event":
		err = sc.event(args)
	case "replay":
		err = sc.replay(args)
	case "claim":
		err = sc.claim(args)
	case "ack", "nack":
		err = sc.finish(cmd, args)
	case "heartbeat":
		err = sc.heartbeat(args)
	case "crash":
		err = sc.crash(args)
	case "run":
		err = sc.run(args)
	case "restart":
		err = sc.restart(args)
	case "move":
		err = sc.move(args)
	case "fault":
		err = sc.fault(args)
	case "counts":
		err = sc.counts(args)
	case "jobs":
		err = sc.jobs(args)
	case "check":
		sc.s.reconcile("check")
		if len(sc.violations()) == nv {
			sc.out = append(sc.out, "ok")
		}
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		return "", err
	}
	return strings.Join(sc.out, "\n"), nil
}

func (sc *Script) violations() []Violation {
	if sc.s == nil {
		return nil
	}
	return sc.s.violations
}

func (sc *Script) printf(format string, args ...any) {
	sc.out = append(sc.out, fmt.Sprintf(format, args...))
}

// opts splits key=value arguments from the others.
func opts(args []string) (map[string]string, []string) {
	kv := map[string]string{}
	var rest []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && !strings.HasPrefix(a, "{") {
			kv[k] = v
		} else {
			rest = append(rest, a)
		}
	}
	return kv, rest
}

func capMap(v string) (map[string]int64, error) {
	out := map[string]int64{}
	if v == "" {
		return out, nil
	}
	for _, part := range strings.Split(v, ",") {
		k, n, ok := strings.Cut(part, ":")
		c, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("want name:n, got %q", part)
		}
		out[k] = c
	}
	return out, nil
}

func (sc *Script) world(args []string) error {
	kv, _ := opts(args)
	cfg := ScriptConfig()
	var hold *fixedHold
	cfg.Bus.MinDelay, cfg.Bus.MaxDelay = time.Millisecond, time.Millisecond
	var err error
	for k, v := range kv {
		switch k {
		case "ns":
			cfg.Namespaces = strings.Split(v, ",")
		case "nodes":
			cfg.Nodes, err = strconv.Atoi(v)
		case "ttl":
			cfg.TTL, err = time.ParseDuration(v)
		case "bus":
			var d time.Duration
			d, err = time.ParseDuration(v)
			cfg.Bus.MinDelay, cfg.Bus.MaxDelay = d, d
		case "qcap":
			cfg.World.QueueCap, err = capMap(v)
		case "tcap":
			cfg.World.TaskCap, err = capMap(v)
		case "attempts":
			cfg.World.QueueAttempts, err = capMap(v)
		case "overlap":
			// overlap=<steps>[,mid]: acks written beside the steps, each
			// write held for <steps> of its actor's steps (then landing
			// before a step, or inside it with mid).
			n, mid, _ := strings.Cut(v, ",")
			cfg.OverlapAcks = true
			hold = &fixedHold{mid: mid == "mid"}
			hold.steps, err = strconv.Atoi(n)
		case "steptx":
			// steptx=on: each step one store transaction, its answers
			// held until it commits (a node on SQLite).
			cfg.StepTx = v == "on"
		case "triggers":
			for _, t := range strings.Split(v, ",") {
				q, tk, _ := strings.Cut(t, "/")
				cfg.World.Triggers = append(cfg.World.Triggers, [2]string{q, tk})
			}
		default:
			return fmt.Errorf("world: unknown option %s", k)
		}
		if err != nil {
			return fmt.Errorf("world %s: %v", k, err)
		}
	}
	cfg.Path = "" // a private database
	if sc.s != nil {
		sc.s.Close()
	}
	s, err := New(cfg)
	if err != nil {
		return err
	}
	sc.s = s
	sc.s.hold = hold
	sc.s.echo = func(line string) { sc.out = append(sc.out, line) }
	s.setup()
	return nil
}

func (sc *Script) quota(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: quota <ns> [broadcast=lost|<delay>] <doc>|clear")
	}
	ns := args[0]
	var rest []string
	lose := 0
	var delay time.Duration
	for _, a := range args[1:] {
		if v, ok := strings.CutPrefix(a, "broadcast="); ok && len(rest) == 0 {
			if v == "lost" {
				lose = 1
			} else {
				d, err := time.ParseDuration(v)
				if err != nil {
					return err
				}
				delay = d
			}
			continue
		}
		rest = append(rest, a)
	}
	var raw []byte
	if doc := strings.Join(rest, " "); doc != "clear" {
		raw = []byte(doc)
	}
	if delay > 0 {
		saved := sc.s.cfg.Bus.BroadcastMaxDelay
		sc.s.cfg.Bus.BroadcastMaxDelay = delay
		defer func() { sc.s.cfg.Bus.BroadcastMaxDelay = saved }()
		lose = -1
		saveLoss := sc.s.cfg.Bus.BroadcastLoss
		sc.s.cfg.Bus.BroadcastLoss = 0
		defer func() { sc.s.cfg.Bus.BroadcastLoss = saveLoss }()
	}
	sc.s.writeQuota(ns, raw, lose)
	return nil
}

func (sc *Script) enqueue(args []string) error {
	kv, rest := opts(args)
	if len(rest) != 1 {
		return fmt.Errorf("usage: enqueue <ns> [options]")
	}
	ns := rest[0]
	n := 1
	if v := kv["n"]; v != "" {
		n, _ = strconv.Atoi(v)
	}
	s := sc.s
	b := s.newBatch(ns, kindEnqueue)
	for i := 0; i < n; i++ {
		j := api.Job{Queue: "q1", Task: "t1"}
		if v := kv["queue"]; v != "" {
			j.Queue = v
		}
		if v := kv["task"]; v != "" {
			j.Task = v
		}
		if v := kv["id"]; v != "" {
			j.ID = v
			if n > 1 {
				j.ID = fmt.Sprintf("%s-%d", v, i)
			}
		}
		j.UniqueKey = kv["unique"]
		if v := kv["debounce"]; v != "" {
			k, w, _ := strings.Cut(v, ":")
			ms, _ := strconv.ParseInt(w, 10, 64)
			j.Debounce = &api.Debounce{Key: k, WindowMS: ms}
		}
		if v := kv["delay"]; v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			j.DelayMS = d.Milliseconds()
		}
		if v := kv["priority"]; v != "" {
			j.Priority, _ = strconv.ParseInt(v, 10, 64)
		}
		if v := kv["attempts"]; v != "" {
			a, _ := strconv.ParseInt(v, 10, 64)
			j.MaxAttempts = &a
		}
		j.Payload = json.RawMessage(fmt.Sprintf(`{"b":%d,"i":%d}`, b.id, i))
		b.jobs = append(b.jobs, j)
	}
	m := s.newMsg(actors.OpEnqueue, ns, "producer", &api.EnqueueRequest{Jobs: b.jobs})
	m.batch, b.msg = b, m
	s.send(m)
	return nil
}

func (sc *Script) event(args []string) error {
	kv, rest := opts(args)
	if len(rest) != 1 {
		return fmt.Errorf("usage: event <ns> [name=ev]")
	}
	s := sc.s
	b := s.newBatch(rest[0], kindEvent)
	name := "ev"
	if v := kv["name"]; v != "" {
		name = v
	}
	if name == "ev" {
		b.triggers = s.cfg.World.Triggers
	}
	m := s.newMsg(actors.OpEvent, rest[0], "producer", &api.EventRequest{Name: name, Payload: json.RawMessage(fmt.Sprintf(`{"e":%d}`, b.id))})
	m.batch, b.msg = b, m
	s.send(m)
	return nil
}

// jobID resolves a job as the trace names it (j3, or a client id).
func (sc *Script) jobID(ref string) string {
	for id, a := range sc.s.aliases {
		if a == ref {
			return id
		}
	}
	return ref
}

func (sc *Script) replay(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: replay <ns> <job> [<job>]")
	}
	s := sc.s
	b := s.newBatch(args[0], kindReplay)
	for _, ref := range args[1:] {
		b.replayIDs = append(b.replayIDs, sc.jobID(ref))
	}
	m := s.newMsg(actors.OpReplay, args[0], "admin", &api.ReplayRequest{IDs: b.replayIDs})
	m.batch, b.msg = b, m
	s.send(m)
	return nil
}

func (sc *Script) worker(name string) (*scriptWorker, error) {
	w := sc.workers[name]
	if w == nil {
		return nil, fmt.Errorf("no worker %s (claim first)", name)
	}
	return w, nil
}

func (sc *Script) claim(args []string) error {
	kv, rest := opts(args)
	if len(rest) != 2 {
		return fmt.Errorf("usage: claim <worker> <ns> [options]")
	}
	name, ns := rest[0], rest[1]
	w := sc.workers[name]
	if w == nil {
		w = &scriptWorker{name: name, ns: ns}
		sc.workers[name] = w
	}
	req := &api.ClaimRequest{Queues: sc.s.cfg.World.Queues, Max: 1, LeaseMS: 30000, Worker: name}
	if v := kv["max"]; v != "" {
		req.Max, _ = strconv.Atoi(v)
	}
	if v := kv["wait"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		req.WaitMS = d.Milliseconds()
	}
	if v := kv["lease"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		req.LeaseMS = d.Milliseconds()
	}
	if v := kv["queues"]; v != "" {
		req.Queues = strings.Split(v, ",")
	}
	m := sc.s.newMsg(actors.OpClaim, ns, name, req)
	m.timeout = time.Duration(req.WaitMS)*time.Millisecond + 3*time.Second
	m.onReply = func(body any, err *api.Error) {
		if rep, ok := body.(api.ClaimReply); ok && err == nil {
			w.held = append(w.held, rep.Jobs...)
		}
	}
	sc.s.send(m)
	return nil
}

func (sc *Script) heldJob(w *scriptWorker, ref string) (api.Job, error) {
	if len(w.held) == 0 {
		return api.Job{}, fmt.Errorf("%s holds no job", w.name)
	}
	if ref == "" {
		return w.held[0], nil
	}
	id := sc.jobID(ref)
	for _, j := range w.held {
		if j.ID == id {
			return j, nil
		}
	}
	return api.Job{}, fmt.Errorf("%s does not hold %s", w.name, ref)
}

func (sc *Script) finish(cmd string, args []string) error {
	kv, rest := opts(args)
	if len(rest) != 1 {
		return fmt.Errorf("usage: %s <worker> [job=<job>] [attempt=yes] [keep=yes]", cmd)
	}
	w, err := sc.worker(rest[0])
	if err != nil {
		return err
	}
	j, err := sc.heldJob(w, kv["job"])
	if err != nil {
		return err
	}
	var attempt int64
	if kv["attempt"] == "yes" {
		attempt = j.Attempt
	}
	var m *msgRec
	if cmd == "ack" {
		m = sc.s.newMsg(actors.OpAck, w.ns, w.name, &api.AckRequest{ID: j.ID, Attempt: attempt})
	} else {
		req := &api.NackRequest{ID: j.ID, Error: "boom", Attempt: attempt}
		if kv["retry"] == "false" {
			f := false
			req.Retry = &f
		}
		m = sc.s.newMsg(actors.OpNack, w.ns, w.name, req)
	}
	m.attempt = j.Attempt
	if kv["keep"] != "yes" { // keep=yes: the worker may send it again
		w.held = slices.DeleteFunc(w.held, func(h api.Job) bool { return h.ID == j.ID })
	}
	sc.s.send(m)
	return nil
}

func (sc *Script) heartbeat(args []string) error {
	kv, rest := opts(args)
	if len(rest) != 1 {
		return fmt.Errorf("usage: heartbeat <worker> [lease=<d>]")
	}
	w, err := sc.worker(rest[0])
	if err != nil {
		return err
	}
	lease := int64(30000)
	if v := kv["lease"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		lease = d.Milliseconds()
	}
	var ids []string
	for _, j := range w.held {
		ids = append(ids, j.ID)
	}
	sc.s.send(sc.s.newMsg(actors.OpHeartbeat, w.ns, w.name, &api.HeartbeatRequest{IDs: ids, LeaseMS: lease}))
	return nil
}

func (sc *Script) crash(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: crash <worker>")
	}
	w, err := sc.worker(args[0])
	if err != nil {
		return err
	}
	var ids []string
	for _, j := range w.held {
		ids = append(ids, j.ID)
	}
	sc.s.logf("%s crash holding %s", w.name, sc.s.aliasList(ids))
	w.held = nil
	return nil
}

func (sc *Script) run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: run <duration>")
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return err
	}
	sc.s.runUntil(sc.s.now.Add(d))
	return nil
}

func (sc *Script) node(name string) (*node, error) {
	for _, n := range sc.s.nodes {
		if n.name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no node %s", name)
}

func (sc *Script) restart(args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: restart <node> [graceful]")
	}
	n, err := sc.node(args[0])
	if err != nil {
		return err
	}
	sc.s.restartNode(n, len(args) > 1 && args[1] == "graceful")
	return nil
}

func (sc *Script) move(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: move <ns> <node>")
	}
	n, err := sc.node(args[1])
	if err != nil {
		return err
	}
	sc.s.move(args[0], n)
	return nil
}

func (sc *Script) fault(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: fault before|after|mid|slow:<d>|read <op>")
	}
	f := scriptedFault{op: args[1]}
	switch k, v, _ := strings.Cut(args[0], ":"); k {
	case "before":
		f.kind = faultBefore
	case "after":
		f.kind = faultAfter
	case "mid":
		f.kind = faultMid
	case "read":
		f.kind = faultRead
	case "slow":
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		f.kind, f.slow = faultSlow, d
	default:
		return fmt.Errorf("fault kind %q", args[0])
	}
	sc.s.flt.next = append(sc.s.flt.next, f)
	return nil
}

func (sc *Script) counts(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: counts <ns>")
	}
	ns := args[0]
	c, err := sc.s.db.JobCount(context.Background(), ns)
	if err != nil {
		return err
	}
	actor := "no actor"
	if sa := sc.s.owner[ns].actors[ns]; sa != nil {
		actor = fmt.Sprintf("%s#%d %s", ns, sa.inc, sc.s.countsLine(sa))
	}
	sc.printf("%s: store pending=%d running=%d completed=%d dead=%d; actor %s", ns, c.Pending, c.Running, c.Completed, c.Dead, actor)
	return nil
}

func (sc *Script) jobs(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: jobs <ns>")
	}
	jobs, err := sc.s.db.JobList(context.Background(), store.JobListParams{Namespace: args[0]})
	if err != nil {
		return err
	}
	slices.Reverse(jobs)
	for _, j := range jobs {
		extra := ""
		if j.Shed {
			extra += " shed"
		}
		if j.Status == api.StatusPending && j.RunAt.After(sc.s.now) {
			extra += " run_at=+" + fmtDur(j.RunAt.Sub(epoch))
		}
		if j.Status == api.StatusRunning {
			extra += " lease=+" + fmtDur(j.LeaseUntil.Sub(epoch))
		}
		if j.UniqueKey != "" {
			extra += " unique=" + j.UniqueKey
		}
		if j.DebounceKey != "" {
			extra += " debounce=" + j.DebounceKey
		}
		if j.Error != "" {
			extra += fmt.Sprintf(" error=%q", j.Error)
		}
		sc.printf("%s %s/%s %s attempt=%d%s", sc.s.alias(j.ID), j.Queue, j.Task, j.Status, j.Attempt, extra)
	}
	if len(jobs) == 0 {
		sc.printf("no jobs")
	}
	return nil
}
