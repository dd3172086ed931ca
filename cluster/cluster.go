// Package cluster makes several nodes on one shared store one system
// (docs/cluster.md): who is alive, which node owns each namespace, and which node
// leads maintenance.
//
// Namespaces hash onto a fixed number of partitions. Each partition's
// desired owner is chosen by rendezvous hashing over the live members, so
// a member that joins or dies moves only its share. Who *may* write is
// decided by the store: a node acts for a partition only while it holds
// the partition's lease (store.ClusterStore), and every job write carries
// the lease's epoch as a fence the store checks in the same transaction,
// so a slow or partitioned old owner's writes are refused.
//
// The decision of one tick is a pure function (Plan) of the members, the
// leases and the time, returning what to acquire and release; Cluster's
// loop performs it against the store.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flexiq/flexiq/store"
)

// Partitions is how many partitions namespaces hash onto.
const Partitions = 64

// LeaderLease names the maintenance leader's lease.
const LeaderLease = "maintenance"

// PartitionOf is ns's partition.
func PartitionOf(ns string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ns))
	return int(h.Sum32() % Partitions)
}

// leaseNames are the partitions' lease names, made once: Route runs on
// every call.
var leaseNames = func() (names [Partitions]string) {
	for p := range names {
		names[p] = "ns/" + strconv.Itoa(p)
	}
	return names
}()

// partitionOfLease maps a partition's lease name back to the partition.
var partitionOfLease = func() map[string]int {
	m := make(map[string]int, Partitions)
	for p, name := range leaseNames {
		m[name] = p
	}
	return m
}()

// PartitionOfLease is the partition whose lease is name; ok is false for
// any other lease (the maintenance lease).
func PartitionOfLease(name string) (p int, ok bool) {
	p, ok = partitionOfLease[name]
	return p, ok
}

// LeaseName is the lease of partition p.
func LeaseName(p int) string { return leaseNames[p] }

// score is rendezvous hashing's weight of node for partition p.
func score(node string, p int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	_, _ = h.Write([]byte{0, byte(p), byte(p >> 8)})
	// fnv's low bits mix poorly for short inputs: finish with a mixer.
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb3f98af4d3c1
	x ^= x >> 33
	return x
}

// DesiredOwner is the member that should own partition p among ready
// members ("" when there is none).
func DesiredOwner(members []store.Member, p int) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		if !m.Info.Ready {
			continue
		}
		if s := score(m.Node, p); best == "" || s > bestScore || (s == bestScore && m.Node < best) {
			best, bestScore = m.Node, s
		}
	}
	return best
}

// Plan is what one tick does: the leases to take or renew and those to
// give up.
type Plan struct {
	Acquire []string
	Release []string
}

// PlanTick decides a tick for node: it acquires (or renews) the
// partitions it should own, and the leader lease when it may lead and
// either holds it or nobody live does; it releases what it holds and
// should not own once the desired owner is live (a graceful hand-over).
func PlanTick(node string, maintenance bool, members []store.Member, held map[string]bool, leader string) Plan {
	var p Plan
	for part := 0; part < Partitions; part++ {
		name := LeaseName(part)
		switch owner := DesiredOwner(members, part); {
		case owner == node:
			p.Acquire = append(p.Acquire, name)
		case held[name] && owner != "":
			p.Release = append(p.Release, name)
		case held[name]:
			// No one else to take it: keep renewing.
			p.Acquire = append(p.Acquire, name)
		}
	}
	if maintenance {
		live := false
		for _, m := range members {
			if m.Node == leader {
				live = true
			}
		}
		if held[LeaderLease] || leader == "" || !live {
			p.Acquire = append(p.Acquire, LeaderLease)
		}
	} else if held[LeaderLease] {
		p.Release = append(p.Release, LeaderLease)
	}
	return p
}

