package simtest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cluster"
	"github.com/flexiq/flexiq/cluster/clustertest"
	"github.com/flexiq/flexiq/store"
)

// Cluster mode (Config.Cluster): several nodes share one store as on
// PostgreSQL or Redis (docs/cluster.md). Each node runs its own cluster.Cluster on
// the simulated clock over one shared ClusterStore model (leaseModel), its
// actors get their fences from it (actors.Deps.Fences), and a fence layer
// over the job store refuses a write whose fence is stale, as the real
// backends do in the write's transaction or script.
//
//	actor → [Config.WrapStore] → fenceStore → faultStore → recStore → SQLite
//
// A client's call reaches a random live node, which passes it to the
// namespace's owner as its cluster.Route says (forwarding); an actor that
// answers "moved" has its call routed again. Chaos: a node joins, leaves
// (cluster.Leave, its actors drained under their fences), is killed (it
// stops ticking and takes no calls, but its actors step on with their old
// fences for a while — the stale owner — then die with what they held),
// and bus cuts (a node's ticks and forwarded calls are dropped for a while).

// ClusterConfig is the cluster of a world.
type ClusterConfig struct {
	// TTL is the membership and lease TTL (cluster.Config.TTL); Tick how
	// often each node heartbeats and renews.
	TTL, Tick time.Duration
	// Mean intervals of kills, graceful leaves, joins (of a node that is
	// down) and bus cuts; 0 never.
	KillEvery, LeaveEvery, JoinEvery, CutEvery time.Duration
	// CutMax bounds a bus cut; ZombieMax how long a killed node's actors
	// step on.
	CutMax, ZombieMax time.Duration
	// SkewMax: each node's clock (its cluster view's, which times its
	// leases) is off the simulation's by a fixed amount within
	// ±SkewMax, drawn from the seed and the node's name. A lease's holder
	// stops acting TTL/4 before it expires, so skews within TTL/8 of the
	// simulation's keep one leader; RandomClusterConfig stays within TTL/10.
	SkewMax time.Duration
	// LeaseFaults is the chance that a node's call to the shared lease
	// store fails: half of them before the store acted, half after (the
	// answer lost, the write made), as a store round trip can.
	LeaseFaults float64
	// JoinWait is how long a booting node waits for a route to every
	// live member (cluster.Config.JoinWait). A node reaches another on
	// the bus when both are up and neither is cut off.
	JoinWait time.Duration

	// Planted bugs (mutation tests only).
	noFence    bool // the store does not check fences
	keepCounts bool // actors keep their counts across a take-over (no reload, no eviction)
	noEvict    bool // a node keeps the actors of namespaces it lost (the reload alone must cover)
	ackLocal   bool // acks, nacks and heartbeats go to the local actor, not the owner
	// grantOnFault: an acquire that failed before the store acted comes
	// back as if every lease asked for were granted, what a node that
	// took a failed renewal for a good one would believe.
	grantOnFault bool
}

// Invariants of cluster mode.
const (
	// InvStaleWrite: no job write lands unless its fence names the
	// namespace's lease as held now by the writer at the writer's epoch;
	// a clustered node writes nothing unfenced.
	InvStaleWrite = "stale-write"
	// InvRouted: no client is told its namespace moved: every node passes
	// a call on to the owner.
	InvRouted = "routed"
	// InvSettled: every claimed job is eventually acked, retried or dead:
	// at the end nothing is running on a lease that ran out long before.
	InvSettled = "claim-settled"
	// InvOneLeader: at no instant do two live nodes each believe they
	// lead maintenance (cluster.Cluster.IsLeader, on each node's own
	// clock): retention, the auto-retry sweep and periodic fires run once.
	InvOneLeader = "one-leader"
)

