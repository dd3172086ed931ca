package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
)

// The admin door's routes behind the dashboard (docs/dashboard.md,
// docs/alarms.md), on every backend: the token list, the reserved
// settings prefix, the alarms with their roles, the ranking and the
// usage history.

type alarmView struct {
	Namespace, Limit, State string
	Usage                   float64
	Max                     int64
}

func TestDashboardRoutes(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t, func(c *nodeConfig) { c.SampleInterval = 100 * time.Millisecond })
		acme := e.tenant("acme")
		other := e.token("other", "admin")

		// The token list: ids, namespaces and roles, never a secret.
		var tokens struct {
			Tokens []map[string]any `json:"tokens"`
		}
		e.mustDo(200, "GET", "/v1/tokens", e.root, nil, &tokens)
		if len(tokens.Tokens) != 4 {
			t.Fatalf("tokens listed: %+v", tokens.Tokens)
		}
		for _, tok := range tokens.Tokens {
			if len(tok) != 4 || tok["id"] == "" || tok["created_at"] == "" {
				t.Fatalf("a listed token: %+v", tok)
			}
		}
		status, body := e.do("GET", "/v1/tokens", e.root, nil)
		for _, secret := range []string{acme.admin, acme.producer, acme.worker, other} {
			if status != 200 || strings.Contains(string(body), secret) {
				t.Fatal("GET /v1/tokens shows a secret")
			}
		}
		var revoked struct{ ID string }
		e.mustDo(201, "POST", "/v1/tokens", e.root, map[string]string{"namespace": "gone", "role": "worker"}, &revoked)
		e.mustDo(200, "GET", "/v1/tokens", e.root, nil, &tokens)
		if len(tokens.Tokens) != 5 || tokens.Tokens[0]["id"] != revoked.ID {
			t.Fatalf("the newest token is not listed first: %+v", tokens.Tokens)
		}
		e.mustDo(200, "DELETE", "/v1/tokens/"+revoked.ID, e.root, nil, nil)
		e.mustDo(200, "GET", "/v1/tokens", e.root, nil, &tokens)
		if len(tokens.Tokens) != 4 || strings.Contains(string(mustJSON(t, tokens)), revoked.ID) {
			t.Fatalf("after revoking %s: %+v", revoked.ID, tokens.Tokens)
		}
		wantRefusal(t, e, "GET", "/v1/tokens", acme.admin, 403, "listing tokens needs the root token")
		wantRefusal(t, e, "GET", "/v1/namespaces", acme.admin, 403, "the namespace ranking needs the root token")
		wantRefusal(t, e, "GET", "/v1/alarms", acme.producer, 403, "a producer token may not read alarms")
		wantRefusal(t, e, "GET", "/v1/usage/history", acme.worker, 403, "a worker token may not read usage")

		// FlexiQ's own records are hidden from the generic settings API.
		wantRefusal(t, e, "PUT", "/v1/settings/flexiq:alarm:4:acme", e.root, 403,
			`key "flexiq:alarm:4:acme": the flexiq: prefix is reserved for FlexiQ's own records (alarms, the token list)`)
		wantRefusal(t, e, "GET", "/v1/settings/flexiq:token:x", e.root, 404, `setting "flexiq:token:x" not found`)
		_, body = e.do("GET", "/v1/settings", e.root, nil)
		if strings.Contains(string(body), "flexiq:") {
			t.Fatalf("GET /v1/settings lists reserved keys: %s", body)
		}

		// An alarm at 80 %: for the namespace's admin and root, not for
		// another namespace's.
		e.setQuota(acme.admin, `{"max_pending":10,"max_running":4}`)
		e.setQuota(other, `{"max_pending":100}`)
		enqueue(t, acme.p, job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t"))
		alarms := func(token string) []alarmView {
			var out struct{ Alarms []alarmView }
			e.mustDo(200, "GET", "/v1/alarms", token, nil, &out)
			return out.Alarms
		}
		waitUntil(t, "the alarm", func() bool { a := alarms(acme.admin); return len(a) == 1 && a[0].State == "raised" })
		if a := alarms(acme.admin)[0]; a.Namespace != "acme" || a.Limit != "max_pending" || a.Usage != 8 || a.Max != 10 {
			t.Fatalf("alarm %+v", a)
		}
		if a := alarms(other); len(a) != 0 {
			t.Fatalf("another namespace's admin sees %+v", a)
		}
		if a := alarms(e.root); len(a) != 1 {
			t.Fatalf("root sees %+v", a)
		}

		// The ranking: acme (80 %) before other (0 %), with its alarm.
		var ranking struct {
			Namespaces []struct {
				Namespace, Closest string
				Percent            float64
				Alarms             []string
				Usage              struct{ Pending int64 }
			}
		}
		e.mustDo(200, "GET", "/v1/namespaces", e.root, nil, &ranking)
		if len(ranking.Namespaces) != 2 || ranking.Namespaces[0].Namespace != "acme" || ranking.Namespaces[0].Percent != 80 ||
			ranking.Namespaces[0].Closest != "max_pending" || strings.Join(ranking.Namespaces[0].Alarms, ",") != "max_pending" ||
			ranking.Namespaces[0].Usage.Pending != 8 || ranking.Namespaces[1].Namespace != "other" {
			t.Fatalf("ranking %+v", ranking.Namespaces)
		}

		// The usage history, sampled on the owner (this node).
		waitUntil(t, "a sample with 8 pending", func() bool {
			var h struct {
				Node, Owner string
				Pending     []int64
				Enqueued    []int64
				Busy        []int64
			}
			e.mustDo(200, "GET", "/v1/usage/history", acme.admin, nil, &h)
			sum := int64(0)
			for _, n := range h.Enqueued {
				sum += n
			}
			// The actor's busy share of each interval: a percent a sample.
			if len(h.Busy) != len(h.Pending) || slices.ContainsFunc(h.Busy, func(p int64) bool { return p < 0 || p > 100 }) {
				t.Fatalf("busy %v for %d samples, want a percent each", h.Busy, len(h.Pending))
			}
			return h.Node == "test" && h.Owner == "test" && len(h.Pending) > 0 && h.Pending[len(h.Pending)-1] == 8 && sum == 8
		})

		// Below 70 %: cleared, still listed (for an hour) as cleared.
		jobs := claim(t, acme.w, 2, "q")
		for _, j := range jobs {
			if err := acme.w.Ack(ctx(t), j.ID, j.Attempt, nil); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, "the alarm cleared", func() bool { a := alarms(acme.admin); return len(a) == 1 && a[0].State == "cleared" })
		// The acks in the history's completed column.
		waitUntil(t, "2 completed in the usage history", func() bool {
			var h struct{ Completed, Failed []int64 }
			e.mustDo(200, "GET", "/v1/usage/history", acme.admin, nil, &h)
			var done, failed int64
			for i := range h.Completed {
				done, failed = done+h.Completed[i], failed+h.Failed[i]
			}
			return done == 2 && failed == 0
		})
	})
}

