package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/maintenance"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// outcome is what one call through a producer path came to: its results,
// or its refusal.
type outcome struct {
	results []api.EnqueueResult
	err     *api.Error
}

// producerPath is one way jobs enter a namespace. prep runs before any
// quota is set; call makes one call (of n jobs) and reports its outcome.
type producerPath struct {
	name string
	n    int
	prep func(t *testing.T, e *env, tn *tenant) func(t *testing.T) outcome
}

func asOutcome(t *testing.T, res []api.EnqueueResult, err error) outcome {
	t.Helper()
	if err == nil {
		return outcome{results: res}
	}
	ae, ok := api.AsError(err)
	if !ok {
		t.Fatalf("call failed with %v, not an API error", err)
	}
	return outcome{err: ae}
}

func producerPaths() []producerPath {
	return []producerPath{
		{"nats-single", 1, func(t *testing.T, e *env, tn *tenant) func(*testing.T) outcome {
			return func(t *testing.T) outcome {
				r, err := tn.p.EnqueueMany(ctx(t), []api.Job{job("q", "t")})
				return asOutcome(t, r, err)
			}
		}},
		{"nats-batch", 3, func(t *testing.T, e *env, tn *tenant) func(*testing.T) outcome {
			return func(t *testing.T) outcome {
				r, err := tn.p.EnqueueMany(ctx(t), []api.Job{job("q", "t"), job("q", "t"), job("other", "t")})
				return asOutcome(t, r, err)
			}
		}},
		{"cli", 2, func(t *testing.T, e *env, tn *tenant) func(*testing.T) outcome {
			return func(t *testing.T) outcome {
				r := e.fq(tn.producer, "enqueue", "--queue", "q", "--task", "t", "--count", "2")
				switch r.code {
				case 0:
					return outcome{results: resultLines(t, r.stdout)}
				case 1:
					// The CLI prints the server's message as is; the code
					// and reason are not on its surface.
					return outcome{err: &api.Error{Message: strings.TrimSpace(strings.SplitN(r.stderr, "\n", 2)[0])}}
				}
				t.Fatalf("fq enqueue exit %d: %s", r.code, r.stderr)
				return outcome{}
			}
		}},
		{"event", 2, func(t *testing.T, e *env, tn *tenant) func(*testing.T) outcome {
			addTrigger(t, e, tn.admin, "ev", "q", "first")
			addTrigger(t, e, tn.admin, "ev", "other", "second")
			return func(t *testing.T) outcome {
				r, err := tn.p.PublishEvent(ctx(t), "ev", json.RawMessage(`{"x":1}`))
				return asOutcome(t, r, err)
			}
		}},
		{"periodic", 1, func(t *testing.T, e *env, tn *tenant) func(*testing.T) outcome {
			e.mustDo(http.StatusCreated, "POST", "/v1/periodic", tn.admin,
				map[string]string{"name": "p", "cron": "@every 1m", "queue": "q", "task": "t"}, nil)
			p := maintenance.NewPeriodic(e.node.Store, e.node.Actors, nil, nil)
			at := time.Now()
			return func(t *testing.T) outcome {
				at = at.Add(time.Minute)
				fires, err := p.RunOnce(ctx(t), at)
				if err != nil || len(fires) != 1 {
					t.Fatalf("periodic run: %+v %v", fires, err)
				}
				if fires[0].Err != nil {
					return outcome{err: fires[0].Err}
				}
				return outcome{results: []api.EnqueueResult{{Outcome: api.Outcome(fires[0].Outcome)}}}
			}
		}},
		{"replay", 2, func(t *testing.T, e *env, tn *tenant) func(*testing.T) outcome {
			var dead []string
			for i := 0; i < 6; i++ {
				dead = append(dead, killJob(t, tn, "q", true))
			}
			return func(t *testing.T) outcome {
				ids := dead[:2]
				dead = dead[2:]
				r, err := tn.a.Replay(ctx(t), ids...)
				return asOutcome(t, r, err)
			}
		}},
		{"auto-retry", 1, func(t *testing.T, e *env, tn *tenant) func(*testing.T) outcome {
			e.mustDo(http.StatusOK, "PUT", "/v1/queues/q", tn.admin, `{"dead_retry_after":"1m"}`, nil)
			killJob(t, tn, "q", true)
			sweep := maintenance.NewAutoRetry(e.node.Store, e.node.Actors, nil)
			return func(t *testing.T) outcome {
				rs, err := sweep.RunOnce(ctx(t), time.Now().Add(time.Hour))
				if err != nil || len(rs) != 1 {
					t.Fatalf("auto-retry sweep: %+v %v", rs, err)
				}
				if rs[0].Err != nil {
					return outcome{err: rs[0].Err}
				}
				return outcome{results: []api.EnqueueResult{{ID: rs[0].ID, Outcome: rs[0].Outcome}}}
			}
		}},
	}
}