// RandomClusterConfig draws a clustered world from seed: RandomConfig's
// clients and faults on 2–3 nodes writing call by call, with cluster chaos
// instead of restarts and moves.
func RandomClusterConfig(seed uint64, scale float64) Config {
	c := RandomConfig(seed, scale)
	r := rand.New(rand.NewPCG(seed, 0xc105))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	c.Nodes = 2 + r.IntN(2)
	c.StepTx = false // a shared store writes call by call
	c.Chaos.RestartEvery, c.Chaos.MoveEvery = 0, 0
	cc := &ClusterConfig{
		TTL:       []time.Duration{time.Second, 2 * time.Second}[r.IntN(2)],
		Tick:      250 * time.Millisecond,
		CutMax:    between(time.Second, 4*time.Second),
		ZombieMax: between(500*time.Millisecond, 4*time.Second),
	}
	if r.IntN(4) != 0 {
		cc.KillEvery = between(2*time.Second, 8*time.Second)
	}
	if r.IntN(2) == 0 {
		cc.LeaveEvery = between(3*time.Second, 10*time.Second)
	}
	cc.JoinEvery = between(time.Second, 4*time.Second)
	if r.IntN(3) != 0 {
		cc.CutEvery = between(2*time.Second, 8*time.Second)
	}
	if r.IntN(2) == 0 {
		cc.SkewMax = between(0, cc.TTL/10)
	}
	if r.IntN(3) == 0 {
		cc.LeaseFaults = 0.02 + 0.08*r.Float64()
	}
	cc.JoinWait = between(cc.TTL, 4*cc.TTL)
	c.Cluster = cc
	c.Drain = c.Load.LeaseMax + cc.CutMax + 3*cc.TTL + 4*time.Second
	return c
}

func (c *ClusterConfig) String() string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf(" cluster=ttl%s kill%s leave%s join%s cut%s/%s zombie%s skew%s leasefaults=%.2f joinwait%s", c.TTL, c.KillEvery, c.LeaveEvery, c.JoinEvery, c.CutEvery, c.CutMax, c.ZombieMax, c.SkewMax, c.LeaseFaults, c.JoinWait)
}

// ---------------------------------------------------------------------------
// The shared ClusterStore

// leaseModel is the shared ClusterStore (clustertest.MemStore); its Mu is
// also what the fence layer holds across its check and its write: the
// model of PostgreSQL's FOR KEY SHARE on the lease row, or of the Redis
// script.
type leaseModel struct {
	*clustertest.MemStore
}

func newLeaseModel() *leaseModel { return &leaseModel{clustertest.NewMemStore()} }

// validLocked says whether f may write ns now: the lease it names is ns's
// and is held by f's holder at f's epoch. Called with mu held (or from the
// simulation's one goroutine, inside the fence layer's critical section).
func (m *leaseModel) validLocked(ns string, f *store.Fence) (bool, string) {
	name := cluster.LeaseName(cluster.PartitionOf(ns))
	l := m.Leases[name]
	switch {
	case f == nil:
		return false, fmt.Sprintf("no fence (lease %s held by %q at epoch %d)", name, l.Holder, l.Epoch)
	case f.Lease != name:
		return false, fmt.Sprintf("fence names %s, %s's lease is %s", f.Lease, ns, name)
	case l.Holder != f.Holder || l.Epoch != f.Epoch:
		return false, fmt.Sprintf("fence %s@%d, lease %s held by %q at epoch %d", f.Holder, f.Epoch, name, l.Holder, l.Epoch)
	}
	return true, ""
}

// leaseStore is the shared lease store as node n reaches it: the model
// itself, or with ClusterConfig.LeaseFaults a layer that fails calls.
func (s *Sim) leaseStore(n *node) store.ClusterStore {
	if s.cfg.Cluster.LeaseFaults <= 0 {
		return s.leases
	}
	if s.lrng == nil {
		// A source of its own: the world's and the job store's faults
		// stay as they were.
		s.lrng = rand.New(rand.NewPCG(s.cfg.Seed, 0x1ea5e))
	}
	return faultyLeases{leaseModel: s.leases, s: s, node: n.name}
}

// faultyLeases fails a node's lease store calls at ClusterConfig.LeaseFaults:
// before the store acted, or after it (the write made, its answer lost).
type faultyLeases struct {
	*leaseModel
	s    *Sim
	node string
}

var errLeaseFault = errors.New("simulated lease store failure")

// fault says whether op fails, and whether after the store acted.
func (f faultyLeases) fault(op string) (fails, after bool) {
	r := f.s.lrng.Float64()
	if r >= f.s.cfg.Cluster.LeaseFaults {
		return false, false
	}
	after = r < f.s.cfg.Cluster.LeaseFaults/2
	f.s.stat("lease store fault " + map[bool]string{false: "before", true: "after"}[after])
	f.s.logf("%s %s fails %s the store acted", f.node, op, map[bool]string{false: "before", true: "after"}[after])
	return true, after
}

