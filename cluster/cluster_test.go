package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexiq/flexiq/cluster/clustertest"
	"github.com/flexiq/flexiq/internal/testlog"
	"github.com/flexiq/flexiq/store"
)

// clock is a shared fake clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type testCluster struct {
	st    *clustertest.MemStore
	clk   *clock
	nodes map[string]*Cluster
	lost  map[string][]string
	// gained are the partitions each node was told it took, in order.
	gained map[string][]int
	mu     sync.Mutex
}

func newTestCluster(names ...string) *testCluster {
	tc := &testCluster{st: clustertest.NewMemStore(), clk: &clock{now: time.Unix(1_700_000_000, 0)}, nodes: map[string]*Cluster{}, lost: map[string][]string{}, gained: map[string][]int{}}
	for _, n := range names {
		tc.add(n, true)
	}
	return tc
}

func (tc *testCluster) add(name string, maintenance bool) *Cluster {
	return tc.addWith(name, maintenance, nil)
}

// addWith adds a node whose configuration edit changes first.
func (tc *testCluster) addWith(name string, maintenance bool, edit func(*Config)) *Cluster {
	cfg := Config{Node: name, Maintenance: maintenance, Store: tc.st, Now: tc.clk.Now, TTL: 2 * time.Second, Tick: 250 * time.Millisecond,
		OnLost: func(l []string) {
			tc.mu.Lock()
			tc.lost[name] = append(tc.lost[name], l...)
			tc.mu.Unlock()
		},
		OnGained: func(p []int) {
			tc.mu.Lock()
			tc.gained[name] = append(tc.gained[name], p...)
			tc.mu.Unlock()
		}}
	if edit != nil {
		edit(&cfg)
	}
	c := New(cfg)
	tc.nodes[name] = c
	return c
}

// round ticks every live node once, then moves the clock a tick on.
func (tc *testCluster) round(live ...string) {
	for _, n := range live {
		tc.nodes[n].Tick(context.Background())
	}
	tc.clk.add(250 * time.Millisecond)
}

// owners checks that each partition is held by exactly one of live and
// returns how many each holds.
func (tc *testCluster) owners(t *testing.T, live ...string) map[string]int {
	t.Helper()
	count := map[string]int{}
	for p := 0; p < Partitions; p++ {
		ns := fmt.Sprintf("ns-for-%d", p)
		var holders []string
		for _, n := range live {
			if _, mine := tc.nodes[n].Owner(ns); mine {
				holders = append(holders, n)
			}
		}
		if len(holders) > 1 {
			t.Fatalf("namespace %s is owned by %v at once", ns, holders)
		}
		if len(holders) == 1 {
			count[holders[0]]++
		}
	}
	return count
}

