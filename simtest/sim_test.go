package simtest

import (
	"bytes"
	"cmp"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

var (
	flagSeed     = flag.Int64("seed", -1, "TestSeeds runs only this seed")
	flagSeeds    = flag.Int("seeds", 0, "how many seeds TestSeeds runs (default 500)")
	flagSeedBase = flag.Uint64("seedbase", 1, "the first seed TestSeeds runs")
	flagSimLen   = flag.Float64("simlen", 0, "stretches (or shrinks) each seed's simulated run (default 1, 0.3 under -race)")
	flagTrace    = flag.Bool("simtrace", false, "with -seed: print the whole trace")
	flagStrict   = flag.Bool("strict", false, "tolerate no known bug (KnownBugs)")
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// defaultSeeds is how many seeds a plain `go test ./simtest` runs.
const defaultSeeds = 500

// simLen is how long each seed runs, relative to RandomConfig's default:
// -simlen, or shorter under the race detector.
func simLen() float64 {
	switch {
	case *flagSimLen > 0:
		return *flagSimLen
	case raceEnabled:
		return 0.3
	}
	return 1
}

// runSeed plays one seed.
func runSeed(t testing.TB, seed uint64, scale float64, tweak func(*Config)) *Sim {
	t.Helper()
	cfg := seedConfig(seed, scale)
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

// seedConfig is the world of seed, with -strict applied.
func seedConfig(seed uint64, scale float64) Config {
	cfg := RandomConfig(seed, scale)
	if *flagStrict {
		cfg.Tolerate = nil
	}
	return cfg
}

// tail is the last n lines of a trace.
func tail(trace []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(trace), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… %d lines before", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func replayLine(seed uint64) string {
	line := fmt.Sprintf("go test ./simtest -run TestSeeds -seed=%d -v", seed)
	if raceEnabled {
		line = strings.Replace(line, "go test", "go test -race", 1)
	}
	if *flagSimLen > 0 {
		line += fmt.Sprintf(" -simlen=%g", *flagSimLen)
	}
	if *flagStrict {
		line += " -strict"
	}
	return line
}

// TestSeeds plays many seeds (-seeds, from -seedbase) or one (-seed), each a
// whole simulated run with every invariant checked after every step.
func TestSeeds(t *testing.T) {
	if *flagSeed >= 0 {
		seed := uint64(*flagSeed)
		s := runSeed(t, seed, simLen(), nil)
		if *flagTrace {
			os.Stdout.Write(s.Trace())
		}
		if v := s.Violations(); len(v) > 0 {
			t.Fatalf("seed %d: %v\n%s\nreplay: %s", seed, v[0], tail(s.Trace(), 80), replayLine(seed))
		}
		t.Logf("seed %d: %d steps, %d jobs, no violation", seed, s.steps, s.jobCount())
		return
	}
	n := *flagSeeds
	if n <= 0 {
		n = defaultSeeds
	}
	var (
		next            atomic.Int64
		steps, jobs     atomic.Int64
		nfailed         atomic.Int64
		mu              sync.Mutex
		stats           = map[string]int{}
		failed          []string
		wg              sync.WaitGroup
		workers         = runtime.GOMAXPROCS(0)
		base            = *flagSeedBase
		firstViolations = map[string]int{}
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || nfailed.Load() >= 20 {
					return // enough to go on
				}
				seed := base + uint64(i)
				cfg := seedConfig(seed, simLen())
				s, err := New(cfg)
				if err != nil {
					t.Error(err)
					return
				}
				_ = s.Run()
				steps.Add(int64(s.steps))
				jobs.Add(int64(s.jobCount()))
				mu.Lock()
				for k, v := range s.Stats() {
					stats[k] += v
				}
				mu.Unlock()
				if v := s.Violations(); len(v) > 0 {
					nfailed.Add(1)
					mu.Lock()
					failed = append(failed, fmt.Sprintf("seed %d: %v\n    replay: %s", seed, v[0], replayLine(seed)))
					firstViolations[v[0].Inv]++
					mu.Unlock()
				}
				s.Close()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d seeds from %d: %d actor steps, %d jobs; failing seeds by first violation: %v", n, base, steps.Load(), jobs.Load(), firstViolations)
	if testing.Verbose() {
		var b strings.Builder
		for _, k := range sortedKeys(stats) {
			fmt.Fprintf(&b, "\n  %8d  %s", stats[k], k)
		}
		t.Logf("what the seeds exercised:%s", b.String())
	}
	if len(failed) > 0 {
		slices.SortFunc(failed, func(a, b string) int { // by seed
			var x, y uint64
			fmt.Sscanf(a, "seed %d", &x)
			fmt.Sscanf(b, "seed %d", &y)
			return cmp.Compare(x, y)
		})
		t.Fatalf("%d seeds failed:\n%s", len(failed), strings.Join(failed, "\n"))
	}
}

// TestDeterminism plays seeds twice and wants the same trace, byte for byte.
func TestDeterminism(t *testing.T) {
	// 3 and 11 write call by call, 9 beside the steps too, 42 a step at
	// a time.
	for _, seed := range []uint64{3, 9, 11, 42} {
		a := runSeed(t, seed, 1, nil).Trace()
		b := runSeed(t, seed, 1, nil).Trace()
		if !bytes.Equal(a, b) {
			al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
			for i := range min(len(al), len(bl)) {
				if al[i] != bl[i] {
					t.Fatalf("seed %d: the traces part at line %d:\n  %s\n  %s", seed, i+1, al[i], bl[i])
				}
			}
			t.Fatalf("seed %d: traces of %d and %d bytes", seed, len(a), len(b))
		}
		if len(a) < 1000 {
			t.Fatalf("seed %d: a trace of only %d bytes", seed, len(a))
		}
	}
	// The store on a file instead of a private temporary database: the
	// same world, the same trace.
	mem := runSeed(t, 42, 1, nil).Trace()
	file := runSeed(t, 42, 1, func(c *Config) { c.Path = filepath.Join(t.TempDir(), "sim.db") }).Trace()
	if !bytes.Equal(mem, file) {
		t.Fatalf("seed 42 on a file traced %d bytes, in memory %d", len(file), len(mem))
	}
}