// Every producer path meets QUEUE_FULL and RATE_LIMITED with the exact
// messages in reject mode, sheds whole calls in drop mode, and fails closed
// while the quota cannot be read.
func TestEveryProducerPathMeetsTheSameAdmission(t *testing.T) {
	type mode struct {
		name  string
		setup func(t *testing.T, e *env, tn *tenant, pending int64)
		check func(t *testing.T, p producerPath, pending int64, o outcome)
	}
	modes := []mode{
		{"depth-reject", func(t *testing.T, e *env, tn *tenant, pending int64) {
			e.setQuota(tn.admin, fmt.Sprintf(`{"max_pending":%d}`, pending))
		}, func(t *testing.T, p producerPath, pending int64, o outcome) {
			want := fmt.Sprintf("queue 'q' is full: %d pending >= max_pending %d", pending, pending)
			if o.err == nil || o.err.Message != want || (p.name != "cli" && o.err.Reason != api.ReasonQueueFull) {
				t.Fatalf("outcome %+v, want QUEUE_FULL %q", o, want)
			}
		}},
		{"rate-reject", func(t *testing.T, e *env, tn *tenant, _ int64) {
			e.setQuota(tn.admin, `{"enqueue_rate":"1/h"}`)
			enqueue(t, tn.p, job("spend", "t")) // the one token goes
		}, func(t *testing.T, p producerPath, _ int64, o outcome) {
			want := "rate limit exceeded for: namespace 'acme' enqueue_rate 1/h"
			if o.err == nil || o.err.Message != want || (p.name != "cli" && o.err.Reason != api.ReasonRateLimited) {
				t.Fatalf("outcome %+v, want RATE_LIMITED %q", o, want)
			}
		}},
		{"drop", func(t *testing.T, e *env, tn *tenant, pending int64) {
			e.setQuota(tn.admin, fmt.Sprintf(`{"max_pending":%d,"on_excess":"drop"}`, pending))
		}, func(t *testing.T, p producerPath, _ int64, o outcome) {
			if o.err != nil || len(o.results) != p.n {
				t.Fatalf("outcome %+v, want %d shed results", o, p.n)
			}
			for _, r := range o.results {
				if r.Outcome != api.OutcomeShed {
					t.Fatalf("outcome %+v, want every job shed", o)
				}
			}
		}},
		{"fail-closed", func(t *testing.T, e *env, tn *tenant, _ int64) {
			if _, err := e.node.Store.SettingPut(context.Background(), store.SettingPutParams{
				Key: quota.Key("acme"), Value: []byte(`{"max_pending":-1}`), Now: time.Now(),
			}); err != nil {
				t.Fatal(err)
			}
			e.node.Cache.Invalidate("acme", 1<<40) // as a broadcast would
		}, func(t *testing.T, p producerPath, _ int64, o outcome) {
			if o.err == nil || !strings.HasPrefix(o.err.Message, "quota of namespace 'acme' cannot be read") ||
				(p.name != "cli" && o.err.Reason != api.ReasonQuotaUnreadable) {
				t.Fatalf("outcome %+v, want QUOTA_UNREADABLE", o)
			}
		}},
	}
	for _, p := range producerPaths() {
		for _, m := range modes {
			t.Run(p.name+"/"+m.name, func(t *testing.T) {
				e := start(t)
				tn := e.tenant("acme")
				call := p.prep(t, e, tn)
				enqueue(t, tn.p, job("q", "t")) // one job pending before the quota
				pending := e.usage(tn.admin).Usage.Pending
				m.setup(t, e, tn, pending)
				before := e.usage(tn.admin).Usage
				o := call(t)
				m.check(t, p, pending, o)
				after := e.usage(tn.admin).Usage
				// A refused call wrote nothing; a shed one wrote dead letters.
				if after.Pending != before.Pending {
					t.Fatalf("pending %d -> %d: part of a refused or shed call landed", before.Pending, after.Pending)
				}
			})
		}
	}
}