func settle(t *testing.T, tc *testCluster, rounds int, live ...string) map[string]int {
	t.Helper()
	var count map[string]int
	for i := 0; i < rounds; i++ {
		tc.round(live...)
		count = tc.owners(t, live...)
	}
	return count
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Three nodes share the namespaces, each owned by exactly one of them at
// every moment; one leader.
func TestThreeNodesOwnEveryNamespaceOnce(t *testing.T) {
	tc := newTestCluster("a", "b", "c")
	count := settle(t, tc, 6, "a", "b", "c")
	// Namespaces are spread over the partitions: all owned, by all three.
	if total(count) != Partitions || len(count) != 3 {
		t.Fatalf("owners %v", count)
	}
	leaders := 0
	for _, n := range []string{"a", "b", "c"} {
		if tc.nodes[n].IsLeader() {
			leaders++
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders", leaders)
	}
	st := tc.nodes["a"].Status()
	if st.Leader == "" || len(st.Members) != 3 {
		t.Fatalf("status %+v", st)
	}
	parts := 0
	for _, m := range st.Members {
		parts += m.Partitions
	}
	if parts != Partitions {
		t.Fatalf("status shows %d partitions held, want %d", parts, Partitions)
	}
}

// A node that stops (kill -9: no more heartbeats) loses its partitions to
// the others once its leases run out, never before; only its share moves.
func TestADeadNodesShareMovesAfterItsLeasesExpire(t *testing.T) {
	tc := newTestCluster("a", "b", "c")
	settle(t, tc, 6, "a", "b", "c")
	before := map[int]string{}
	for p := 0; p < Partitions; p++ {
		before[p] = tc.st.Leases[LeaseName(p)].Holder
	}
	// c dies. Its leases last 2 s: a and b must not take them sooner.
	for i := 0; i < 6; i++ { // 1.5 s
		tc.round("a", "b")
		for p := 0; p < Partitions; p++ {
			if before[p] == "c" && tc.st.Leases[LeaseName(p)].Holder != "c" {
				t.Fatalf("partition %d taken from c after %d rounds, before its lease expired", p, i+1)
			}
		}
	}
	count := settle(t, tc, 6, "a", "b")
	if total(count) != Partitions {
		t.Fatalf("after the failover %v own %d of %d namespaces", count, total(count), Partitions)
	}
	for p := 0; p < Partitions; p++ {
		if before[p] != "c" && tc.st.Leases[LeaseName(p)].Holder != before[p] {
			t.Fatalf("partition %d moved from %s, which did not die", p, before[p])
		}
	}
}

// A node is told once of each partition it takes (not of renewals), so it
// can wake the namespaces there: a dead node's partitions are reported to
// the nodes that take them.
func TestANodeIsToldOfThePartitionsItTakes(t *testing.T) {
	tc := newTestCluster("a", "b", "c")
	settle(t, tc, 6, "a", "b", "c")
	held := func(n string) map[int]bool {
		out := map[int]bool{}
		for _, p := range tc.nodes[n].Partitions() {
			out[p] = true
		}
		return out
	}
	for _, n := range []string{"a", "b", "c"} {
		seen := map[int]int{}
		for _, p := range tc.gained[n] {
			seen[p]++
		}
		for p := range held(n) {
			if seen[p] != 1 {
				t.Fatalf("%s holds partition %d and was told of it %d times", n, p, seen[p])
			}
		}
	}
	cHeld := held("c")
	before := map[string]int{"a": len(tc.gained["a"]), "b": len(tc.gained["b"])}
	settle(t, tc, 16, "a", "b") // c dies; its leases run out
	for _, n := range []string{"a", "b"} {
		for _, p := range tc.gained[n][before[n]:] {
			if !cHeld[p] {
				t.Fatalf("%s was told it took partition %d, which was not c's", n, p)
			}
			delete(cHeld, p)
		}
	}
	if len(cHeld) != 0 {
		t.Fatalf("c's partitions %v were taken by no one that was told", cHeld)
	}
}

// A node that renews nothing (the store is out of its reach) stops acting
// before its leases expire in the store, so no one else acts meanwhile.
func TestANodeStopsActingBeforeItsLeaseExpires(t *testing.T) {
	tc := newTestCluster("a")
	settle(t, tc, 2, "a")
	if _, mine := tc.nodes["a"].Owner("x"); !mine {
		t.Fatal("a does not own x")
	}
	// No more ticks from a: its leases run for TTL from the last renewal.
	last := tc.st.Leases[LeaseName(PartitionOf("x"))].Expires
	for tc.clk.Now().Before(last) {
		if _, mine := tc.nodes["a"].Owner("x"); mine && !tc.clk.Now().Before(last.Add(-tc.nodes["a"].margin())) {
			t.Fatalf("a still acts %v before its lease expires", last.Sub(tc.clk.Now()))
		}
		tc.clk.add(50 * time.Millisecond)
	}
	if _, mine := tc.nodes["a"].Owner("x"); mine {
		t.Fatal("a acts after its lease expired")
	}
}

// A joining node gets its share from the others by hand-over, and a node
// that leaves hands its share over at once (no wait for expiry).
func TestJoinAndLeaveHandOver(t *testing.T) {
	tc := newTestCluster("a", "b")
	settle(t, tc, 4, "a", "b")
	tc.add("c", true)
	count := settle(t, tc, 4, "a", "b", "c")
	if count["c"] == 0 || total(count) != Partitions {
		t.Fatalf("after c joined: %v", count)
	}
	was := map[string]store.Lease{}
	for name, l := range tc.st.Leases {
		was[name] = l
	}
	drained := false
	if err := tc.nodes["c"].Leave(context.Background(), func(context.Context) { drained = true }); err != nil {
		t.Fatal(err)
	}
	if !drained {
		t.Fatal("Leave did not drain")
	}
	// One round later, without any lease expiring, a and b own it all.
	count = settle(t, tc, 2, "a", "b")
	if total(count) != Partitions {
		t.Fatalf("after c left: %v", count)
	}
	for name, l := range tc.st.Leases {
		if l.Holder == "c" {
			t.Fatalf("%s still held by c", name)
		}
		if l.Holder != was[name].Holder && l.Epoch <= was[name].Epoch {
			t.Fatalf("%s went from %s to %s without a new epoch", name, was[name].Holder, l.Holder)
		}
	}
}

// slowAcquire is the test store with one LeaseAcquire held up: entered
// is closed when it begins, and it goes on when release is closed. left
// is closed when a node leaves.
type slowAcquire struct {
	*clustertest.MemStore
	once             sync.Once
	entered, release chan struct{}
	left             chan struct{}
	leftOnce         sync.Once
}

func (s *slowAcquire) LeaseAcquire(ctx context.Context, p store.LeaseAcquireParams) ([]store.Lease, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		<-s.release
	}
	return s.MemStore.LeaseAcquire(ctx, p)
}

func (s *slowAcquire) MemberLeave(ctx context.Context, node string) error {
	s.leftOnce.Do(func() { close(s.left) })
	return s.MemStore.MemberLeave(ctx, node)
}

// A tick under way when the node leaves does not give it back the leases
// it gave up: Leave waits for it, and the node owns nothing afterwards
// (it would otherwise act as their owner with its actors stopped, and
// keep the leases from the others until they expire).
func TestLeaveWaitsForATickUnderWay(t *testing.T) {
	tc := newTestCluster("a", "c")
	settle(t, tc, 4, "a", "c")
	slow := &slowAcquire{MemStore: tc.st, entered: make(chan struct{}), release: make(chan struct{}), left: make(chan struct{})}
	c := tc.nodes["c"]
	c.cfg.Store = slow
	if len(c.Partitions()) == 0 {
		t.Fatal("c holds no partition before it leaves")
	}
	ticked := make(chan struct{})
	go func() { c.Tick(context.Background()); close(ticked) }()
	<-slow.entered
	left := make(chan error, 1)
	go func() { left <- c.Leave(context.Background(), nil) }()
	// Let the tick go on once Leave is done with the store (without the
	// wait) or has had time to begin (with it): either way the verdict
	// below does not depend on when.
	select {
	case <-slow.left:
	case <-time.After(50 * time.Millisecond):
	}
	close(slow.release)
	<-ticked
	if err := <-left; err != nil {
		t.Fatal(err)
	}
	if got := c.Partitions(); len(got) != 0 {
		t.Fatalf("c holds %d partitions after it left", len(got))
	}
	for name, l := range tc.st.Leases {
		if l.Holder == "c" && l.Expires.After(tc.clk.Now()) {
			t.Fatalf("lease %s is c's in the store after c left", name)
		}
	}
}

// The leader's lease moves when the leader dies, to a node with
// maintenance on only.
func TestTheLeaderIsReelected(t *testing.T) {
	tc := newTestCluster("a", "b")
	tc.add("c", false)
	settle(t, tc, 4, "a", "b", "c")
	if tc.nodes["c"].IsLeader() {
		t.Fatal("c leads with maintenance off")
	}
	leader := "a"
	if tc.nodes["b"].IsLeader() {
		leader = "b"
	}
	other := map[string]string{"a": "b", "b": "a"}[leader]
	settle(t, tc, 12, other, "c")
	if !tc.nodes[other].IsLeader() || tc.nodes["c"].IsLeader() {
		t.Fatalf("after %s died: %s leads %v, c leads %v", leader, other, tc.nodes[other].IsLeader(), tc.nodes["c"].IsLeader())
	}
}

func TestPlacementMovesOnlyTheLostNodesShare(t *testing.T) {
	members := func(names ...string) []store.Member {
		var out []store.Member
		for _, n := range names {
			out = append(out, store.Member{Node: n, Info: store.MemberInfo{Ready: true}})
		}
		return out
	}
	moved := 0
	for p := 0; p < Partitions; p++ {
		before := DesiredOwner(members("a", "b", "c", "d"), p)
		after := DesiredOwner(members("a", "b", "d"), p)
		if before != "c" && before != after {
			t.Fatalf("partition %d moved from %s to %s when c left", p, before, after)
		}
		if before == "c" {
			moved++
		}
	}
	if moved == 0 || moved > Partitions/2 {
		t.Fatalf("c had %d of %d partitions", moved, Partitions)
	}
}

// Leaving closes when Leave begins, before the change that gives the
// node's namespaces to the next owners: a call woken by that change sees
// the node leaving (and is passed on marked, not sent back to it).
func TestLeavingClosesBeforeTheLeaveIsSeen(t *testing.T) {
	tc := newTestCluster("a", "c")
	settle(t, tc, 4, "a", "c")
	c := tc.nodes["c"]
	var ns string
	for i := 0; ns == ""; i++ {
		if _, mine := c.Owner(fmt.Sprintf("ns%d", i)); mine {
			ns = fmt.Sprintf("ns%d", i)
		}
	}
	select {
	case <-c.Leaving():
		t.Fatal("Leaving is closed before the node leaves")
	default:
	}
	changed := c.Changed()
	seen := make(chan bool, 1)
	go func() {
		<-changed
		owner, mine := c.Owner(ns)
		select {
		case <-c.Leaving():
			seen <- owner == "a" && !mine
		default:
			seen <- false
		}
	}()
	// drain runs after the change, before the leases are released: the
	// call looks while Leave is still under way.
	var ok bool
	if err := c.Leave(context.Background(), func(context.Context) { ok = <-seen }); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("woken by the leave, the call saw the node not leaving, or not the next owner")
	}
}

