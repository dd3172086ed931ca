package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
)

func TestDepthRejectsWithExactMessageAndWritesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_pending":3}`)

		enqueue(t, tn.p, job("emails", "send"), job("emails", "send"))
		// A batch of two with 2 pending would make 4 > 3: refused whole, and
		// the message shows the count before the call, below the cap.
		_, err := tn.p.EnqueueMany(ctx(t), []api.Job{job("emails", "send"), job("other", "x")})
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'emails' is full: 2 pending >= max_pending 3")
		if u := e.usage(tn.admin); u.Usage.Pending != 2 {
			t.Fatalf("pending after a refused batch = %d, want 2 (nothing of it written)", u.Usage.Pending)
		}
		enqueue(t, tn.p, job("emails", "send"))
		_, err = tn.p.Enqueue(ctx(t), job("emails", "send"))
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'emails' is full: 3 pending >= max_pending 3")

		// Claimed jobs no longer count: one slot frees.
		if got := claim(t, tn.w, 1, "emails"); len(got) != 1 {
			t.Fatalf("claimed %d jobs, want 1", len(got))
		}
		enqueue(t, tn.p, job("emails", "send"))
	})
}

func TestZeroMaxPendingRefusesEverything(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_pending":0}`)
		_, err := tn.p.Enqueue(ctx(t), job("q", "t"))
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 0 pending >= max_pending 0")
	})
}

func TestRateLimitAndDepthFirst(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"enqueue_rate":"3/h"}`)
		enqueue(t, tn.p, job("q", "t"), job("q", "t")) // 2 tokens
		// A batch of two needs two tokens; one is left: refused whole.
		_, err := tn.p.EnqueueMany(ctx(t), []api.Job{job("q", "t"), job("q", "t")})
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonRateLimited, "rate limit exceeded for: namespace 'acme' enqueue_rate 3/h")
		if u := e.usage(tn.admin); u.Usage.Pending != 2 {
			t.Fatalf("pending = %d, want 2", u.Usage.Pending)
		}

		// Depth first: a call refused for depth spends no token.
		e.mustDo(http.StatusOK, "PATCH", "/v1/quota", tn.admin, `{"max_pending":2}`, nil)
		_, err = tn.p.Enqueue(ctx(t), job("q", "t"))
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 2 pending >= max_pending 2")
		e.mustDo(http.StatusOK, "PATCH", "/v1/quota", tn.admin, `{"max_pending":null}`, nil)
		enqueue(t, tn.p, job("q", "t")) // the last token is still there
		_, err = tn.p.Enqueue(ctx(t), job("q", "t"))
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonRateLimited, "rate limit exceeded for: namespace 'acme' enqueue_rate 3/h")
	})
}

func TestDropModeShedsJobsThatNoWorkerSeesAndThatHoldNoKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_pending":1,"on_excess":"drop"}`)
		first := enqueue(t, tn.p, job("q", "t"))
		if first[0].Outcome != api.OutcomeEnqueued {
			t.Fatalf("first outcome %s, want enqueued", first[0].Outcome)
		}
		keyed := job("q", "t")
		keyed.UniqueKey = "order-7"
		keyed.Debounce = &api.Debounce{Key: "d-7", WindowMS: 60000}
		res := enqueue(t, tn.p, keyed, job("q", "t"))
		for i, r := range res {
			if r.Outcome != api.OutcomeShed || r.ID == "" {
				t.Fatalf("result %d = %+v, want shed with an id", i, r)
			}
		}
		shed := e.job(tn.admin, res[0].ID)
		wantErr := "quota: queue 'q' is full: 1 pending >= max_pending 1"
		if shed.Status != api.StatusDead || shed.Error != wantErr {
			t.Fatalf("shed job status %s error %q, want dead %q", shed.Status, shed.Error, wantErr)
		}
		var meta map[string]string
		if err := json.Unmarshal(shed.DeadMeta, &meta); err != nil || meta["shed"] != "quota" || len(meta) != 1 {
			t.Fatalf("dead_meta %s, want {\"shed\":\"quota\"}", shed.DeadMeta)
		}
		if shed.UniqueKey != "" || shed.Debounce != nil {
			t.Fatalf("shed job holds keys: unique %q debounce %+v", shed.UniqueKey, shed.Debounce)
		}
		// The dead-letter listing finds it as shed.
		var dead JobsList
		e.mustDo(http.StatusOK, "GET", "/v1/jobs?status=dead&shed=true", tn.admin, nil, &dead)
		if len(dead.Jobs) != 2 {
			t.Fatalf("shed dead letters listed: %d, want 2", len(dead.Jobs))
		}
		// No worker ever receives it: only the admitted job goes out.
		got := claim(t, tn.w, 10, "q")
		if len(got) != 1 || got[0].ID != first[0].ID {
			t.Fatalf("claimed %v, want only %s", ids(got), first[0].ID)
		}
		// It holds no unique key: the same work enqueues once there is room.
		e.mustDo(http.StatusOK, "DELETE", "/v1/quota", tn.admin, nil, nil)
		again := enqueue(t, tn.p, keyed)
		if again[0].Outcome != api.OutcomeEnqueued || again[0].ID == res[0].ID {
			t.Fatalf("re-enqueue of shed work = %+v, want a new enqueued job", again[0])
		}
	})
}

