package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/node"
)

// startPeer starts a second node on e's NATS server and store, with a
// cache TTL so long that only the broadcast can bring it a change.
func startPeer(t testing.TB, e *env) *node.Node {
	t.Helper()
	cfg := e.cfg
	cfg.NATSURL = e.node.NATSURL()
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.NodeID = "peer"
	cfg.DataDir = filepath.Join(t.TempDir(), "peer")
	cfg.RootToken = e.root
	cfg.ClusterSecret = e.node.ClusterSecret()
	cfg.QuotaCacheTTL = time.Hour
	n, err := node.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start peer: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Stop(ctx)
	})
	return n
}

// A quota written on one node reaches another node's cache through the
// fq.v1.quota.changed broadcast, long before its TTL.
func TestQuotaChangeReachesAnotherNode(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		e := start(t, func(c *nodeConfig) { c.QuotaCacheTTL = time.Hour })
		peer := startPeer(t, e)
		tn := e.tenant("acme")
		if snap := peer.Cache.Get(context.Background(), "acme", time.Now()); snap.Revision != 0 {
			t.Fatalf("peer starts at revision %d", snap.Revision)
		}
		e.setQuota(tn.admin, `{"max_pending":7}`)
		deadline := time.Now().Add(5 * time.Second)
		for {
			snap := peer.Cache.Get(context.Background(), "acme", time.Now())
			if snap.Revision == 1 && snap.Quota.MaxPending != nil && *snap.Quota.MaxPending == 7 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("peer still at revision %d after 5 s: the broadcast did not arrive", snap.Revision)
			}
			waitFor(time.Millisecond)
		}
	})
}

// BenchmarkQuotaPropagation measures, across two nodes, the time from the
// start of a PUT /v1/quota on one node to the other node enforcing it.
// Reported: p50 and p99 in milliseconds.
func BenchmarkQuotaPropagation(b *testing.B) {
	e := start(b, func(c *nodeConfig) { c.QuotaCacheTTL = time.Hour; c.Store = testserver.Redis(b) })
	peer := startPeer(b, e)
	tn := e.tenant("acme")
	var delays []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		want := int64(i + 1)
		t0 := time.Now()
		e.mustDo(http.StatusOK, "PUT", "/v1/quota", tn.admin, fmt.Sprintf(`{"max_pending":%d}`, want), nil)
		for {
			snap := peer.Cache.Get(context.Background(), "acme", time.Now())
			if snap.Quota.MaxPending != nil && *snap.Quota.MaxPending == want {
				break
			}
			if time.Since(t0) > 5*time.Second {
				b.Fatalf("change %d not seen by the peer in 5 s", i)
			}
		}
		delays = append(delays, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds())/1000, "p99-ms")
}
