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
	"github.com/flexiq/flexiq/retention"
	"github.com/flexiq/flexiq/store"
)

// Every producer path meets the same admission: NATS single and batch,
// events, periodic fires, replays and the auto-retry sweep.

func addTrigger(t *testing.T, e *env, token, event, queue, task string) string {
	t.Helper()
	var tr api.Trigger
	e.mustDo(http.StatusCreated, "POST", "/v1/triggers", token, map[string]string{"event": event, "queue": queue, "task": task}, &tr)
	if tr.ID == "" {
		t.Fatal("trigger without id")
	}
	return tr.ID
}

func TestEventTriggersGoThroughAdmissionAsOneCall(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		addTrigger(t, e, tn.admin, "order.created", "mail", "confirm")
		second := addTrigger(t, e, tn.admin, "order.created", "billing", "invoice")
		addTrigger(t, e, tn.admin, "order.cancelled", "mail", "sorry")

		res, err := tn.p.PublishEvent(ctx(t), "order.created", json.RawMessage(`{"order":42}`))
		if err != nil || len(res) != 2 {
			t.Fatalf("event = %v %v, want 2 results", res, err)
		}
		first, sec := e.job(tn.admin, res[0].ID), e.job(tn.admin, res[1].ID)
		if first.Queue != "mail" || sec.Queue != "billing" || string(first.Payload) != `{"order":42}` {
			t.Fatalf("jobs %s/%s payload %s, want mail then billing, in trigger order", first.Queue, sec.Queue, first.Payload)
		}
		if res, _ := tn.p.PublishEvent(ctx(t), "nobody.listens", nil); len(res) != 0 {
			t.Fatalf("event without triggers made %d jobs", len(res))
		}

		// 2 pending, cap 3: the event's two jobs would make 4: refused whole.
		e.setQuota(tn.admin, `{"max_pending":3}`)
		_, err = tn.p.PublishEvent(ctx(t), "order.created", nil)
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'mail' is full: 2 pending >= max_pending 3")
		if u := e.usage(tn.admin); u.Usage.Pending != 2 {
			t.Fatalf("pending %d after a refused event, want 2", u.Usage.Pending)
		}
		// Rate, all or nothing, in drop mode: both shed.
		e.setQuota(tn.admin, `{"enqueue_rate":"1/h","on_excess":"drop"}`)
		res, err = tn.p.PublishEvent(ctx(t), "order.created", nil)
		if err != nil || len(res) != 2 || res[0].Outcome != api.OutcomeShed || res[1].Outcome != api.OutcomeShed {
			t.Fatalf("event over rate in drop mode = %v %v, want both shed", res, err)
		}
		if j := e.job(tn.admin, res[1].ID); j.Error != "quota: rate limit exceeded for: namespace 'acme' enqueue_rate 1/h" {
			t.Fatalf("shed error %q", j.Error)
		}
		// Triggers are listed in creation order and removable.
		var list struct{ Triggers []api.Trigger }
		e.mustDo(http.StatusOK, "GET", "/v1/triggers", tn.admin, nil, &list)
		if len(list.Triggers) != 3 || list.Triggers[1].ID != second {
			t.Fatalf("triggers %+v", list.Triggers)
		}
		e.mustDo(http.StatusOK, "DELETE", "/v1/triggers/"+second, tn.admin, nil, nil)
		e.mustDo(http.StatusOK, "DELETE", "/v1/quota", tn.admin, nil, nil)
		if res, _ := tn.p.PublishEvent(ctx(t), "order.created", nil); len(res) != 1 {
			t.Fatalf("after removing a trigger the event made %d jobs, want 1", len(res))
		}
		if st, _ := e.do("POST", "/v1/triggers", tn.producer, map[string]string{"event": "x", "queue": "q", "task": "t"}); st != http.StatusForbidden {
			t.Fatalf("producer created a trigger: %d", st)
		}
	})
}

