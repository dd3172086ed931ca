package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Every bad value of fq bench flood is refused before a node is reached:
// exit 2, the flag named as written, and its limit.
func TestBenchFloodRefusesBadFlags(t *testing.T) {
	env := func(string) string { return "" }
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "0"}, `--rate: must be an integer >= 1, got "0"`},
		{[]string{"-rate=100001"}, "-rate: must be 1 to 100000, got 100001"},
		{[]string{"--jobs", "1000001"}, "--jobs: must be 1 to 1000000, got 1000001"},
		{[]string{"--producers", "5000"}, "--producers: at most 4096, got 5000"},
		{[]string{"--workers", "5000"}, "--workers: at most 4096, got 5000"},
		{[]string{"--flood-producers", "4097"}, "--flood-producers: must be 1 to 4096, got 4097"},
		{[]string{"--flood-factor", "1001"}, "--flood-factor: must be 1 to 1000, got 1001"},
		{[]string{"--flood-max-pending", "-1"}, "--flood-max-pending: must be 0 to 1000000, got -1"},
		{[]string{"--flood-max-pending", "1000001"}, "--flood-max-pending: must be 0 to 1000000, got 1000001"},
		{[]string{"--flood-max-pending", "many"}, `--flood-max-pending: must be an integer, got "many"`},
		{[]string{"--flood-rate", "5/d"}, `--flood-rate: must be <count>/<unit> with count >= 1 and unit s, m or h (e.g. 500/s), got "5/d"`},
		{[]string{"--flood-rate", "1/h"}, "--flood-rate: the flood (10 × 1/h) must be at least 1 call/s"},
		{[]string{"--flood-rate", "200000/s"}, "--flood-rate: the flood (10 × 200000/s) must be at most 1000000 calls/s"},
		{[]string{"--rounds", "101"}, "--rounds: must be 1 to 100, got 101"},
		{[]string{"--rounds", "10", "--jobs", "5"}, "--rounds: must be 1 to 5, got 10"},
		{[]string{"--duration", "2h"}, "--duration: must be more than 0 and at most 1h0m0s, got 2h0m0s"},
		{[]string{"--duration", "1ms"}, "--duration: a phase must be 1 to 1000000 jobs at --rate 500, got 1ms"},
		{[]string{"--duration", "1s", "--jobs", "5"}, "fq bench: give --jobs or --duration, not both"},
		{[]string{"--flood-token", " "}, "--flood-token: must not be empty"},
		{[]string{"--queue", "no spaces"}, `--queue: must be 1-128 bytes of [A-Za-z0-9._:-], got "no spaces"`},
		{[]string{"--batch", "10"}, "--batch: fq bench flood does not take it"},
		{[]string{"--sdk-worker"}, "--sdk-worker: fq bench flood does not take it"},
		{[]string{"--flood-bogus", "1"}, "--flood-bogus: unknown flag"},
	} {
		args := append([]string{"bench", "flood"}, c.args...)
		var out, errb bytes.Buffer
		code := RunContext(context.Background(), args, env, &out, &errb)
		first, rest, _ := strings.Cut(errb.String(), "\n")
		if code != ExitUsage || !strings.HasPrefix(first, c.want) || !strings.HasPrefix(rest, "usage: fq bench flood ") || out.Len() != 0 {
			t.Errorf("fq %s: exit %d, stdout %q, stderr %q; want exit 2, stderr starting %q, then fq bench flood's usage",
				strings.Join(args, " "), code, out.String(), errb.String(), c.want)
		}
	}
	// The flood's flags belong to it alone.
	for _, flag := range floodOnly {
		args := []string{"bench", "enqueue", "--" + flag, "1"}
		var out, errb bytes.Buffer
		code := RunContext(context.Background(), args, env, &out, &errb)
		if want := "--" + flag + ": only fq bench flood takes it"; code != ExitUsage || !strings.HasPrefix(errb.String(), want) {
			t.Errorf("fq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, errb.String(), want)
		}
	}
	// Help names every flag of the flood.
	var out, errb bytes.Buffer
	if code := RunContext(context.Background(), []string{"bench", "flood", "--help"}, env, &out, &errb); code != ExitOK {
		t.Fatalf("fq bench flood --help: exit %d, stderr %q", code, errb.String())
	}
	for _, flag := range append([]string{"jobs", "duration", "producers", "workers", "queue", "payload", "no-drain"}, floodOnly...) {
		if !strings.Contains(out.String(), "--"+flag+" ") {
			t.Errorf("fq bench flood --help does not show --%s:\n%s", flag, out.String())
		}
	}
}

func TestFloodConfigOffered(t *testing.T) {
	c := DefaultFloodConfig()
	if got := c.Offered(); got != 5000 {
		t.Fatalf("default flood offers %v calls/s, want 10 × 500/s = 5000", got)
	}
	c.FloodRate.Count, c.FloodRate.Unit, c.FloodRate.Text = 30000, 60e9, "30000/m"
	if got := c.Offered(); got != 5000 {
		t.Fatalf("10 × 30000/m offers %v calls/s, want 5000", got)
	}
}

// --prefetch goes with --sdk-worker only, within 0..client.MaxPrefetch.
func TestBenchPrefetchFlag(t *testing.T) {
	env := func(string) string { return "" }
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "work", "--prefetch", "8"}, "--prefetch: only with --sdk-worker"},
		{[]string{"bench", "work", "--sdk-worker", "--prefetch", "1001"}, "--prefetch: must be 0-1000, got 1001"},
		{[]string{"bench", "work", "--sdk-worker", "--prefetch", "-1"}, "--prefetch: must be 0-1000, got -1"},
	} {
		var out, errb bytes.Buffer
		code := RunContext(context.Background(), c.args, env, &out, &errb)
		if code != ExitUsage || !strings.HasPrefix(errb.String(), c.want) {
			t.Errorf("fq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, errb.String(), c.want)
		}
	}
}