// faulty runs call, a write to the lease store, under fault's verdict:
// failed before it (nothing written) or after it (written, answer lost).
func faulty[T any](f faultyLeases, op string, call func() (T, error)) (T, error) {
	var zero T
	fails, after := f.fault(op)
	if fails && !after {
		return zero, errLeaseFault
	}
	out, err := call()
	if fails {
		return zero, errLeaseFault
	}
	return out, err
}

func (f faultyLeases) MemberHeartbeat(ctx context.Context, p store.MemberHeartbeatParams) ([]store.Member, error) {
	return faulty(f, "heartbeat", func() ([]store.Member, error) { return f.leaseModel.MemberHeartbeat(ctx, p) })
}

func (f faultyLeases) MemberLeave(ctx context.Context, node string) error {
	_, err := faulty(f, "leave", func() (struct{}, error) { return struct{}{}, f.leaseModel.MemberLeave(ctx, node) })
	return err
}

func (f faultyLeases) LeaseAcquire(ctx context.Context, p store.LeaseAcquireParams) ([]store.Lease, error) {
	out, err := faulty(f, "acquire", func() ([]store.Lease, error) { return f.leaseModel.LeaseAcquire(ctx, p) })
	if errors.Is(err, errLeaseFault) && f.s.cfg.Cluster.grantOnFault {
		out = out[:0]
		for _, name := range p.Names {
			out = append(out, store.Lease{Name: name, Holder: p.Holder, Epoch: 1, Expires: p.Now.Add(p.TTL)})
		}
		return out, nil
	}
	return out, err
}

func (f faultyLeases) LeaseRelease(ctx context.Context, p store.LeaseReleaseParams) error {
	_, err := faulty(f, "release", func() (struct{}, error) { return struct{}{}, f.leaseModel.LeaseRelease(ctx, p) })
	return err
}

func (f faultyLeases) LeaseList(ctx context.Context) ([]store.Lease, error) {
	if fails, _ := f.fault("lease list"); fails {
		return nil, errLeaseFault
	}
	return f.leaseModel.LeaseList(ctx)
}

// ---------------------------------------------------------------------------
// The fence layer over the job store

// fenceStore refuses a write whose fence is stale with store.ErrFenced,
// writing nothing; the check and the write hold the lease model's lock, so
// no lease changes between them.
type fenceStore struct {
	actors.Store
	s *Sim
}

func (f *fenceStore) fenced(op, ns string, fence *store.Fence) bool {
	if f.s.cfg.Cluster.noFence {
		return false
	}
	ok, why := f.s.leases.validLocked(ns, fence)
	if ok {
		return false
	}
	f.s.stat("write fenced")
	f.s.logf("  fenced %s %s: %s", op, ns, why)
	if st := f.s.cur; st != nil {
		st.storeErr = true
	}
	return true
}

func (f *fenceStore) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	f.s.leases.Mu.Lock()
	defer f.s.leases.Mu.Unlock()
	if f.fenced("enqueue", p.Namespace, p.Fence) {
		return nil, store.ErrFenced
	}
	return f.Store.JobEnqueueMany(ctx, p)
}

func (f *fenceStore) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	f.s.leases.Mu.Lock()
	defer f.s.leases.Mu.Unlock()
	if f.fenced("claim", p.Namespace, p.Fence) {
		return nil, store.ErrFenced
	}
	return f.Store.JobClaimMany(ctx, p)
}

func (f *fenceStore) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	f.s.leases.Mu.Lock()
	defer f.s.leases.Mu.Unlock()
	if f.fenced("update", p.Namespace, p.Fence) {
		return nil, store.ErrFenced
	}
	return f.Store.JobUpdateMany(ctx, p)
}

// checkLanded is called by the recording layer for every job write that
// reached the store: in cluster mode it must carry a fence valid now.
func (s *Sim) checkLanded(op, ns string, f *store.Fence) {
	if s.cfg.Cluster == nil {
		return
	}
	if ok, why := s.leases.validLocked(ns, f); !ok {
		s.violate(InvStaleWrite, "a %s of %s landed: %s", op, ns, why)
	}
}

// ---------------------------------------------------------------------------
// Nodes

type nodeState int

const (
	nodeUp nodeState = iota
	nodeDead
	nodeLeft
)

