package e2e

import (
	"context"
	"sync"
	"testing"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/node"
)

// docs/protocol.md "Refusals are paced": a producer calling past its quota
// faster than the pace gets every answer, each the same refusal, the ones
// past the burst late; /metrics counts those held. Another namespace's
// calls are admitted and never held.
func TestRefusalsPastTheBurstAreAllAnswered(t *testing.T) {
	e := start(t)
	flooder, other := e.tenant("flooder"), e.tenant("other")
	e.setQuota(flooder.admin, `{"max_pending":0}`)
	flood(t, flooder)
	// The other namespace is neither refused nor held.
	for range 10 {
		if _, err := other.p.Enqueue(context.Background(), job("q", "t")); err != nil {
			t.Fatalf("another namespace's enqueue: %v", err)
		}
	}
	n, ok := paced(t, e, "flooder")
	if !ok {
		t.Fatal("no flexiq_refusals_paced_total for the flooder: no refusal was held")
	}
	if burst := actors.DefaultPace().Burst; n < 1 || n > floodCalls()-burst {
		t.Errorf("%d refusals held of %d, want some, and none of the first %d", n, floodCalls(), burst)
	}
	if _, ok := paced(t, e, "other"); ok {
		t.Error("the other namespace's calls were held")
	}
}

// --refusal-pace off (node.Config.RefusalPace zero): every refusal is
// answered at once, none held.
func TestRefusalPaceOff(t *testing.T) {
	e := start(t, func(c *node.Config) { c.RefusalPace = actors.Pace{} })
	flooder := e.tenant("flooder")
	e.setQuota(flooder.admin, `{"max_pending":0}`)
	flood(t, flooder)
	if n, ok := paced(t, e, "flooder"); ok {
		t.Errorf("%d refusals held with the pace off", n)
	}
}

// floodCalls is how many calls flood makes at once: the default burst and
// 300 more.
func floodCalls() int { return actors.DefaultPace().Burst + 300 }

// flood makes floodCalls() enqueues at once in tn's namespace, all of which must
// be answered QUEUE_FULL.
func flood(t *testing.T, tn *tenant) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, floodCalls())
	for range floodCalls() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := tn.p.Enqueue(context.Background(), job("q", "t"))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if e, ok := api.AsError(err); !ok || e.Reason != api.ReasonQueueFull {
			t.Fatalf("a call past max_pending 0 answered %v, want QUEUE_FULL", err)
		}
	}
}

// paced is flexiq_refusals_paced_total of ns on e's node; ok is false
// when it has no such series (none held).
func paced(t *testing.T, e *env, ns string) (n int, ok bool) {
	t.Helper()
	v, ok := metric(t, e, `flexiq_refusals_paced_total{namespace="`+ns+`"}`)
	return int(v), ok
}
