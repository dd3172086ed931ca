package simtest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

var (
	flagClusterSeeds = flag.Int("clusterseeds", 0, "how many seeds TestClusterSeeds runs (default 100, 70 under -race)")
	flagClusterSeed  = flag.Int64("clusterseed", -1, "TestClusterSeeds runs only this seed")
)

// defaultClusterSeeds is how many clustered seeds a plain `go test
// ./simtest` runs (fewer under -race, to keep the package near 3 minutes
// on 2 cores; -clusterseeds runs more).
func defaultClusterSeeds() int {
	if raceEnabled {
		return 70
	}
	return 100
}

func clusterReplayLine(seed uint64) string {
	line := fmt.Sprintf("go test ./simtest -run TestClusterSeeds -clusterseed=%d -v", seed)
	if raceEnabled {
		line = strings.Replace(line, "go test", "go test -race", 1)
	}
	if *flagSimLen > 0 {
		line += fmt.Sprintf(" -simlen=%g", *flagSimLen)
	}
	return line
}

func runClusterSeed(t testing.TB, seed uint64, scale float64, tweak func(*Config)) *Sim {
	t.Helper()
	cfg := RandomClusterConfig(seed, scale)
	if *flagStrict {
		cfg.Tolerate = nil
	}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	_ = s.Run()
	return s
}

// TestClusterSeeds plays clustered worlds (-clusterseeds from -seedbase, or
// -clusterseed): 2–3 nodes on one store, ownership by fenced leases, kills,
// leaves, joins and bus cuts, every invariant checked after every step.
func TestClusterSeeds(t *testing.T) {
	if *flagClusterSeed >= 0 {
		seed := uint64(*flagClusterSeed)
		s := runClusterSeed(t, seed, simLen(), nil)
		if *flagTrace {
			os.Stdout.Write(s.Trace())
		}
		if v := s.Violations(); len(v) > 0 {
			t.Fatalf("seed %d: %v\n%s\nreplay: %s", seed, v[0], tail(s.Trace(), 80), clusterReplayLine(seed))
		}
		t.Logf("seed %d: %d steps, %d jobs, no violation; %v", seed, s.steps, s.jobCount(), s.Stats())
		return
	}
	n := *flagClusterSeeds
	if n <= 0 {
		n = defaultClusterSeeds()
	}
	var (
		next, steps, nfailed atomic.Int64
		mu                   sync.Mutex
		stats                = map[string]int{}
		failed               []string
		wg                   sync.WaitGroup
		base                 = *flagSeedBase
	)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || nfailed.Load() >= 20 {
					return
				}
				seed := base + uint64(i)
				cfg := RandomClusterConfig(seed, simLen())
				if *flagStrict {
					cfg.Tolerate = nil
				}
				s, err := New(cfg)
				if err != nil {
					t.Error(err)
					return
				}
				_ = s.Run()
				steps.Add(int64(s.steps))
				mu.Lock()
				for k, v := range s.Stats() {
					stats[k] += v
				}
				if v := s.Violations(); len(v) > 0 {
					nfailed.Add(1)
					failed = append(failed, fmt.Sprintf("seed %d: %v\n    replay: %s", seed, v[0], clusterReplayLine(seed)))
				}
				mu.Unlock()
				s.Close()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d clustered seeds from %d: %d actor steps", n, base, steps.Load())
	if testing.Verbose() {
		var b strings.Builder
		for _, k := range sortedKeys(stats) {
			fmt.Fprintf(&b, "\n  %8d  %s", stats[k], k)
		}
		t.Logf("what the seeds exercised:%s", b.String())
	}
	if len(failed) > 0 {
		t.Fatalf("%d seeds failed:\n%s", len(failed), strings.Join(failed, "\n"))
	}
}

// TestClusterDeterminism: a clustered seed replays byte for byte.
func TestClusterDeterminism(t *testing.T) {
	for _, seed := range []uint64{5, 17} {
		a := runClusterSeed(t, seed, 0.5, nil).Trace()
		b := runClusterSeed(t, seed, 0.5, nil).Trace()
		if !bytes.Equal(a, b) {
			al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
			for i := range min(len(al), len(bl)) {
				if al[i] != bl[i] {
					t.Fatalf("seed %d: the traces part at line %d:\n  %s\n  %s", seed, i+1, al[i], bl[i])
				}
			}
			t.Fatalf("seed %d: traces of %d and %d bytes", seed, len(a), len(b))
		}
		if !bytes.Contains(a, []byte("forwards to")) {
			t.Fatalf("seed %d: no call was forwarded", seed)
		}
	}
}

// expectClusterViolation plays clustered seeds with a planted bug until
// one reports inv.
func expectClusterViolation(t *testing.T, inv string, tweak func(*Config)) {
	t.Helper()
	for seed := uint64(1); seed <= 30; seed++ {
		s := runClusterSeed(t, seed, 0.5, func(c *Config) {
			c.Faults = FaultConfig{}
			c.KeepGoing = true
			tweak(c)
		})
		for _, v := range s.Violations() {
			if v.Inv == inv {
				t.Logf("seed %d caught it (first violation: %v)", seed, s.Violations()[0])
				return
			}
		}
	}
	t.Fatalf("no seed reported %s", inv)
}

// The store checks no fence: a stale owner's writes land.
func TestMutationClusterNoFence(t *testing.T) {
	expectClusterViolation(t, InvStaleWrite, func(c *Config) { c.Cluster.noFence = true })
}

// Counts not reloaded on take-over: an actor that keeps its counts when
// its fence's epoch changes (and is not evicted when its node loses the
// namespace, which would otherwise hide it).
func TestMutationClusterKeepCounts(t *testing.T) {
	expectClusterViolation(t, InvCounts, func(c *Config) { c.Cluster.keepCounts = true })
}

// Acks refused off-owner: a node answers acks, nacks and heartbeats with
// its own actor instead of passing them to the owner.
func TestMutationClusterAckLocal(t *testing.T) {
	expectClusterViolation(t, InvRouted, func(c *Config) { c.Cluster.ackLocal = true })
}

// Without eviction on a lost namespace, the actors' reload on an epoch
// change alone keeps counts right: the same seeds pass (so
// TestMutationClusterKeepCounts is about the reload).
func TestClusterNoEvictStillSound(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		s := runClusterSeed(t, seed, simLen(), func(c *Config) { c.Cluster.noEvict = true })
		if v := s.Violations(); len(v) > 0 {
			t.Fatalf("seed %d: %v\nreplay: %s", seed, v[0], clusterReplayLine(seed))
		}
	}
}

// A failed lease acquire taken for a granted one (the bug a node's error
// handling could have): the lease-store faults bring it out as two nodes
// leading at once.
func TestMutationClusterFailedAcquireTakenAsGranted(t *testing.T) {
	expectClusterViolation(t, InvOneLeader, func(c *Config) {
		c.Cluster.LeaseFaults = 0.1
		c.Cluster.grantOnFault = true
	})
}

// Clocks off by more than the lease margin covers: a node whose clock runs
// ahead takes the leader lease while its holder, by its own clock, still
// leads.
func TestMutationClusterSkewBeyondTheMargin(t *testing.T) {
	expectClusterViolation(t, InvOneLeader, func(c *Config) { c.Cluster.SkewMax = 2 * c.Cluster.TTL })
}