// clusterNode is a node's part of the cluster.
type clusterNode struct {
	cl       *cluster.Cluster
	state    nodeState
	cutUntil time.Time
	gen      int // invalidates the tick loop of an earlier boot
	// zombieUntil: a killed node's actors step on until then.
	zombieUntil time.Time
	// skew is how far the node's clock is off the simulation's.
	skew time.Duration
}

// fenceRec is a node's actors.Fences: its cluster's answer, recorded for
// the step that asks. With keepCounts it hands an actor the same fence
// value updated in place, so the actor never sees its epoch change.
type fenceRec struct {
	s    *Sim
	n    *node
	cl   *cluster.Cluster
	keep map[string]*store.Fence
}

func (r *fenceRec) Fence(ns string) (*store.Fence, bool) {
	f, ok := r.cl.Fence(ns)
	if ok && r.s.cfg.Cluster.keepCounts {
		p := r.keep[ns]
		if p == nil {
			p = &store.Fence{}
			r.keep[ns] = p
		}
		*p = *f
		f = p
	}
	if st := r.s.cur; st != nil && st.sa.n == r.n && st.ns == ns {
		st.fenceAsked = true
		if ok {
			st.fence = f
		}
	}
	return f, ok
}

// bootCluster gives n (booting or rebooting) a fresh cluster view and its
// actors their fences; a node up ticks at once and then every Tick.
func (s *Sim) bootCluster(n *node) {
	cc := s.cfg.Cluster
	if n.cn == nil {
		n.cn = &clusterNode{skew: s.skewOf(n.name)}
		if n.cn.skew != 0 {
			s.logf("%s's clock is %s off", n.name, n.cn.skew)
		}
	}
	cn := n.cn
	cn.gen++
	gen := cn.gen
	cfg := cluster.Config{
		Node: n.name, Maintenance: true, Store: s.leaseStore(n), Tick: cc.Tick, TTL: cc.TTL,
		Now: func() time.Time { return s.now.Add(cn.skew) }, Log: slog.New(&traceHandler{s: s, node: n.name}),
		OnLost: func(leases []string) {
			if n.cn.gen == gen {
				s.onLost(n, leases)
			}
		},
	}
	if cc.JoinWait > 0 {
		// A booting node takes partitions once it reaches every live
		// member, or after JoinWait.
		cfg.JoinWait = cc.JoinWait
		cfg.Reachable = func(peer string) bool { return s.reachable(n, peer) }
	}
	cl := cluster.New(cfg)
	cn.cl = cl
	n.deps.Fences = &fenceRec{s: s, n: n, cl: cl, keep: map[string]*store.Fence{}}
	if cn.state == nodeUp {
		s.tickLoop(n, gen)
	}
}

func (s *Sim) tickLoop(n *node, gen int) {
	cn := n.cn
	if cn.gen != gen || cn.state != nodeUp || s.halted {
		return
	}
	if s.now.Before(cn.cutUntil) {
		s.stat("cluster tick cut")
	} else {
		cn.cl.Tick(context.Background())
		s.checkOneLeader()
	}
	s.after(s.cfg.Cluster.Tick, func() { s.tickLoop(n, gen) })
}

// skewOf is the fixed skew of node name's clock: within ±SkewMax, from the
// seed and the name alone, so the world's other draws stay as they were.
func (s *Sim) skewOf(name string) time.Duration {
	max := s.cfg.Cluster.SkewMax
	if max <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	r := rand.New(rand.NewPCG(s.cfg.Seed, h.Sum64()))
	return time.Duration(r.Int64N(int64(2*max)+1)) - max
}

// checkOneLeader checks InvOneLeader after a tick: a tick is when a node
// takes the leader lease. A node that is down leads nothing, whatever it
// last believed.
func (s *Sim) checkOneLeader() {
	var leaders []string
	for _, n := range s.nodes {
		if n.cn != nil && n.cn.state == nodeUp && n.cn.cl.IsLeader() {
			leaders = append(leaders, n.name)
		}
	}
	if len(leaders) > 1 {
		s.violate(InvOneLeader, "%s each lead maintenance", strings.Join(leaders, " and "))
	}
}