// Config configures a node's membership.
type Config struct {
	Node        string
	Maintenance bool
	Store       store.ClusterStore
	// Info reports what the node says of itself at each heartbeat
	// (Ready and Maintenance are set by Cluster).
	Info func() store.MemberInfo
	// Tick is how often the node heartbeats and renews (default 250 ms).
	Tick time.Duration
	// TTL is how long a heartbeat and a lease last (default 2 s): a dead
	// node's partitions move within about TTL + Tick.
	TTL time.Duration
	// Now is the clock.
	Now func() time.Time
	Log *slog.Logger
	// OnLost is told of partitions this node stopped owning (released,
	// expired or taken), so their actors stop.
	OnLost func(leases []string)
	// OnGained is told of the partitions this node took (or took again at
	// a new epoch) in a round, so it can wake their namespaces' actors:
	// a dead owner's claims then come back as their leases run out,
	// whether or not a call for the namespace arrives.
	OnGained func(partitions []int)
	// OnMembers is told, at each heartbeat, of every live member (this
	// node included), as the store returned them.
	OnMembers func(members []store.Member)
	// Reachable tells whether another member takes this node's calls on
	// the bus now (its embedded server has a route to it). A starting
	// node counts itself ready, and so takes partitions, only once every
	// live member is reachable, or JoinWait has passed: a call forwarded
	// before a route exists, or on one being replaced, can be lost.
	// After that a change is logged. Nil: every member is reachable (an
	// external NATS server, whose routes are its own).
	Reachable func(node string) bool
	// JoinWait bounds how long a starting node waits for its routes
	// (default 10 s); past it the node takes part anyway and says which
	// members it cannot reach.
	JoinWait time.Duration
}

// Cluster is one node's view of the cluster and its loop.
type Cluster struct {
	cfg Config

	mu      sync.Mutex
	members []store.Member
	leases  map[string]store.Lease
	// held are this node's leases and until when (this node's clock) it
	// may act on each: the store's expiry less a margin, counted from
	// before the acquire was sent, so the node stops acting before anyone
	// else may take over.
	held map[string]heldLease
	// joined says the node counts itself ready: its routes to the live
	// members were up (or JoinWait passed) at some tick. started is its
	// first tick (read and written by ticks only); unreachable the
	// members last found without a route, as logged.
	joined      bool
	started     time.Time
	unreachable []string
	// left is closed when Leave begins: from then on the node follows
	// the placement no more (Leaving).
	left chan struct{}
	kick chan struct{}
	// turn is held by a tick from start to end, and by Leave while it
	// marks the node leaving: a tick already under way when Leave begins
	// would otherwise install (and renew) the leases Leave just gave up,
	// and the node would act as their owner again with its actors stopped.
	turn chan struct{}
	// changed is closed (and replaced) after every tick: calls waiting
	// for their namespace's owner look again.
	changed chan struct{}
}

type heldLease struct {
	epoch int64
	until time.Time
}