func TestPeriodicFiresOncePerTickThroughAdmission(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.mustDo(http.StatusCreated, "POST", "/v1/periodic", tn.admin,
			map[string]any{"name": "digest", "cron": "@every 1h", "queue": "mail", "task": "digest", "payload": map[string]int{"v": 1}}, nil)
		if st, _ := e.do("POST", "/v1/periodic", tn.admin, map[string]any{"name": "bad", "cron": "every hour", "queue": "q", "task": "t"}); st != http.StatusBadRequest {
			t.Fatalf("bad cron accepted: %d", st)
		}
		items, err := e.node.Store.ConfigList(context.Background(), "acme", store.KindPeriodic)
		if err != nil || len(items) != 1 {
			t.Fatalf("stored periodic jobs: %v %v", items, err)
		}
		created := items[0].UpdatedAt
		p := maintenance.NewPeriodic(e.node.Store, e.node.Actors, nil, nil)
		run := func(at time.Time) []maintenance.Fire {
			t.Helper()
			fires, err := p.RunOnce(ctx(t), at)
			if err != nil {
				t.Fatal(err)
			}
			return fires
		}
		if f := run(created.Add(59 * time.Minute)); len(f) != 0 {
			t.Fatalf("fired before its first tick: %+v", f)
		}
		f := run(created.Add(61 * time.Minute))
		if len(f) != 1 || f[0].Outcome != "enqueued" {
			t.Fatalf("first tick = %+v, want one enqueued fire", f)
		}
		if again := run(created.Add(62 * time.Minute)); len(again) != 0 {
			t.Fatalf("fired twice in one tick: %+v", again)
		}
		// A restart in between changes nothing: the tick is recorded in the store.
		p2 := maintenance.NewPeriodic(e.node.Store, e.node.Actors, nil, nil)
		if again, _ := p2.RunOnce(ctx(t), created.Add(62*time.Minute)); len(again) != 0 {
			t.Fatalf("a fresh firer fired the same tick again: %+v", again)
		}
		// Five missed ticks give one catch-up fire.
		f = run(created.Add(6*time.Hour + time.Minute))
		if len(f) != 1 {
			t.Fatalf("after downtime %d fires, want 1 catch-up fire", len(f))
		}
		if u := e.usage(tn.admin); u.Usage.Pending != 2 {
			t.Fatalf("pending %d, want 2 fires", u.Usage.Pending)
		}
		// Over quota: refused and counted, or shed in drop mode.
		e.setQuota(tn.admin, `{"max_pending":2}`)
		f = run(created.Add(7*time.Hour + time.Minute))
		if len(f) != 1 || f[0].Outcome != "refused" || f[0].Err == nil || f[0].Err.Message != "queue 'mail' is full: 2 pending >= max_pending 2" {
			t.Fatalf("fire over quota = %+v", f)
		}
		e.setQuota(tn.admin, `{"max_pending":2,"on_excess":"drop"}`)
		f = run(created.Add(8*time.Hour + time.Minute))
		if len(f) != 1 || f[0].Outcome != "shed" {
			t.Fatalf("fire over quota in drop mode = %+v", f)
		}
		var list struct{ Periodic []api.Periodic }
		e.mustDo(http.StatusOK, "GET", "/v1/periodic", tn.admin, nil, &list)
		if len(list.Periodic) != 1 || list.Periodic[0].Cron != "@every 1h" {
			t.Fatalf("periodic list %+v", list.Periodic)
		}
		e.mustDo(http.StatusOK, "DELETE", "/v1/periodic/digest", tn.admin, nil, nil)
		if f := run(created.Add(20 * time.Hour)); len(f) != 0 {
			t.Fatalf("a removed schedule fired: %+v", f)
		}
	})
}

// killJob claims id's job and nacks it to death.
func killJob(t *testing.T, tn *tenant, queue string, retry bool) string {
	t.Helper()
	one := int64(1)
	j := job(queue, "t")
	j.MaxAttempts = &one
	id := enqueue(t, tn.p, j)[0].ID
	got := claim(t, tn.w, 1, queue)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("claim got %v, want %s", ids(got), id)
	}
	rep, err := tn.w.Nack(ctx(t), id, got[0].Attempt, "boom", retry)
	if err != nil || rep.Status != api.StatusDead {
		t.Fatalf("nack = %+v %v, want dead", rep, err)
	}
	return id
}