// JobsList is a job listing.
type JobsList struct {
	Jobs []api.Job `json:"jobs"`
}

func ids(jobs []api.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestAdmissionRunsBeforeDeduplication(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		j := job("q", "t")
		j.ID = "order-1"
		j.UniqueKey = "u-1"
		enqueue(t, tn.p, j)
		// Not over quota: a duplicate is deduplicated.
		if r := enqueue(t, tn.p, j); r[0].Outcome != api.OutcomeDeduplicated || r[0].ID != "order-1" {
			t.Fatalf("duplicate = %+v, want deduplicated order-1", r[0])
		}
		e.setQuota(tn.admin, `{"max_pending":1}`)
		// Over quota: the duplicate is refused, not deduplicated.
		_, err := tn.p.Enqueue(ctx(t), j)
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 1 pending >= max_pending 1")
		k := job("q", "t")
		k.UniqueKey = "u-1"
		_, err = tn.p.Enqueue(ctx(t), k)
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "")
		// Debounce coalescing too.
		e.mustDo(http.StatusOK, "DELETE", "/v1/quota", tn.admin, nil, nil)
		d := job("q", "t")
		d.Debounce = &api.Debounce{Key: "dk", WindowMS: 60000}
		enqueue(t, tn.p, d)
		e.setQuota(tn.admin, `{"max_pending":2}`)
		_, err = tn.p.Enqueue(ctx(t), d)
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 2 pending >= max_pending 2")
	})
}

// In one group commit, a call that turns out to be a duplicate must not
// count against a later call's depth: the result equals deciding each call
// alone, in order.
func TestDepthIsExactAcrossDuplicatesInOneBurst(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		dup := job("q", "t")
		dup.ID = "same"
		enqueue(t, tn.p, dup)
		e.setQuota(tn.admin, `{"max_pending":2}`)
		// Fire many concurrent calls: duplicates of "same" and new jobs. Exactly
		// one new job fits (pending 1, cap 2), whatever lands in which group.
		const n = 40
		type result struct {
			out api.EnqueueResult
			err error
		}
		results := make(chan result, n)
		for i := 0; i < n; i++ {
			go func(i int) {
				j := dup
				if i%2 == 1 {
					j = job("q", "t")
					j.ID = fmt.Sprintf("new-%d", i)
				}
				r, err := tn.p.Enqueue(ctx(t), j)
				results <- result{r, err}
			}(i)
		}
		enqueued, deduped := 0, 0
		for i := 0; i < n; i++ {
			r := <-results
			switch {
			case r.err != nil:
				wantAPIError(t, r.err, api.CodeResourceExhausted, api.ReasonQueueFull, "")
			case r.out.Outcome == api.OutcomeEnqueued:
				enqueued++
			case r.out.Outcome == api.OutcomeDeduplicated:
				deduped++
			}
		}
		if enqueued != 1 {
			t.Fatalf("%d new jobs enqueued, want exactly 1", enqueued)
		}
		if u := e.usage(tn.admin); u.Usage.Pending != 2 {
			t.Fatalf("pending = %d, want 2", u.Usage.Pending)
		}
		_ = deduped
	})
}