// routes is which members a node's bus reaches (Config.Reachable).
type routes struct {
	mu sync.Mutex
	up map[string]bool
}

func (r *routes) reachable(node string) bool { r.mu.Lock(); defer r.mu.Unlock(); return r.up[node] }
func (r *routes) set(node string, up bool)   { r.mu.Lock(); r.up[node] = up; r.mu.Unlock() }

// A node that joins takes no partition while it has no route to a live
// member (a call forwarded to it then would be lost), and takes its share
// as soon as the route is up; a change of its routes afterwards is logged.
func TestAJoiningNodeWaitsForItsRoutes(t *testing.T) {
	tc := newTestCluster("a", "b")
	settle(t, tc, 4, "a", "b")
	r := &routes{up: map[string]bool{"a": true}}
	var logs testlog.Buffer
	tc.addWith("c", true, func(cfg *Config) {
		cfg.Reachable = r.reachable
		cfg.Log = logs.Logger(slog.LevelInfo)
	})
	for i := 0; i < 8; i++ { // 2 s, within JoinWait
		count := settle(t, tc, 1, "a", "b", "c")
		if count["c"] > 0 {
			t.Fatalf("round %d: c owns %d partitions with no route to b", i, count["c"])
		}
	}
	for _, m := range tc.nodes["a"].Status().Members {
		if m.ID == "c" && m.Ready {
			t.Fatal("c says it is ready with no route to b")
		}
	}
	if got := tc.nodes["c"].Unreachable(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("c waiting for its route: Unreachable() = %v, want [b]", got)
	}
	if got := tc.nodes["c"].Status().Unreachable; len(got) != 1 || got[0] != "b" {
		t.Fatalf("c's status shows unreachable %v, want [b]", got)
	}
	r.set("b", true)
	count := settle(t, tc, 4, "a", "b", "c")
	if count["c"] == 0 || total(count) != Partitions {
		t.Fatalf("with its routes up c owns %v", count)
	}
	if !strings.Contains(logs.String(), "routes to every live member are up") {
		t.Fatalf("c's log says nothing of its routes:\n%s", logs.String())
	}
	r.set("a", false)
	tc.round("a", "b", "c")
	if !strings.Contains(logs.String(), "unreachable=a") {
		t.Fatalf("c's log does not name the member it lost its route to:\n%s", logs.String())
	}
	if got := tc.nodes["c"].Unreachable(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("c's Unreachable() = %v, want [a]", got)
	}
	// Once ready it stays ready: the forwarding waits for the route.
	if count := tc.owners(t, "a", "b", "c"); count["c"] == 0 {
		t.Fatalf("c gave up its partitions when a route went: %v", count)
	}
}

// A node that never gets a route to a live member takes part after
// JoinWait anyway, naming the members it cannot reach: a bus split must
// not leave the namespaces with no owner at all.
func TestANodeWithoutRoutesJoinsAfterTheWait(t *testing.T) {
	tc := newTestCluster("a")
	settle(t, tc, 4, "a")
	r := &routes{up: map[string]bool{}}
	var logs testlog.Buffer
	tc.addWith("c", true, func(cfg *Config) {
		cfg.Reachable = r.reachable
		cfg.JoinWait = 3 * time.Second
		cfg.Log = logs.Logger(slog.LevelInfo)
	})
	for i := 0; i < 11; i++ { // 2.75 s
		if count := settle(t, tc, 1, "a", "c"); count["c"] > 0 {
			t.Fatalf("round %d: c owns %d partitions before its wait ended", i, count["c"])
		}
	}
	count := settle(t, tc, 4, "a", "c")
	if count["c"] == 0 || total(count) != Partitions {
		t.Fatalf("after its wait c owns %v", count)
	}
	if out := logs.String(); !strings.Contains(out, "no route on the bus") || !strings.Contains(out, "unreachable=a") {
		t.Fatalf("c's log does not name the member it cannot reach:\n%s", out)
	}
}