func TestDeadLetterReplayGoesThroughAdmission(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		a, b := killJob(t, tn, "q", true), killJob(t, tn, "q", true)
		e.setQuota(tn.admin, `{"max_pending":1}`)
		enqueue(t, tn.p, job("other", "t"))
		// Reject: the replay fails and the dead letter stays as it was.
		_, err := tn.a.Replay(ctx(t), a)
		wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 1 pending >= max_pending 1")
		if j := e.job(tn.admin, a); j.Status != api.StatusDead || j.Error != "boom" {
			t.Fatalf("refused replay changed the dead letter: %s %q", j.Status, j.Error)
		}
		// Drop: the replay succeeds and marks the dead letter shed.
		e.setQuota(tn.admin, `{"max_pending":1,"on_excess":"drop"}`)
		res, err := tn.a.Replay(ctx(t), a)
		if err != nil || len(res) != 1 || res[0].Outcome != api.OutcomeShed {
			t.Fatalf("replay in drop mode = %v %v", res, err)
		}
		if j := e.job(tn.admin, a); j.Status != api.StatusDead || string(j.DeadMeta) != `{"shed":"quota"}` {
			t.Fatalf("shed replay: %s %s", j.Status, j.DeadMeta)
		}
		// Admitted: pending again, same id, attempts reset. Over HTTP this time.
		e.mustDo(http.StatusOK, "DELETE", "/v1/quota", tn.admin, nil, nil)
		var rep api.EnqueueReply
		e.mustDo(http.StatusOK, "POST", "/v1/dead/replay", tn.admin, map[string][]string{"ids": {b}}, &rep)
		if len(rep.Results) != 1 || rep.Results[0].Outcome != api.OutcomeEnqueued || rep.Results[0].ID != b {
			t.Fatalf("replay = %+v", rep)
		}
		if j := e.job(tn.admin, b); j.Status != api.StatusPending || j.Attempt != 0 {
			t.Fatalf("replayed job %s attempt %d, want pending 0", j.Status, j.Attempt)
		}
		// Unknown ids and live jobs are refused whole, nothing written.
		_, err = tn.a.Replay(ctx(t), "nope")
		wantAPIError(t, err, api.CodeNotFound, api.ReasonUnknownJob, "job 'nope' not found")
		_, err = tn.a.Replay(ctx(t), b)
		wantAPIError(t, err, api.CodeFailedPrecondition, "", "job '"+b+"' is pending, not a dead letter")
		_, err = tn.p.Replay(ctx(t), b)
		wantAPIError(t, err, api.CodePermissionDenied, "", "")
	})
}

