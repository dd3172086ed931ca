package e2e

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/flexiq/flexiq/api"
)

// docs/protocol.md "Refusals are paced": a producer calling past its quota
// faster than the pace gets every answer, each the same refusal, the ones
// past the burst late; /metrics counts those held. Another namespace's
// calls meanwhile are admitted as ever.
func TestRefusalsPastTheBurstAreAllAnswered(t *testing.T) {
	e := start(t)
	flooder, other := e.tenant("flooder"), e.tenant("other")
	e.setQuota(flooder.admin, `{"max_pending":0}`)

	const calls = 300 // three times the burst, at once
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := flooder.p.Enqueue(context.Background(), job("q", "t"))
			errs <- err
		}()
	}
	// The other namespace is neither refused nor held meanwhile.
	for range 10 {
		if _, err := other.p.Enqueue(context.Background(), job("q", "t")); err != nil {
			t.Fatalf("another namespace's enqueue during the flood: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if e, ok := api.AsError(err); !ok || e.Reason != api.ReasonQueueFull {
			t.Fatalf("a call past max_pending 0 answered %v, want QUEUE_FULL", err)
		}
	}
	status, raw := e.do("GET", "/metrics", e.root, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	m := regexp.MustCompile(`(?m)^flexiq_refusals_paced_total\{namespace="flooder"\} (\d+)$`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("no flexiq_refusals_paced_total for the flooder: no refusal was held")
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 1 || n > calls-100 {
		t.Errorf("%d refusals held of %d, want some, and none of the first 100", n, calls)
	}
	if regexp.MustCompile(`flexiq_refusals_paced_total\{namespace="other"\}`).Match(raw) {
		t.Error("the other namespace's calls were held")
	}
}
