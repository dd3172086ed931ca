package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestPercentilesNearestRank(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	p50, p99, max := percentiles(lat)
	if p50 != 50*time.Millisecond || p99 != 99*time.Millisecond || max != 100*time.Millisecond {
		t.Fatalf("p50 %v p99 %v max %v, want 50ms 99ms 100ms", p50, p99, max)
	}
	if lat[0] != 100*time.Millisecond {
		t.Fatal("percentiles sorted its input in place")
	}
	if p50, p99, max = percentiles([]time.Duration{7}); p50 != 7 || p99 != 7 || max != 7 {
		t.Fatalf("one sample: %v %v %v", p50, p99, max)
	}
	if p50, p99, max = percentiles(nil); p50 != 0 || p99 != 0 || max != 0 {
		t.Fatalf("no samples: %v %v %v", p50, p99, max)
	}
}

func TestWrittenNamesTheFlagAsGiven(t *testing.T) {
	args := []string{"quota", "set", "-max-pending=x", "--on-excess", "maybe", "--", "--max-running"}
	for name, want := range map[string]string{
		"max-pending": "-max-pending", "on-excess": "--on-excess",
		"max-running": "--max-running", // after "--": not a flag; the default spelling
	} {
		if got := written(args, name); got != want {
			t.Errorf("written(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	tb := &tailBuffer{max: 5}
	tb.Write([]byte("abc"))
	tb.Write([]byte("defgh"))
	if tb.String() != "defgh" {
		t.Fatalf("tail %q, want defgh", tb.String())
	}
}

func TestFieldNameTakesBothSpellings(t *testing.T) {
	fields := []string{"max_pending", "on_excess"}
	for in, want := range map[string]string{"max_pending": "max_pending", "max-pending": "max_pending", "on-excess": "on_excess"} {
		if got, ok := fieldName(in, fields); !ok || got != want {
			t.Errorf("fieldName(%q) = %q %v", in, got, ok)
		}
	}
	for _, in := range []string{"MAX_PENDING", "max", ""} {
		if _, ok := fieldName(in, fields); ok {
			t.Errorf("fieldName(%q) accepted", in)
		}
	}
}

func TestGlobalURLsAreChecked(t *testing.T) {
	good := map[string]bool{
		"http://127.0.0.1:7070": true, "https://fq.example.com/": true, "http://x/prefix": true,
		"garbage": false, "http://": false, "ftp://x": false, "127.0.0.1:7070": false,
	}
	for v, ok := range good {
		a := &app{server: setting{flag: "server", env: "FQ_SERVER", value: v, fromEnv: true}}
		_, err := a.serverURL()
		if (err == nil) != ok {
			t.Errorf("server %q: err %v, want ok=%v", v, err, ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "FQ_SERVER: ") {
			t.Errorf("server %q: error %q does not name FQ_SERVER", v, err)
		}
	}
	nats := map[string]bool{
		"nats://127.0.0.1:4222": true, "127.0.0.1:4222": true, "nats://a:1,nats://b:2": true, "tls://x:4222": true,
		"garbage": false, "http://x:1": false, "": false, "nats://": false,
	}
	for v, ok := range nats {
		a := &app{nats: setting{flag: "nats", env: "FQ_NATS_URL", value: v, fromFlag: true}, args: []string{"--nats", v}}
		_, err := a.natsURL()
		if (err == nil) != ok {
			t.Errorf("nats %q: err %v, want ok=%v", v, err, ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "--nats: ") {
			t.Errorf("nats %q: error %q does not name --nats", v, err)
		}
	}
}

// Without a node: only usage errors and help, which never reach one.
func TestUsageErrorsNeedNoNode(t *testing.T) {
	env := func(string) string { return "" }
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"help"}, 0, "fq quota set"},
		{[]string{"--help"}, 0, "fq quota set"},
		{[]string{"job", "show", "--help"}, 0, "--json"},
		{[]string{"job", "show"}, 2, "fq job show: name exactly one job id"},
		{[]string{"job", "show", "a", "b"}, 2, "fq job show: name exactly one job id"},
		{[]string{"quota", "set", "--json=perhaps", "--max-pending", "1"}, 2, `--json: must be true or false, got "perhaps"`},
		{[]string{"work"}, 2, "fq work: --queue is required"},
		{[]string{"work", "--queue", "q", "--", "no-such-command-anywhere"}, 2, "fq work: cannot run"},
		{[]string{"bench", "--jobs", "5", "--duration", "1s"}, 2, "fq bench: give --jobs or --duration, not both"},
		{[]string{"bench", "--batch", "20000"}, 2, "--batch: at most 10000"},
	} {
		var out, errb bytes.Buffer
		code := RunContext(context.Background(), c.args, env, &out, &errb)
		text := out.String() + errb.String()
		if code != c.code || !strings.Contains(text, c.want) {
			t.Errorf("fq %s: exit %d, output %q; want exit %d and %q", strings.Join(c.args, " "), code, text, c.code, c.want)
		}
	}
}

// fq version prints the build without reaching a node.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run([]string{"version"}, func(string) string { return "" }, &out, &errb); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "fq ") || !strings.Contains(out.String(), "go1.") {
		t.Fatalf("fq version printed %q", out.String())
	}
}

// The line on the namespace's actor after a bench phase: its busy share of
// the phase and messages a step; none when its actor took no step on the
// node fq reads (in a cluster, its owner may be another node).
func TestActorLine(t *testing.T) {
	before := actorCounters{steps: 10, messages: 40, busy: 1.5}
	after := actorCounters{steps: 110, messages: 1040, busy: 2.25}
	want := "  (namespace default's actor: busy 75 % of the phase, 10.0 messages a step)"
	if got := actorLine(before, after, time.Second); got != want {
		t.Errorf("actorLine = %q, want %q", got, want)
	}
	if got := actorLine(before, before, time.Second); got != "" {
		t.Errorf("no step: actorLine = %q, want none", got)
	}
}