func TestAutoRetrySweep(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.mustDo(http.StatusOK, "PUT", "/v1/queues/q", tn.admin, `{"dead_retry_after":"1h","dead_retry_max":1}`, nil)
		var qs map[string]any
		e.mustDo(http.StatusOK, "GET", "/v1/queues/q", tn.admin, nil, &qs)
		if qs["dead_retry_after"] != "1h0m0s" {
			t.Fatalf("queue settings %v, want the duration as Go prints it", qs)
		}
		retryable := killJob(t, tn, "q", true)
		noRetry := killJob(t, tn, "q", false)
		e.mustDo(http.StatusOK, "PUT", "/v1/quota", tn.admin, `{"max_pending":0,"on_excess":"drop"}`, nil)
		shed := enqueue(t, tn.p, job("q", "t"))[0].ID
		e.mustDo(http.StatusOK, "DELETE", "/v1/quota", tn.admin, nil, nil)

		sweep := maintenance.NewAutoRetry(e.node.Store, e.node.Actors, nil)
		now := time.Now()
		if r, _ := sweep.RunOnce(ctx(t), now); len(r) != 0 {
			t.Fatalf("replayed before dead_retry_after: %+v", r)
		}
		r, err := sweep.RunOnce(ctx(t), now.Add(time.Hour+time.Minute))
		if err != nil || len(r) != 1 || r[0].ID != retryable || r[0].Outcome != api.OutcomeEnqueued {
			t.Fatalf("sweep = %+v %v, want only %s replayed (never shed %s or retry:false %s)", r, err, retryable, shed, noRetry)
		}
		// It dies again; dead_retry_max 1 means no second replay.
		got := claim(t, tn.w, 1, "q")
		if len(got) != 1 || got[0].ID != retryable {
			t.Fatalf("claim after replay: %v", ids(got))
		}
		if _, err := tn.w.Nack(ctx(t), retryable, got[0].Attempt, "boom", true); err != nil {
			t.Fatal(err)
		}
		if r, _ := sweep.RunOnce(ctx(t), now.Add(3*time.Hour)); len(r) != 0 {
			t.Fatalf("replayed past dead_retry_max: %+v", r)
		}
		// A replay refused by quota leaves the dead letter; the next sweep tries
		// again once there is room.
		e.mustDo(http.StatusOK, "PUT", "/v1/queues/q", tn.admin, `{"dead_retry_after":"1h","dead_retry_max":5}`, nil)
		e.setQuota(tn.admin, `{"max_pending":0}`)
		r, _ = sweep.RunOnce(ctx(t), now.Add(3*time.Hour))
		if len(r) != 1 || r[0].Err == nil || r[0].Err.Reason != api.ReasonQueueFull {
			t.Fatalf("sweep over quota = %+v, want a QUEUE_FULL refusal", r)
		}
		if j := e.job(tn.admin, retryable); j.Status != api.StatusDead {
			t.Fatalf("refused auto-retry changed the job: %s", j.Status)
		}
	})
}