// New returns a node's cluster view; Run drives it.
func New(cfg Config) *Cluster {
	if cfg.Tick <= 0 {
		cfg.Tick = 250 * time.Millisecond
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Info == nil {
		cfg.Info = func() store.MemberInfo { return store.MemberInfo{} }
	}
	if cfg.JoinWait <= 0 {
		cfg.JoinWait = 10 * time.Second
	}
	return &Cluster{cfg: cfg, leases: map[string]store.Lease{}, held: map[string]heldLease{}, joined: cfg.Reachable == nil, kick: make(chan struct{}, 1), turn: make(chan struct{}, 1), changed: make(chan struct{}), left: make(chan struct{})}
}

// Node is this node's id.
func (c *Cluster) Node() string { return c.cfg.Node }

// margin is how long before a lease's expiry the holder stops acting.
func (c *Cluster) margin() time.Duration { return c.cfg.TTL / 4 }

// Run ticks until ctx ends.
func (c *Cluster) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	for {
		c.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// Kick asks for a tick now (a request reached a partition this node
// should own and does not hold yet).
func (c *Cluster) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Tick heartbeats, then takes, renews and gives up leases as PlanTick
// says. A store error keeps the current leases until they run out.
func (c *Cluster) Tick(ctx context.Context) {
	select {
	case c.turn <- struct{}{}:
		defer func() { <-c.turn }()
	case <-ctx.Done():
		return
	}
	start := c.cfg.Now()
	info := c.cfg.Info()
	c.mu.Lock()
	leaving := isClosed(c.left)
	info.Ready = c.joined && !leaving
	c.mu.Unlock()
	info.Maintenance = c.cfg.Maintenance
	info.JobFormat = store.JobFormat
	if leaving {
		return
	}
	if c.started.IsZero() {
		c.started = start
	}
	members, err := c.cfg.Store.MemberHeartbeat(ctx, store.MemberHeartbeatParams{Node: c.cfg.Node, Info: info, Now: start, TTL: c.cfg.TTL})
	if err == nil && c.checkRoutes(start, members) {
		// Ready from this tick on: say so now rather than a tick later,
		// so this tick's placement counts this node.
		info.Ready = true
		members, err = c.cfg.Store.MemberHeartbeat(ctx, store.MemberHeartbeatParams{Node: c.cfg.Node, Info: info, Now: start, TTL: c.cfg.TTL})
	}
	if err != nil {
		c.cfg.Log.Warn("cluster heartbeat failed", "err", err)
		c.expire(c.cfg.Now())
		return
	}
	if c.cfg.OnMembers != nil {
		c.cfg.OnMembers(members)
	}
	all, err := c.cfg.Store.LeaseList(ctx)
	if err != nil {
		c.cfg.Log.Warn("cluster lease list failed", "err", err)
		c.expire(c.cfg.Now())
		return
	}
	leases := map[string]store.Lease{}
	leader := ""
	for _, l := range all {
		if l.Holder != "" && l.Expires.After(start) {
			leases[l.Name] = l
		}
	}
	if l, ok := leases[LeaderLease]; ok {
		leader = l.Holder
	}
	c.mu.Lock()
	held := map[string]bool{}
	for name := range c.held {
		held[name] = true
	}
	c.mu.Unlock()
	plan := PlanTick(c.cfg.Node, c.cfg.Maintenance, members, held, leader)

	var lost []string
	if len(plan.Release) > 0 {
		// Stop acting first, then let go: the next owner must find
		// nothing of ours in flight.
		c.mu.Lock()
		for _, name := range plan.Release {
			delete(c.held, name)
		}
		c.mu.Unlock()
		lost = append(lost, plan.Release...)
		if c.cfg.OnLost != nil {
			c.cfg.OnLost(plan.Release)
		}
		if err := c.cfg.Store.LeaseRelease(ctx, store.LeaseReleaseParams{Holder: c.cfg.Node, Names: plan.Release}); err != nil {
			c.cfg.Log.Warn("cluster lease release failed", "err", err)
		}
		for _, name := range plan.Release {
			delete(leases, name)
		}
	}
	var got []store.Lease
	if len(plan.Acquire) > 0 {
		got, err = c.cfg.Store.LeaseAcquire(ctx, store.LeaseAcquireParams{Holder: c.cfg.Node, Names: plan.Acquire, Now: start, TTL: c.cfg.TTL})
		if err != nil {
			c.cfg.Log.Warn("cluster lease acquire failed", "err", err)
			c.expire(c.cfg.Now())
			return
		}
	}
	until := start.Add(c.cfg.TTL - c.margin())
	c.mu.Lock()
	now := map[string]heldLease{}
	var gained []int
	for _, l := range got {
		old, ok := c.held[l.Name]
		if ok && old.epoch != l.Epoch {
			lost = append(lost, l.Name) // taken and retaken: what ran under the old epoch is stale
		}
		if p, isPartition := partitionOfLease[l.Name]; isPartition && (!ok || old.epoch != l.Epoch) {
			gained = append(gained, p)
		}
		now[l.Name] = heldLease{epoch: l.Epoch, until: until}
		leases[l.Name] = l
	}
	for name := range c.held {
		if _, ok := now[name]; !ok && !slices.Contains(plan.Release, name) {
			lost = append(lost, name)
		}
	}
	c.held = now
	c.members = members
	c.leases = leases
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	if len(lost) > 0 && c.cfg.OnLost != nil {
		c.cfg.OnLost(lost)
	}
	if len(gained) > 0 && c.cfg.OnGained != nil {
		c.cfg.OnGained(gained)
	}
}

// checkRoutes finds the live members this node cannot reach on the bus,
// logs when that changes, and reports whether the node became ready in
// this tick (see Config.Reachable).
func (c *Cluster) checkRoutes(now time.Time, members []store.Member) bool {
	if c.cfg.Reachable == nil {
		return false
	}
	var missing []string
	for _, m := range members {
		if m.Node != c.cfg.Node && !c.cfg.Reachable(m.Node) {
			missing = append(missing, m.Node)
		}
	}
	slices.Sort(missing)
	key := strings.Join(missing, ",")
	waited := now.Sub(c.started)
	c.mu.Lock()
	was := strings.Join(c.unreachable, ",")
	c.unreachable = missing
	joined := c.joined
	joins := !joined && (key == "" || waited >= c.cfg.JoinWait)
	c.joined = joined || joins
	c.mu.Unlock()
	switch {
	case joins && key == "":
		c.cfg.Log.Info("routes to every live member are up: taking part in placement", "members", len(members), "waited", waited.Round(time.Millisecond))
	case joins:
		c.cfg.Log.Warn("no route on the bus to some live members: taking part in placement anyway; calls for the namespaces they own will wait, then fail, until a route forms (check --routes and --cluster-listen on every node)",
			"unreachable", key, "waited", waited.Round(time.Millisecond))
	case !joined || key == was:
		// Waiting for the routes, or nothing changed.
	case key == "":
		c.cfg.Log.Info("routes to every live member are up again")
	default:
		c.cfg.Log.Warn("no route on the bus to some live members: calls for the namespaces they own wait, then fail", "unreachable", key)
	}
	return joins
}

// Unreachable are the live members this node found without a route at
// its last tick that looked (see Config.Reachable), in order.
func (c *Cluster) Unreachable() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.unreachable)
}