// onLost evicts n's actors of the partitions it lost (node.startCluster's
// OnLost): each answers what it holds, then goes.
func (s *Sim) onLost(n *node, leases []string) {
	s.logf("%s lost %s", n.name, strings.Join(sortedStrings(leases), ","))
	cc := s.cfg.Cluster
	if cc.keepCounts || cc.noEvict {
		return
	}
	lost := map[string]bool{}
	for _, l := range leases {
		lost[l] = true
	}
	for _, ns := range s.sortedActors(n) {
		if sa := n.actors[ns]; sa != nil && lost[cluster.LeaseName(cluster.PartitionOf(ns))] {
			s.stat("cluster evict")
			s.stopActor(sa)
		}
	}
}

func sortedStrings(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return out
}

func (s *Sim) nodeByName(name string) *node {
	for _, n := range s.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// reachable says n's bus reaches peer now: both are up, neither cut off.
func (s *Sim) reachable(n *node, peer string) bool {
	p := s.nodeByName(peer)
	if p != nil && p.cn != nil && p.cn.state == nodeUp && !s.now.Before(p.cn.cutUntil) && !s.now.Before(n.cn.cutUntil) {
		return true
	}
	s.stat("no route to a live member")
	return false
}

func (s *Sim) upNodes() []*node {
	var out []*node
	for _, n := range s.nodes {
		if n.cn.state == nodeUp {
			out = append(out, n)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Routing

// clusterDeliver is a client's call reaching a random live node.
func (s *Sim) clusterDeliver(m *msgRec) {
	up := s.upNodes()
	if len(up) == 0 {
		s.logf("  no node up for m%d", m.id)
		return
	}
	s.route(m, up[s.rng.IntN(len(up))], 0)
}

func isMoved(err *api.Error) bool {
	return err != nil && err.Code == api.CodeUnavailable && strings.Contains(err.Message, "is moving between nodes")
}

// route has n take m: its own actor when it owns m's namespace, else the
// owner's node (forwarding); with no owner in sight, n looks again after a
// tick, as a node waits for cluster.Changed.
func (s *Sim) route(m *msgRec, n *node, hops int) {
	if m.timedOut || m.delivered || s.halted {
		return
	}
	cn := n.cn
	if cn.state == nodeDead {
		s.stat("call lost: node dead")
		s.logf("  m%d lost: %s is dead", m.id, n.name)
		return
	}
	if s.cfg.Cluster.ackLocal {
		switch m.op {
		case actors.OpAck, actors.OpNack, actors.OpHeartbeat:
			m.local = true
			s.deliverTo(n, m)
			return
		}
	}
	owner, _, mine := cn.cl.Route(m.ns)
	if mine && cn.state == nodeUp {
		s.deliverTo(n, m)
		return
	}
	to := s.nodeByName(owner)
	if to == nil || to == n || hops >= 3 {
		s.stat("call waits for an owner")
		s.logf("  m%d at %s waits for an owner of %s (route says %q)", m.id, n.name, m.ns, owner)
		s.after(s.cfg.Cluster.Tick, func() { s.route(m, n, 0) })
		return
	}
	if s.now.Before(cn.cutUntil) || s.now.Before(to.cn.cutUntil) {
		s.stat("call lost: bus cut")
		s.logf("  m%d lost: bus cut between %s and %s", m.id, n.name, to.name)
		return
	}
	s.stat("call forwarded")
	s.logf("  m%d %s forwards to %s", m.id, n.name, to.name)
	s.after(s.busDelay(), func() { s.route(m, to, hops+1) })
}

// clusterReply intercepts an actor's "moved" answer: the node routes the
// call again (true). An answer of "moved" that reaches a client breaks
// InvRouted.
func (s *Sim) clusterReply(m *msgRec, err *api.Error) bool {
	if !isMoved(err) {
		return false
	}
	if m.local {
		s.violate(InvRouted, "m%d (%s %s) refused by %s, which does not own %s: %s", m.id, m.op, m.ns, m.at.name, m.ns, err.Message)
		return false
	}
	s.stat("moved: routed again")
	m.moved = true // answered by routing it again, not held
	n := m.at
	s.logf("  m%d moved at %s: routed again", m.id, n.name)
	s.after(s.cfg.Cluster.Tick, func() { s.route(m, n, 0) })
	return true
}

// stepOwns says whether st's actor wrote as the namespace's owner: the
// fence its node gave it this step is the lease as the store holds it.
// Counts and lease checks apply to the owner only; a stale owner's
// writes are refused, and its memory may be behind.
func (s *Sim) stepOwns(st *stepCtx) bool {
	if s.cfg.Cluster == nil {
		return true
	}
	if st.fence == nil {
		return false
	}
	ok, _ := s.leases.validLocked(st.ns, st.fence)
	return ok
}

// ---------------------------------------------------------------------------
// Chaos

func (s *Sim) clusterChaos() {
	cc := s.cfg.Cluster
	s.chaos(cc.KillEvery, func() {
		up := s.upNodes()
		if len(up) < 2 {
			return
		}
		s.kill(up[s.rng.IntN(len(up))])
	})
	s.chaos(cc.LeaveEvery, func() {
		up := s.upNodes()
		if len(up) < 2 {
			return
		}
		s.leave(up[s.rng.IntN(len(up))])
	})
	s.chaos(cc.JoinEvery, func() {
		var down []*node
		for _, n := range s.nodes {
			if n.cn.state != nodeUp && !s.now.Before(n.cn.zombieUntil) {
				down = append(down, n)
			}
		}
		if len(down) > 0 {
			s.join(down[s.rng.IntN(len(down))])
		}
	})
	s.chaos(cc.CutEvery, func() {
		up := s.upNodes()
		n := up[s.rng.IntN(len(up))]
		d := time.Duration(s.rng.Int64N(int64(cc.CutMax))) + time.Millisecond
		n.cn.cutUntil = s.now.Add(d)
		s.stat("bus cut")
		s.logf("%s bus cut for %s", n.name, d)
	})
	// After the run, a claim per namespace reaches its owner (as workers
	// polling would), so the owner's actor exists and expires what ran out.
	probe := s.end.Add(cc.CutMax + 2*cc.TTL + time.Second)
	s.at(probe, func() {
		for _, ns := range s.cfg.Namespaces {
			m := s.newMsg(actors.OpClaim, ns, "probe", &api.ClaimRequest{Queues: []string{"probe"}, Max: 1, LeaseMS: 1000, Worker: "probe"})
			s.send(m)
		}
	})
}

// kill stops n at once: no more ticks or calls; its actors step on with
// their old fences until zombieUntil, then die with what they hold.
func (s *Sim) kill(n *node) {
	cc := s.cfg.Cluster
	s.stat("node kill")
	n.cn.state = nodeDead
	n.cn.gen++
	d := time.Duration(s.rng.Int64N(int64(cc.ZombieMax))) + time.Millisecond
	n.cn.zombieUntil = s.now.Add(d)
	s.logf("%s killed (%d actors step on for %s)", n.name, len(n.actors), d)
	actorsThen := n.actors
	s.after(d, func() {
		s.logf("%s process gone", n.name)
		for _, ns := range sortedKeys(actorsThen) {
			sa := actorsThen[ns]
			if sa.gone {
				continue
			}
			sa.gone, sa.lost = true, true
			sa.loseWrite(s)
			for _, m := range sa.inbox {
				if !m.internal {
					s.logf("  lost %s", m.describe(s))
				}
			}
		}
		clear(actorsThen)
	})
}

// leave hands n's namespaces over (cluster.Leave): its actors answer what
// they hold under their still valid fences, then its leases go.
func (s *Sim) leave(n *node) {
	s.stat("node leave")
	s.logf("%s leaves", n.name)
	n.cn.state = nodeLeft
	n.cn.gen++
	_ = n.cn.cl.Leave(context.Background(), func(context.Context) {
		for _, ns := range s.sortedActors(n) {
			s.stopActor(n.actors[ns])
		}
	})
	s.logf("%s left", n.name)
}

// join boots n (again): a fresh cache, no actors, a fresh cluster view.
func (s *Sim) join(n *node) {
	s.stat("node join")
	s.logf("%s joins", n.name)
	n.cn.state = nodeUp
	s.bootNode(n)
}

// checkSettled: at the end, nothing runs on a lease that ran out long ago.
func (s *Sim) checkSettled() {
	if s.cfg.Cluster == nil || s.halted {
		return
	}
	limit := s.now.Add(-(s.cfg.Cluster.TTL + 2*time.Second))
	for _, ns := range s.m.order {
		for _, j := range s.m.ns[ns].order {
			if j.status == api.StatusRunning && j.leaseUntil.Before(limit) {
				s.violate(InvSettled, "%s: %s still running at the end; its lease ran out at +%s", ns, s.alias(j.id), fmtDur(j.leaseUntil.Sub(epoch)))
				return
			}
		}
	}
}