func TestRetentionTTLAndCeilingsConvergeInBatches(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		st := e.node.Store
		ctxb := context.Background()
		base := time.Now().Add(-time.Hour)
		// 2500 completed jobs in acme, finished a second apart, and 10 in globex.
		complete := func(ns string, n int) {
			jobs := make([]store.NewJob, n)
			for i := range jobs {
				jobs[i] = store.NewJob{ID: fmt.Sprintf("%s-%05d", ns, i), Queue: "q", Task: "t", RunAt: base}
			}
			if _, err := st.JobEnqueueMany(ctxb, store.JobEnqueueManyParams{Namespace: ns, Now: base, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
				t.Fatal(err)
			}
			// The leases run an hour past the test's start: a lease that
			// ran out meanwhile (base + 1 h was the start itself) would be
			// taken back by the node's sweep of expired leases while the
			// loop below completes the jobs, and its completion refused.
			claimed, err := st.JobClaimMany(ctxb, store.JobClaimManyParams{Namespace: ns, Now: base, Claims: []store.ClaimSpec{{Queues: []string{"q"}, Max: n, LeaseUntil: time.Now().Add(time.Hour)}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(claimed[0]) != n {
				t.Fatalf("%s: claimed %d of %d jobs", ns, len(claimed[0]), n)
			}
			for i, j := range claimed[0] {
				applied, err := st.JobUpdateMany(ctxb, store.JobUpdateManyParams{Namespace: ns, Now: base.Add(time.Duration(i) * time.Second),
					Updates: []store.JobUpdate{{ID: j.ID, Attempt: j.Attempt, Kind: store.UpdateComplete}}})
				if err != nil {
					t.Fatal(err)
				}
				if !applied[0] {
					t.Fatalf("%s: completing claimed job %s (attempt %d) did not apply", ns, j.ID, j.Attempt)
				}
			}
			if cnt, err := st.JobCount(ctxb, ns); err != nil || cnt.Completed != int64(n) {
				t.Fatalf("%s: %d completed, want %d (%v)", ns, cnt.Completed, n, err)
			}
		}
		complete("acme", 2500)
		complete("globex", 10)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_archived_rows":100}`)
		// A namespace whose quota is unreadable is skipped, not trimmed.
		if _, err := st.SettingPut(ctxb, store.SettingPutParams{Key: quota.Key("globex"), Value: []byte(`{"max_archived_rows":"zero"}`), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		c := retention.New(retention.Config{Batch: 1000}, st, nil, nil, nil, nil)
		var deleted []int64
		for tick := 0; tick < 5; tick++ {
			res, err := c.RunOnce(ctxb, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Skipped) != 1 || res.Skipped[0] != "globex" {
				t.Fatalf("skipped %v, want [globex]", res.Skipped)
			}
			deleted = append(deleted, res.Ceiling["acme"][api.StatusCompleted])
		}
		if fmt.Sprint(deleted) != "[1000 1000 400 0 0]" {
			t.Fatalf("deleted per tick %v, want [1000 1000 400 0 0]", deleted)
		}
		// The newest 100 remain.
		left, err := st.JobList(ctxb, store.JobListParams{Namespace: "acme", Status: api.StatusCompleted})
		if err != nil || len(left) != 100 {
			t.Fatalf("left %d, want 100", len(left))
		}
		for _, j := range left {
			if j.ID < "acme-02400" {
				t.Fatalf("kept %s, an older row than the newest 100", j.ID)
			}
		}
		if cnt, _ := st.JobCount(ctxb, "globex"); cnt.Completed != 10 {
			t.Fatalf("globex lost rows: %d left", cnt.Completed)
		}
		// TTL: everything finished more than the archive TTL ago goes, in
		// every namespace but the one stopped by its unreadable quota,
		// whose rows are the oldest: the sweep looks past them.
		c = retention.New(retention.Config{ArchiveTTL: time.Minute, Batch: 7}, st, nil, nil, nil, nil)
		res, err := c.RunOnce(ctxb, base.Add(2*time.Hour))
		if err != nil || res.TTLCompleted != 100 {
			t.Fatalf("ttl sweep = %+v %v, want acme's 100 deleted", res, err)
		}
		if cnt, _ := st.JobCount(ctxb, "globex"); cnt.Completed != 10 {
			t.Fatalf("the TTL sweep deleted rows of a namespace whose quota is unreadable: %d of 10 left", cnt.Completed)
		}
		// Its quota mended, its rows go too.
		if _, err := st.SettingPut(ctxb, store.SettingPutParams{Key: quota.Key("globex"), Value: []byte(`{}`), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if res, err := c.RunOnce(ctxb, base.Add(2*time.Hour)); err != nil || res.TTLCompleted != 10 {
			t.Fatalf("ttl sweep after the quota was mended = %+v %v, want globex's 10 deleted", res, err)
		}
	})
}

// What the admin door cannot store as the caller sent it is refused, naming
// the field: bytes that are not UTF-8 (JSON must be), a schedule that would
// silently fire every second. Every error body carries a reason, "" when
// none applies.
func TestAdminRefusesWhatItCannotStoreAsSent(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")

	st, body := e.do("POST", "/v1/tokens", e.root, []byte("{\"namespace\":\"\xff\xfe\",\"role\":\"admin\"}"))
	var eb api.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || st != http.StatusBadRequest || eb.Error == nil ||
		eb.Error.Reason != api.ReasonBadRequest || eb.Error.Message != "request body is not valid JSON: it is not UTF-8" {
		t.Fatalf("token for a namespace that is not UTF-8: %d %s", st, body)
	}

	for _, spec := range []string{"@every 0s", "@every -1s", "@every 500ms"} {
		st, body := e.do("POST", "/v1/periodic", tn.admin, map[string]any{"name": "fast", "cron": spec, "queue": "q", "task": "t"})
		if st != http.StatusBadRequest || !strings.Contains(string(body), `cron: @every takes a duration of at least 1s`) {
			t.Fatalf("cron %q: %d %s", spec, st, body)
		}
	}
	items, err := e.node.Store.ConfigList(context.Background(), "acme", store.KindPeriodic)
	if err != nil || len(items) != 0 {
		t.Fatalf("refused schedules were stored: %v %v", items, err)
	}
	e.mustDo(http.StatusCreated, "POST", "/v1/periodic", tn.admin, map[string]any{"name": "slow", "cron": "@every 1s", "queue": "q", "task": "t"}, nil)

	st, body = e.do("GET", "/v1/quota", "", nil)
	if st != http.StatusUnauthorized || !strings.Contains(string(body), `"reason":""`) {
		t.Fatalf("401 body %s: want a reason key, empty", body)
	}
}