func TestQuotaDocumentValidationAndRevisions(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		var q struct {
			Namespace string          `json:"namespace"`
			Quota     json.RawMessage `json:"quota"`
			Revision  int64           `json:"revision"`
		}
		e.mustDo(http.StatusOK, "GET", "/v1/quota", tn.admin, nil, &q)
		if q.Namespace != "acme" || string(q.Quota) != "{}" || q.Revision != 0 {
			t.Fatalf("fresh quota = %+v, want acme {} revision 0", q)
		}
		e.mustDo(http.StatusOK, "PUT", "/v1/quota", tn.admin, `{"max_pending":10,"enqueue_rate":"500/s"}`, &q)
		if q.Revision != 1 {
			t.Fatalf("revision after PUT = %d, want 1", q.Revision)
		}
		for _, bad := range []string{`{"MAX_PENDING":1}`, `{"max_pending":-1}`, `{"max_pending":"1"}`, `{"enqueue_rate":"5/d"}`, `{"on_excess":"DROP"}`, `[1]`} {
			status, body := e.do("PUT", "/v1/quota", tn.admin, bad)
			var eb api.ErrorBody
			if err := json.Unmarshal(body, &eb); err != nil || status != 400 || eb.Error.Code != api.CodeInvalidArgument || eb.Error.Reason != api.ReasonInvalidQuota {
				t.Fatalf("PUT %s: %d %s, want 400 INVALID_ARGUMENT/INVALID_QUOTA", bad, status, body)
			}
		}
		status, body := e.do("PUT", "/v1/quota", tn.admin, `not json`)
		if status != 400 || !json.Valid(body) {
			t.Fatalf("non-JSON body: %d %s", status, body)
		}
		e.mustDo(http.StatusOK, "GET", "/v1/quota", tn.admin, nil, &q)
		if q.Revision != 1 || string(q.Quota) != `{"max_pending":10,"enqueue_rate":"500/s"}` {
			t.Fatalf("after refused writes: %+v %s, want the document unchanged at revision 1", q, q.Quota)
		}
		e.mustDo(http.StatusOK, "PATCH", "/v1/quota", tn.admin, `{"max_pending":null,"max_running":5}`, &q)
		if q.Revision != 2 || string(q.Quota) != `{"enqueue_rate":"500/s","max_running":5}` {
			t.Fatalf("after PATCH: %+v %s", q, q.Quota)
		}
		e.mustDo(http.StatusOK, "DELETE", "/v1/quota", tn.admin, nil, &q)
		if q.Revision != 3 || string(q.Quota) != "{}" {
			t.Fatalf("after DELETE: %+v %s", q, q.Quota)
		}

		// The audit trail has each write, newest first, with before and after.
		var audit struct {
			Entries []struct {
				Actor, Action, TargetKind, Target string
				Before, After                     json.RawMessage
			} `json:"entries"`
		}
		e.mustDo(http.StatusOK, "GET", "/v1/audit", tn.admin, nil, &audit)
		if len(audit.Entries) != 3 {
			t.Fatalf("audit has %d entries, want 3 (only successful writes)", len(audit.Entries))
		}
		want := []struct{ action, before, after string }{
			{"quota.clear", `{"enqueue_rate":"500/s","max_running":5}`, "null"},
			{"quota.set", `{"max_pending":10,"enqueue_rate":"500/s"}`, `{"enqueue_rate":"500/s","max_running":5}`},
			{"quota.set", "null", `{"max_pending":10,"enqueue_rate":"500/s"}`},
		}
		for i, w := range want {
			got := audit.Entries[i]
			if got.Action != w.action || string(got.Before) != w.before || string(got.After) != w.after || got.Target != "acme" {
				t.Fatalf("audit[%d] = %s %s -> %s (target %s), want %s %s -> %s", i, got.Action, got.Before, got.After, got.Target, w.action, w.before, w.after)
			}
		}
		// Another namespace's trail does not show them.
		other := e.tenant("globex")
		e.mustDo(http.StatusOK, "GET", "/v1/audit", other.admin, nil, &audit)
		if len(audit.Entries) != 0 {
			t.Fatalf("globex sees %d audit entries of acme", len(audit.Entries))
		}
	})
}

