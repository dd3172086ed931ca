package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// metric is the value of one series (its name and labels as /metrics
// prints them) on e's node; ok is false when the node has no such series.
func metric(t *testing.T, e *env, series string) (v float64, ok bool) {
	t.Helper()
	status, raw := e.do("GET", "/metrics", e.root, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	return seriesValue(t, raw, series)
}

// seriesValue is the value of series in a /metrics page; ok is false when
// the page has no such series.
func seriesValue(t testing.TB, page []byte, series string) (v float64, ok bool) {
	t.Helper()
	for _, line := range strings.Split(string(page), "\n") {
		if rest, found := strings.CutPrefix(line, series+" "); found {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("/metrics line %q: %v", line, err)
			}
			return v, true
		}
	}
	return 0, false
}

// docs/admin-api.md: /metrics counts how attempts end and how long the
// jobs handed out had been due, per namespace.
func TestMetricsCountHowAttemptsEndAndHowLongJobsWaited(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		enqueue(t, tn.p, job("q", "t"), job("q", "t"), job("q", "t"))
		got := claim(t, tn.w, 3, "q")
		if len(got) != 3 {
			t.Fatalf("claimed %d jobs, want 3", len(got))
		}
		if err := tn.w.Ack(ctx(t), got[0].ID, got[0].Attempt, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := tn.w.Nack(ctx(t), got[1].ID, got[1].Attempt, "boom", true); err != nil {
			t.Fatal(err)
		}
		if _, err := tn.w.Nack(ctx(t), got[2].ID, got[2].Attempt, "fatal", false); err != nil {
			t.Fatal(err)
		}
		// Each is counted before its call is answered.
		for series, want := range map[string]float64{
			`flexiq_job_attempts_total{namespace="acme",outcome="completed"}`: 1,
			`flexiq_job_attempts_total{namespace="acme",outcome="retried"}`:   1,
			`flexiq_job_attempts_total{namespace="acme",outcome="dead"}`:      1,
			`flexiq_jobs_claimed_total{namespace="acme"}`:                     3,
			`flexiq_job_wait_seconds_count{namespace="acme"}`:                 3,
		} {
			if v, ok := metric(t, e, series); !ok || v != want {
				t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
			}
		}
		if v, ok := metric(t, e, `flexiq_job_wait_seconds_sum{namespace="acme"}`); !ok || v < 0 || v > 60 {
			t.Errorf(`flexiq_job_wait_seconds_sum{namespace="acme"} = %v (present %v), want the waits of 3 jobs just enqueued`, v, ok)
		}
	})
}

// docs/admin-api.md: /metrics reports each namespace's actor: its steps,
// the messages they took, and the time they kept it busy.
func TestMetricsReportEachNamespacesActorSteps(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		for range 3 {
			enqueue(t, tn.p, job("q", "t"))
		}
		// A step is reported before the actor's next step begins (on
		// PostgreSQL its answers may leave a little before): once a fourth
		// call, sent after the third's answer, is answered, the steps that
		// took the first three have been counted.
		enqueue(t, tn.p, job("q", "t"))
		steps, ok := metric(t, e, `flexiq_actor_steps_total{namespace="acme"}`)
		if !ok || steps < 1 {
			t.Errorf("flexiq_actor_steps_total = %v (present %v), want at least 1", steps, ok)
		}
		if msgs, ok := metric(t, e, `flexiq_actor_messages_total{namespace="acme"}`); !ok || msgs < 3 || msgs > 4+steps {
			t.Errorf("flexiq_actor_messages_total = %v (present %v), want the 3 or 4 calls answered (and no more than one other message a step)", msgs, ok)
		}
		if busy, ok := metric(t, e, `flexiq_actor_busy_seconds_total{namespace="acme"}`); !ok || busy <= 0 || busy > 60 {
			t.Errorf("flexiq_actor_busy_seconds_total = %v (present %v), want the time of a few steps", busy, ok)
		}
	})
}
