package e2e

import (
	"net/http"
	"testing"
)

// Refusals are paced where the namespace's limits are: on its owner,
// whichever node's server the producer is connected to (docs/protocol.md
// "Refusals are paced"). Separate fq-node processes, PostgreSQL and Redis:
// a flood through another node's server is answered in full, the owner
// holds the refusals past the burst, and no other node holds any.
func TestClusterRefusalsArePacedOnTheOwner(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 3)
		admin, prod := c.token("acme", "admin"), c.token("acme", "producer")
		if st := c.do(c.members[0], "PUT", "/v1/quota", admin, `{"max_pending":0}`, nil); st != http.StatusOK {
			t.Fatalf("PUT /v1/quota: %d", st)
		}
		owner, rest := c.ownerOf("acme", c.members)

		// The burst and 300 more at once, all answered QUEUE_FULL.
		flood(t, &tenant{ns: "acme", p: c.clients(prod, rest[0])[0]})
		const series = `flexiq_refusals_paced_total{namespace="acme"}`
		if n, ok := c.metricIf(owner, series); !ok || n < 1 || n > 300 {
			t.Errorf("the owner held %v refusals (series there: %v), want some, none of the burst", n, ok)
		}
		for _, m := range rest {
			if n, ok := c.metricIf(m, series); ok {
				t.Errorf("%s, not the owner, held %v refusals", m.id, n)
			}
		}
	})
}