// expire drops the leases whose time has run out while the store could
// not be reached: the node stops acting for them.
func (c *Cluster) expire(now time.Time) {
	c.mu.Lock()
	var lost []string
	for name, h := range c.held {
		if !now.Before(h.until) {
			delete(c.held, name)
			lost = append(lost, name)
		}
	}
	c.mu.Unlock()
	if len(lost) > 0 && c.cfg.OnLost != nil {
		c.cfg.OnLost(lost)
	}
}

// Route says where ns's calls go: to this node (with the fence its writes
// carry), or to owner ("" when no node holds the namespace now).
func (c *Cluster) Route(ns string) (owner string, fence *store.Fence, mine bool) {
	name := LeaseName(PartitionOf(ns))
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.held[name]; ok && now.Before(h.until) {
		return c.cfg.Node, &store.Fence{Lease: name, Holder: c.cfg.Node, Epoch: h.epoch}, true
	}
	if l, ok := c.leases[name]; ok && l.Holder != c.cfg.Node && l.Expires.After(now) {
		return l.Holder, nil, false
	}
	members := c.members
	if isClosed(c.left) {
		members = slices.DeleteFunc(slices.Clone(members), func(m store.Member) bool { return m.Node == c.cfg.Node })
	}
	return DesiredOwner(members, PartitionOf(ns)), nil, false
}

// Owner is the node ns's calls go to; mine says it is this one.
func (c *Cluster) Owner(ns string) (string, bool) {
	owner, _, mine := c.Route(ns)
	return owner, mine
}

// Partition is ns's partition (PartitionOf).
func (c *Cluster) Partition(ns string) int { return PartitionOf(ns) }

// Partitions are the partitions this node holds and may act on now, in
// order.
func (c *Cluster) Partitions() []int {
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for p := range Partitions {
		if h, ok := c.held[leaseNames[p]]; ok && now.Before(h.until) {
			out = append(out, p)
		}
	}
	return out
}