func TestNamespaceIsolation(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		a, b := e.tenant("acme"), e.tenant("globex")
		e.setQuota(a.admin, `{"max_pending":0}`)
		// acme's quota does not touch globex.
		res := enqueue(t, b.p, job("q", "t"))
		if st, _ := e.do("GET", "/v1/jobs/"+res[0].ID, a.admin, nil); st != http.StatusNotFound {
			t.Fatalf("acme reads globex's job: status %d, want 404", st)
		}
		if got := claim(t, a.w, 10, "q"); len(got) != 0 {
			t.Fatalf("acme's worker claimed globex's jobs: %v", ids(got))
		}
		if got := claim(t, b.w, 10, "q"); len(got) != 1 {
			t.Fatalf("globex's worker claimed %d, want 1", len(got))
		}
		// Roles: a producer may not claim, a worker may not enqueue, neither
		// may read the quota; a wrong token is UNAUTHENTICATED.
		_, err := a.p.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}})
		wantAPIError(t, err, api.CodePermissionDenied, "", "")
		_, err = a.w.Enqueue(ctx(t), job("q", "t"))
		wantAPIError(t, err, api.CodePermissionDenied, "", "")
		if st, _ := e.do("GET", "/v1/quota", a.producer, nil); st != http.StatusForbidden {
			t.Fatalf("producer reads quota: %d, want 403", st)
		}
		// The bus refuses the connection itself.
		_, err = client.Connect(e.node.NATSURL(), "fq_nonsense")
		wantAPIError(t, err, api.CodeUnauthenticated, "", api.Unauthenticated().Message)
		if st, _ := e.do("GET", "/v1/quota", "", nil); st != http.StatusUnauthorized {
			t.Fatalf("no token: %d, want 401", st)
		}
		// Only root creates tokens.
		if st, _ := e.do("POST", "/v1/tokens", a.admin, map[string]string{"namespace": "globex", "role": "admin"}); st != http.StatusForbidden {
			t.Fatalf("namespace admin created a token: %d, want 403", st)
		}
		// A revoked token stops working at once.
		var tok struct{ ID, Token string }
		e.mustDo(http.StatusCreated, "POST", "/v1/tokens", e.root, map[string]string{"namespace": "acme", "role": "admin"}, &tok)
		e.mustDo(http.StatusOK, "GET", "/v1/quota", tok.Token, nil, nil)
		e.mustDo(http.StatusOK, "DELETE", "/v1/tokens/"+tok.ID, e.root, nil, nil)
		if st, _ := e.do("GET", "/v1/quota", tok.Token, nil); st != http.StatusUnauthorized {
			t.Fatalf("revoked token: %d, want 401", st)
		}
	})
}

func TestSettingsAPIHidesQuotaKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_pending":5}`)
		e.setQuota(e.root, `{"max_pending":6}`)
		e.mustDo(http.StatusOK, "PUT", "/v1/settings/ui.theme", e.root, `{"dark":true}`, nil)
		var list struct {
			Settings []struct {
				Key   string
				Value json.RawMessage
			}
		}
		e.mustDo(http.StatusOK, "GET", "/v1/settings", e.root, nil, &list)
		if len(list.Settings) != 1 || list.Settings[0].Key != "ui.theme" || string(list.Settings[0].Value) != `{"dark":true}` {
			t.Fatalf("settings list = %+v, want only ui.theme", list.Settings)
		}
		for _, key := range []string{"quota:default", "quota:ns:4:acme", "quota:anything"} {
			if st, _ := e.do("GET", "/v1/settings/"+key, e.root, nil); st != http.StatusNotFound {
				t.Fatalf("GET %s: %d, want 404", key, st)
			}
			if st, _ := e.do("PUT", "/v1/settings/"+key, e.root, `{}`); st != http.StatusForbidden {
				t.Fatalf("PUT %s: %d, want 403", key, st)
			}
			if st, _ := e.do("DELETE", "/v1/settings/"+key, e.root, nil); st != http.StatusForbidden {
				t.Fatalf("DELETE %s: %d, want 403", key, st)
			}
		}
		if st, _ := e.do("GET", "/v1/settings", tn.admin, nil); st != http.StatusForbidden {
			t.Fatalf("namespace admin lists settings: %d, want 403", st)
		}
		var one struct {
			Key   string
			Value json.RawMessage
		}
		e.mustDo(http.StatusOK, "GET", "/v1/settings/ui.theme", e.root, nil, &one)
		e.mustDo(http.StatusOK, "DELETE", "/v1/settings/ui.theme", e.root, nil, nil)
		if st, _ := e.do("GET", "/v1/settings/ui.theme", e.root, nil); st != http.StatusNotFound {
			t.Fatalf("deleted setting: %d, want 404", st)
		}
		// The quota documents were not touched by any of it.
		var q struct{ Quota json.RawMessage }
		e.mustDo(http.StatusOK, "GET", "/v1/quota", tn.admin, nil, &q)
		if string(q.Quota) != `{"max_pending":5}` {
			t.Fatalf("acme quota = %s", q.Quota)
		}
	})
}
