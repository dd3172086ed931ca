package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexiq/flexiq/cmd/fq/cli"
)

// nodeLog is what member m logged so far.
func nodeLog(m *member) string {
	data, _ := os.ReadFile(filepath.Join(m.dir, "node.log"))
	return string(data)
}

// A node that starts with no route to a live member takes no namespace
// until --cluster-join-wait passes (a call forwarded to it before a route
// exists could be lost), then takes its share and names the member it
// cannot reach. A node started later with routes joins once they are up;
// the route it brings lets the first two find each other, which the node
// that waited logs, and so does its dashboard. At --log-level debug the embedded server's own reports
// (routes formed) are in the log, and no secret is.
func TestClusterNodeTakesNamespacesOnceItsRoutesAreUp(t *testing.T) {
	eachSharedBackend(t, func(t *testing.T) {
		c := startClusterWith(t, 3, func(m *member) {
			m.env = []string{"FLEXIQ_CLUSTER_JOIN_WAIT=5s", "FLEXIQ_LOG_LEVEL=debug"}
			switch m.id {
			case "n1", "n2":
				m.routes = nil // n1 and n2 share the store, not a bus
				m.later = m.id == "n2"
			case "n3":
				m.later = true
			}
		})
		n1, n2, n3 := c.members[0], c.members[1], c.members[2]
		self := func(m *member) (ready bool, parts int, ok bool) {
			st, err := c.status(m)
			if err != nil {
				return false, 0, false
			}
			for _, mem := range st.Members {
				if mem.ID == m.id {
					return mem.Ready, mem.Partitions, true
				}
			}
			return false, 0, false
		}
		n2.start()
		// n2 is a member from its first heartbeat, before it serves.
		if ready, parts, ok := self(n2); !ok || ready || parts != 0 {
			t.Fatalf("n2 with no route to n1: member %v, ready %v, %d partitions; want a member, not ready, none\n%s", ok, ready, parts, c.logs())
		}
		waitUntil(t, "n2 ready and holding partitions after its wait", func() bool {
			ready, parts, _ := self(n2)
			return ready && parts > 0
		})
		if out := nodeLog(n2); !strings.Contains(out, "no route on the bus to some live members") || !strings.Contains(out, "unreachable=n1") {
			t.Fatalf("n2's log does not name n1 as unreachable:\n%s", out)
		}
		if got := c.metric(n2, "flexiq_cluster_unreachable_members"); got != 1 {
			t.Fatalf("n2's flexiq_cluster_unreachable_members = %v, want 1 (n1)", got)
		}
		if st, err := c.status(n2); err != nil || len(st.Unreachable) != 1 || st.Unreachable[0] != "n1" {
			t.Fatalf("n2's GET /v1/cluster: unreachable %v (%v), want [n1]", st.Unreachable, err)
		}
		var stdout, stderr bytes.Buffer
		vars := map[string]string{"FQ_SERVER": "http://" + n2.admin, "FQ_TOKEN": clusterRoot}
		if code := cli.RunContext(context.Background(), []string{"cluster", "status"}, func(k string) string { return vars[k] }, &stdout, &stderr); code != 0 ||
			!strings.Contains(stdout.String(), "no route from n2 to: n1") {
			t.Fatalf("fq cluster status on n2: exit %d, stdout %q, stderr %q; want it to name n1 as unreachable", code, stdout.String(), stderr.String())
		}
		// The dashboard's cluster view names n1 as well.
		tab := browser(t)
		signIn(t, tab, &uiNode{t: t, base: "http://" + n2.admin}, clusterRoot)
		show(t, tab, "root")
		until(t, tab, "n1 shown without a route", `document.getElementById('cluster-summary').textContent.includes('no route to n1') &&
			document.querySelector('#members tr[data-node="n1"]')?.classList.contains('unreachable') &&
			!document.querySelector('#members tr[data-node="n2"]')?.classList.contains('unreachable')`)
		if out := nodeLog(n1); strings.Contains(out, "placement anyway") || !strings.Contains(out, "unreachable=n2") {
			t.Fatalf("n1, alone when it started, waited for routes, or did not log that it cannot reach n2:\n%s", out)
		}

		n3.start()
		c.settled(n1, n2, n3)
		waitUntil(t, "n2 logs that its routes are up again", func() bool {
			return strings.Contains(nodeLog(n2), "routes to every live member are up again")
		})
		if got := c.metric(n2, "flexiq_cluster_unreachable_members"); got != 0 {
			t.Fatalf("n2's flexiq_cluster_unreachable_members = %v once its routes are up, want 0", got)
		}
		if st, err := c.status(n2); err != nil || len(st.Unreachable) != 0 {
			t.Fatalf("n2's GET /v1/cluster once its routes are up: unreachable %v (%v), want none", st.Unreachable, err)
		}
		until(t, tab, "the dashboard's cluster view with every route up", `document.getElementById('cluster-summary').textContent.includes('3 members') &&
			!document.getElementById('cluster-summary').textContent.includes('no route') && !document.querySelector('#members tr.unreachable')`)
		out := nodeLog(n3)
		if !strings.Contains(out, "routes to every live member are up: taking part in placement") {
			t.Fatalf("n3's log does not say it joined on its routes:\n%s", out)
		}
		if !strings.Contains(out, `Route connection created" node=n3 component=nats`) {
			t.Fatalf("n3's debug log has no report of the embedded server's routes:\n%s", out)
		}
		for _, m := range c.members {
			if out := nodeLog(m); strings.Contains(out, clusterSecret) || strings.Contains(out, clusterRoot) {
				t.Fatalf("%s's debug log holds a secret:\n%s", m.id, out)
			}
		}
	})
}
