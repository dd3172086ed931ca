package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/cmd/fq/cli"
)

// BenchmarkNoisyNeighbour is fq bench flood in-process, per backend: the
// same measuring code (cli.MeasureFlood) with the same defaults. Namespace
// B enqueues single jobs and claims and acks them at 500/s each; namespace
// A sits at max_pending 1000 and offers ten times its enqueue_rate of
// 500/s, every call refused. It reports B's p50 and p99 alone and flooded,
// the p99 ratios (the target is 1.2 or less), and the median of the five
// rounds' ratios, which a disturbance of one round moves little. It
// measures the same run whatever b.N is: run it with -benchtime 1x.
func BenchmarkNoisyNeighbour(b *testing.B) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			e := start(b)
			a, victim := e.tenant("flooder"), e.tenant("victim")
			cfg := cli.DefaultFloodConfig()
			cfg.Queue = "noisy"
			cfg.SetFloodQuota = e.patchQuota(a.admin)
			var res cli.FloodResult
			for i := 0; i < b.N; i++ {
				var err error
				if res, err = cli.MeasureFlood(context.Background(), victim.a, a.a, cfg); err != nil {
					b.Fatal(err)
				}
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			for _, m := range []struct {
				name string
				v    float64
			}{
				{"enq-p50-alone-ms", ms(res.Alone.Enqueue.P50)},
				{"enq-p99-alone-ms", ms(res.Alone.Enqueue.P99)},
				{"enq-p50-flooded-ms", ms(res.Flooded.Enqueue.P50)},
				{"enq-p99-flooded-ms", ms(res.Flooded.Enqueue.P99)},
				{"enq-p99-ratio", res.EnqueueRatio()},
				{"claim-p50-alone-ms", ms(res.Alone.Claim.P50)},
				{"claim-p99-alone-ms", ms(res.Alone.Claim.P99)},
				{"claim-p50-flooded-ms", ms(res.Flooded.Claim.P50)},
				{"claim-p99-flooded-ms", ms(res.Flooded.Claim.P99)},
				{"claim-p99-ratio", res.ClaimRatio()},
				{"enq-p99-ratio-median", res.MedianRatio().Enqueue},
				{"claim-p99-ratio-median", res.MedianRatio().Claim},
				{"flood-calls/s", res.Flooded.FloodPerSecond},
			} {
				b.ReportMetric(m.v, m.name)
			}
		})
	}
}

// patchQuota returns a cli.FloodConfig.SetFloodQuota that patches the
// quota document of token's namespace through the admin door.
func (e *env) patchQuota(token string) func(context.Context, map[string]any) error {
	return func(ctx context.Context, patch map[string]any) error {
		body, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, "PATCH", e.node.AdminURL()+"/v1/quota", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("PATCH /v1/quota: %w", err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("PATCH /v1/quota %s: status %d: %s", body, resp.StatusCode, data)
		}
		return nil
	}
}

// floodSmall are flags that make fq bench flood a short run.
var floodSmall = []string{"--jobs", "60", "--rate", "600", "--rounds", "2", "--producers", "2", "--workers", "2",
	"--flood-rate", "20/s", "--flood-max-pending", "25", "--flood-producers", "4"}

// floodRow is a row of fq bench flood's table: its two values.
func floodRow(t *testing.T, out, name string) (alone, flooded string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+(\S+)\s+(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("fq bench flood printed no %q row:\n%s", name, out)
	}
	return m[1], m[2]
}