// In a cluster the owner evaluates a namespace, and every node answers
// GET /v1/alarms and the gauge the same.
func TestDashboardAlarmsSameOnEveryNode(t *testing.T) {
	t.Setenv("FLEXIQ_SAMPLE_INTERVAL", "200ms")
	eachSharedBackend(t, func(t *testing.T) {
		c := startCluster(t, 2)
		admin, prod := c.token("acme", "admin"), c.token("acme", "producer")
		if st := c.do(c.members[0], "PUT", "/v1/quota", admin, `{"max_pending":10}`, nil); st != 200 {
			t.Fatalf("set quota: %d", st)
		}
		p := c.clients(prod, c.members[1])[0]
		for i := 0; i < 9; i++ {
			if _, err := p.Enqueue(ctx(t), api.Job{Queue: "q", Task: "t"}); err != nil {
				t.Fatal(err)
			}
		}
		read := func(m *member) string {
			var out struct {
				Alarms []json.RawMessage `json:"alarms"`
			}
			if st := c.do(m, "GET", "/v1/alarms", admin, nil, &out); st != 200 {
				t.Fatalf("GET /v1/alarms on %s: %d", m.id, st)
			}
			b, _ := json.Marshal(out.Alarms)
			return string(b)
		}
		waitUntil(t, "the alarm on every node", func() bool {
			a, b := read(c.members[0]), read(c.members[1])
			return a == b && strings.Contains(a, `"state":"raised"`) && strings.Contains(a, `"limit":"max_pending"`)
		})
		waitUntil(t, "the gauge on every node", func() bool {
			for _, m := range c.members {
				_, body := httpGetStatus(t, "http://"+m.admin+"/metrics", clusterRoot)
				if !strings.Contains(body, "\n"+`flexiq_quota_alarm{limit="max_pending",namespace="acme"} 1`+"\n") {
					return false
				}
			}
			return true
		})
	})
}

func wantRefusal(t *testing.T, e *env, method, path, token string, status int, message string) {
	t.Helper()
	st, body := e.do(method, path, token, nil)
	var out api.ErrorBody
	_ = json.Unmarshal(body, &out)
	if st != status || out.Error == nil || out.Error.Message != message {
		t.Fatalf("%s %s: %d %s, want %d %q", method, path, st, body, status, message)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitUntil polls cond, for at most 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		waitFor(20 * time.Millisecond)
	}
}

func httpGetStatus(t *testing.T, url, token string) (int, string) {
	t.Helper()
	st, b := httpGet(t, url, token)
	return st, string(b)
}