// Leaving is closed once the node has begun to leave the cluster (Leave):
// its placement no longer moves, and the namespaces it held are the next
// owners' already in its view.
func (c *Cluster) Leaving() <-chan struct{} { return c.left }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Changed is closed after the next tick.
func (c *Cluster) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Fence is the fence of ns's writes on this node; ok is false when this
// node does not own ns now.
func (c *Cluster) Fence(ns string) (*store.Fence, bool) {
	_, f, mine := c.Route(ns)
	return f, mine
}

// IsLeader reports whether this node leads maintenance now.
func (c *Cluster) IsLeader() bool {
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.held[LeaderLease]
	return ok && now.Before(h.until)
}

// Status is what GET /v1/cluster shows.
type Status struct {
	Node    string         `json:"node"`
	Leader  string         `json:"leader"`
	Members []MemberStatus `json:"members"`
	// Namespace and Owner answer GET /v1/cluster?namespace=NS.
	Namespace string `json:"namespace,omitempty"`
	Owner     string `json:"owner,omitempty"`
	// Unreachable are the live members this node has no route to on the
	// bus (Cluster.Unreachable); left out when there are none.
	Unreachable []string `json:"unreachable,omitempty"`
}

// MemberStatus is one member in Status.
type MemberStatus struct {
	ID          string `json:"id"`
	Ready       bool   `json:"ready"`
	Owned       int    `json:"owned"`
	Maintenance bool   `json:"maintenance"`
	Partitions  int    `json:"partitions"`
	// JobFormat is the newest job record format the member reads
	// (store.JobFormat; 0 for a node built before formats were told).
	JobFormat int `json:"job_format"`
}

// Status reports the cluster as this node last saw it.
func (c *Cluster) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{Node: c.cfg.Node, Members: []MemberStatus{}, Unreachable: slices.Clone(c.unreachable)}
	if l, ok := c.leases[LeaderLease]; ok {
		st.Leader = l.Holder
	}
	parts := map[string]int{}
	for name, l := range c.leases {
		if name != LeaderLease {
			parts[l.Holder]++
		}
	}
	for _, m := range c.members {
		st.Members = append(st.Members, MemberStatus{ID: m.Node, Ready: m.Info.Ready, Owned: m.Info.Owned, Maintenance: m.Info.Maintenance, Partitions: parts[m.Node], JobFormat: m.Info.JobFormat})
	}
	return st
}

// Leave hands everything over: the node stops acting for its partitions
// (new calls for them are forwarded to their next owners), drain lets the
// actors answer what they hold under their still-valid fences, then the
// leases are released (the next owners take them at their next tick, or at
// once when a call for them arrives) and the node's row removed. Call it
// after the node stopped taking new requests from clients.
func (c *Cluster) Leave(ctx context.Context, drain func(ctx context.Context)) error {
	// Wait for a tick under way to end (its leases are then in held and
	// given up below); the ticks after it see leaving and do nothing.
	select {
	case c.turn <- struct{}{}:
		defer func() { <-c.turn }()
	case <-ctx.Done():
	}
	c.mu.Lock()
	// Closed before changed, under the lock Route reads under: a call
	// woken by the change sees the node leaving.
	if !isClosed(c.left) {
		close(c.left)
	}
	var names []string
	for name := range c.held {
		names = append(names, name)
	}
	c.held = map[string]heldLease{}
	for _, name := range names {
		delete(c.leases, name)
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	if drain != nil {
		drain(ctx)
	}
	var errs []error
	if len(names) > 0 {
		if err := c.cfg.Store.LeaseRelease(ctx, store.LeaseReleaseParams{Holder: c.cfg.Node, Names: names}); err != nil {
			errs = append(errs, fmt.Errorf("release leases: %w", err))
		}
	}
	if err := c.cfg.Store.MemberLeave(ctx, c.cfg.Node); err != nil {
		errs = append(errs, fmt.Errorf("leave: %w", err))
	}
	return errors.Join(errs...)
}