// fq bench flood with the root token makes two namespaces, measures, and
// leaves them drained and their tokens revoked; every row is there. Its
// figures are not checked: timing is for benchmarks.
func TestCLIBenchFloodWithTheRootToken(t *testing.T) {
	e := start(t)
	r := e.fq(e.root, append([]string{"bench", "flood"}, floodSmall...)...).want(t, 0)
	for _, row := range []string{"enqueue p50", "enqueue p99", "enqueue max", "claim+ack p50", "claim+ack p99", "claim+ack max"} {
		alone, flooded := floodRow(t, r.stdout, row)
		if alone == "-" || flooded == "-" {
			t.Fatalf("row %q not measured:\n%s", row, r.stdout)
		}
	}
	if a, f := floodRow(t, r.stdout, "enqueue jobs/s"); a == "0" || f == "0" {
		t.Fatalf("no enqueue jobs/s:\n%s", r.stdout)
	}
	// A's calls were refused for depth: it sat at max_pending.
	m := regexp.MustCompile(`(?m)^A while flooded: (\d+) calls \(\d+/s\): (\d+) QUEUE_FULL, (\d+) RATE_LIMITED, (\d+) accepted$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no line about A's calls:\n%s", r.stdout)
	}
	if calls, _ := strconv.Atoi(m[1]); calls == 0 || m[2] != m[1] || m[4] != "0" {
		t.Fatalf("A's calls: %s; want every one refused QUEUE_FULL", m[0])
	}
	if !regexp.MustCompile(`(?m)^B's p99 flooded/alone: enqueue [0-9.]+, claim\+ack [0-9.]+ `).MatchString(r.stdout) {
		t.Fatalf("no ratio line:\n%s", r.stdout)
	}
	if !regexp.MustCompile(`(?m)^  per round: enqueue [0-9.]+ [0-9.]+ \(median [0-9.]+\); claim\+ack [0-9.]+ [0-9.]+ \(median [0-9.]+\)$`).MatchString(r.stdout) {
		t.Fatalf("no line of the two rounds' ratios:\n%s", r.stdout)
	}

	// The two namespaces: drained, and no token of theirs left. B wrote
	// its backlog (60), the warm-up's (60) and both phases' (60 each); A
	// its 25.
	m = regexp.MustCompile(`(?m)^  A (bench-flood-a-\d+): `).FindStringSubmatch(r.stdout)
	mb := regexp.MustCompile(`(?m)^  B (bench-flood-b-\d+): `).FindStringSubmatch(r.stdout)
	if m == nil || mb == nil {
		t.Fatalf("the namespaces are not named:\n%s", r.stdout)
	}
	var toks struct {
		Tokens []struct{ Namespace string }
	}
	e.mustDo(http.StatusOK, "GET", "/v1/tokens", e.root, nil, &toks)
	for _, tk := range toks.Tokens {
		if tk.Namespace == m[1] || tk.Namespace == mb[1] {
			t.Fatalf("a token of %s was left behind", tk.Namespace)
		}
	}
	for ns, archived := range map[string]int64{m[1]: 25, mb[1]: 60 + 60 + 60 + 60} {
		u := e.usage(e.token(ns, "admin"))
		if u.Usage.Pending != 0 || u.Usage.Running != 0 {
			t.Fatalf("%s after the run: pending %d running %d, want both 0", ns, u.Usage.Pending, u.Usage.Running)
		}
		if u.Usage.Archived != archived {
			t.Fatalf("%s after the run: %d archived, want %d", ns, u.Usage.Archived, archived)
		}
	}
}

// With --flood-token, A and B are the tokens' namespaces; A's quota is put
// back as it was, and --no-drain leaves the jobs.
func TestCLIBenchFloodWithTwoTokens(t *testing.T) {
	e := start(t)
	a, b := e.tenant("noisy"), e.tenant("quiet")
	e.setQuota(a.admin, `{"max_running":7,"max_pending":3}`)
	before := e.usage(a.admin)
	r := e.fq(b.admin, append([]string{"bench", "flood", "--flood-token", a.admin, "--queue", "q1", "--no-drain"}, floodSmall...)...).want(t, 0)
	if !strings.Contains(r.stdout, "  A noisy: ") || !strings.Contains(r.stdout, "  B quiet: ") {
		t.Fatalf("namespaces not named:\n%s", r.stdout)
	}
	after := e.usage(a.admin)
	jsonEqual(t, after.Quota, string(before.Quota))
	if after.Usage.Pending != 25 {
		t.Fatalf("A: %d pending, want its max_pending of the run, 25 (--no-drain)", after.Usage.Pending)
	}
	if u := e.usage(b.admin); u.Usage.Pending != 60 {
		t.Fatalf("B: %d pending, want its backlog of 60 (--no-drain)", u.Usage.Pending)
	}

	// Refused before anything runs.
	for _, c := range []struct {
		token string
		args  []string
		code  int
		want  string
	}{
		{b.admin, []string{"--flood-token", b.admin}, 2, "--flood-token: namespace A must not be namespace B"},
		{b.admin, []string{"--flood-token", a.producer}, 1, "--flood-token must be an admin token"},
		{b.producer, []string{"--flood-token", a.admin}, 1, "FQ_TOKEN must be an admin token"},
		{b.admin, nil, 1, "without --flood-token, FQ_TOKEN must be the root token"},
	} {
		r := e.fq(c.token, append([]string{"bench", "flood"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("fq bench flood %v: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
	if u := e.usage(a.admin); u.Revision != after.Revision {
		t.Fatalf("A's quota was written by a refused run: revision %d, want %d", u.Revision, after.Revision)
	}

	// A refusal names whose call it was, then prints the node's message.
	e.setQuota(b.admin, `{"max_pending":0}`)
	r = e.fq(b.admin, append([]string{"bench", "flood", "--flood-token", a.admin, "--queue", "q2"}, floodSmall...)...).want(t, 1)
	if want := "fq bench flood: namespace B's backlog:\nqueue 'q2' is full: 60 pending >= max_pending 0\n"; r.stderr != want {
		t.Fatalf("stderr %q, want %q", r.stderr, want)
	}
	if u := e.usage(a.admin); u.Revision != after.Revision {
		t.Fatalf("A's quota was written by a run that never got to it: revision %d, want %d", u.Revision, after.Revision)
	}
}
