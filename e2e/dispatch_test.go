package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
)

func TestMaxRunningHoldsJobsBackWithoutSpendingAttempts(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_running":2}`)
		res := enqueue(t, tn.p, job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t"))
		got := claim(t, tn.w, 10, "q")
		if len(got) != 2 {
			t.Fatalf("claimed %d, want 2 (max_running)", len(got))
		}
		for _, j := range got {
			if j.Attempt != 1 || j.Status != api.StatusRunning {
				t.Fatalf("claimed job %s attempt %d status %s, want attempt 1 running", j.ID, j.Attempt, j.Status)
			}
		}
		if more := claim(t, tn.w, 10, "q"); len(more) != 0 {
			t.Fatalf("claimed %d more at the cap, want 0", len(more))
		}
		// The held-back jobs are pending with attempt 0, offered again when a
		// slot frees.
		for _, r := range res[2:] {
			if j := e.job(tn.admin, r.ID); j.Status != api.StatusPending || j.Attempt != 0 {
				t.Fatalf("held-back job %s: %s attempt %d, want pending attempt 0", r.ID, j.Status, j.Attempt)
			}
		}
		if err := tn.w.Ack(ctx(t), got[0].ID, got[0].Attempt, nil); err != nil {
			t.Fatal(err)
		}
		next := claim(t, tn.w, 10, "q")
		if len(next) != 1 || next[0].Attempt != 1 {
			t.Fatalf("after an ack claimed %v, want one job at attempt 1", ids(next))
		}
		// Zero dispatches nothing.
		e.setQuota(tn.admin, `{"max_running":0}`)
		if err := tn.w.Ack(ctx(t), got[1].ID, got[1].Attempt, nil); err != nil {
			t.Fatal(err)
		}
		if z := claim(t, tn.w, 10, "q"); len(z) != 0 {
			t.Fatalf("max_running 0 dispatched %d jobs", len(z))
		}
		// Raising the cap lets the rest go.
		e.setQuota(tn.admin, `{}`)
		if rest := claim(t, tn.w, 10, "q"); len(rest) != 1 {
			t.Fatalf("after clearing the cap claimed %d, want 1", len(rest))
		}
	})
}

func TestQueueAndTaskCaps(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.mustDo(http.StatusOK, "PUT", "/v1/queues/mail", tn.admin, `{"max_concurrent":1}`, nil)
		e.mustDo(http.StatusOK, "PUT", "/v1/tasks/resize", tn.admin, `{"max_concurrent":2}`, nil)
		var qs map[string]any
		e.mustDo(http.StatusOK, "GET", "/v1/queues/mail", tn.admin, nil, &qs)
		if qs["max_concurrent"] != float64(1) {
			t.Fatalf("queue settings = %v", qs)
		}
		if st, body := e.do("PUT", "/v1/queues/mail", tn.admin, `{"max_concurrent":-1}`); st != 400 {
			t.Fatalf("negative max_concurrent: %d %s, want 400", st, body)
		}
		enqueue(t, tn.p, job("mail", "send"), job("mail", "send"), job("img", "resize"), job("img", "resize"), job("img", "resize"), job("img", "thumb"))
		got := claim(t, tn.w, 10, "mail", "img")
		perQueue, perTask := map[string]int{}, map[string]int{}
		for _, j := range got {
			perQueue[j.Queue]++
			perTask[j.Task]++
		}
		if perQueue["mail"] != 1 || perTask["resize"] != 2 || perTask["thumb"] != 1 || len(got) != 4 {
			t.Fatalf("claimed queues %v tasks %v, want mail 1, resize 2, thumb 1", perQueue, perTask)
		}
		// A task at its cap does not block other tasks queued behind it.
		enqueue(t, tn.p, job("img", "thumb"))
		if more := claim(t, tn.w, 10, "mail", "img"); len(more) != 1 || more[0].Task != "thumb" {
			t.Fatalf("claimed %v, want the one thumb job", more)
		}
	})
}

func TestClaimOrderAndLongPoll(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		low, high := job("q", "t"), job("q", "t")
		low.ID, high.ID = "low", "high"
		high.Priority = 5
		later := job("q", "t")
		later.ID = "later"
		later.DelayMS = 60000
		enqueue(t, tn.p, low, later, high)
		got := claim(t, tn.w, 10, "q")
		if len(got) != 2 || got[0].ID != "high" || got[1].ID != "low" {
			t.Fatalf("claim order %v, want [high low] (delayed job not due)", ids(got))
		}
		// A long poll is answered as soon as a job arrives.
		type res struct {
			jobs []api.Job
			err  error
		}
		ch := make(chan res, 1)
		go func() {
			jobs, err := tn.w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"fresh"}, Max: 1, WaitMS: 20000})
			ch <- res{jobs, err}
		}()
		// Enqueue once the claim is parked: retry the enqueue until the claim
		// returns, without a fixed sleep.
		var r res
		for {
			enqueue(t, tn.p, job("fresh", "t"))
			select {
			case r = <-ch:
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
		if r.err != nil || len(r.jobs) != 1 || r.jobs[0].Queue != "fresh" {
			t.Fatalf("long poll = %v %v, want one job of queue fresh", r.jobs, r.err)
		}
		// A long poll with nothing to get returns empty at its deadline.
		jobs, err := tn.w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"empty"}, Max: 1, WaitMS: 100})
		if err != nil || len(jobs) != 0 {
			t.Fatalf("empty long poll = %v %v", jobs, err)
		}
	})
}

func TestNackBackoffDeadAndLeaseLost(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		two := int64(2)
		j := job("q", "t")
		j.MaxAttempts = &two
		res := enqueue(t, tn.p, j)
		id := res[0].ID
		got := claim(t, tn.w, 1, "q")
		before := time.Now()
		reply, err := tn.w.Nack(ctx(t), id, got[0].Attempt, "boom", true)
		if err != nil {
			t.Fatal(err)
		}
		// attempt 1: 1 s ± 20 %.
		if reply.Status != api.StatusPending || reply.RunAt == nil ||
			reply.RunAt.Before(before.Add(790*time.Millisecond)) || reply.RunAt.After(time.Now().Add(1210*time.Millisecond)) {
			t.Fatalf("nack reply = %+v, want pending at about now + 1 s", reply)
		}
		if pj := e.job(tn.admin, id); pj.Status != api.StatusPending || pj.Error != "boom" || pj.Attempt != 1 {
			t.Fatalf("after nack: %s %q attempt %d", pj.Status, pj.Error, pj.Attempt)
		}
		// Not due yet: a claim gets nothing; a long poll gets it when it is.
		again, err := tn.w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 5000})
		if err != nil || len(again) != 1 || again[0].Attempt != 2 {
			t.Fatalf("claim after backoff = %v %v, want the job at attempt 2", again, err)
		}
		// A stale ack (attempt 1) is a lost lease.
		err = tn.w.Ack(ctx(t), id, 1, nil)
		wantAPIError(t, err, api.CodeAborted, api.ReasonLeaseLost, "job '"+id+"' is not running under this lease")
		reply, err = tn.w.Nack(ctx(t), id, 2, "boom again", true)
		if err != nil || reply.Status != api.StatusDead {
			t.Fatalf("nack at max_attempts = %+v %v, want dead", reply, err)
		}
		if dj := e.job(tn.admin, id); dj.Status != api.StatusDead || dj.FinishedAt == nil {
			t.Fatalf("dead job: %+v", dj)
		}
		err = tn.w.Ack(ctx(t), "no-such-job", 0, nil)
		wantAPIError(t, err, api.CodeNotFound, api.ReasonUnknownJob, "job 'no-such-job' not found")

		// retry:false is dead at once.
		enqueue(t, tn.p, job("q", "t"))
		got = claim(t, tn.w, 1, "q")
		reply, err = tn.w.Nack(ctx(t), got[0].ID, 0, "fatal", false)
		if err != nil || reply.Status != api.StatusDead {
			t.Fatalf("nack retry:false = %+v %v", reply, err)
		}
	})
}

func TestExpiredLeaseIsAFailedAttemptAndFreesTheSlot(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_running":1}`)
		res := enqueue(t, tn.p, job("q", "t"), job("q", "t"))
		got, err := tn.w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 1, LeaseMS: 200})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim: %v %v", got, err)
		}
		// The slot frees when the lease runs out: a long poll then gets the
		// other job.
		next, err := tn.w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 5000, LeaseMS: 60000})
		if err != nil || len(next) != 1 {
			t.Fatalf("claim after the lease ran out: %v %v", next, err)
		}
		expired := e.job(tn.admin, got[0].ID)
		if expired.Attempt != 1 || expired.Error != "lease expired" {
			t.Fatalf("expired job: status %s attempt %d error %q", expired.Status, expired.Attempt, expired.Error)
		}
		if expired.Status != api.StatusPending {
			t.Fatalf("expired job status %s, want pending (retry after backoff)", expired.Status)
		}
		// Heartbeats keep a lease alive and report what they extended.
		ext, err := tn.w.Heartbeat(ctx(t), 60000, next[0].ID, got[0].ID)
		if err != nil || len(ext) != 1 || ext[0] != next[0].ID {
			t.Fatalf("heartbeat extended %v %v, want only %s", ext, err, next[0].ID)
		}
		_ = res
	})
}

func TestProtocolErrorsAndDiscovery(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		e.setQuota(tn.admin, `{"max_pending":0}`)
		nc := tn.p.Conn()
		msg := newMsg(api.SubjectEnqueue, tn.producer, `{"jobs":[{"queue":"q","task":"t"}]}`)
		reply, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if reply.Header.Get(api.HeaderErrorCode) != "429" || reply.Header.Get(api.HeaderError) != "queue 'q' is full: 0 pending >= max_pending 0" {
			t.Fatalf("headers %v, want 429 and the message", reply.Header)
		}
		var body api.ErrorBody
		if err := json.Unmarshal(reply.Data, &body); err != nil || body.Error.Code != api.CodeResourceExhausted || body.Error.Reason != api.ReasonQueueFull {
			t.Fatalf("body %s", reply.Data)
		}
		for _, bad := range []string{`not json`, `{"jobs":"x"}`} {
			reply, err = nc.RequestMsg(newMsg(api.SubjectEnqueue, tn.producer, bad), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(reply.Data, &body); err != nil || reply.Header.Get(api.HeaderErrorCode) != "400" ||
				body.Error.Code != api.CodeInvalidArgument || body.Error.Reason != api.ReasonBadRequest {
				t.Fatalf("%s: %v %s, want 400 INVALID_ARGUMENT/BAD_REQUEST", bad, reply.Header, reply.Data)
			}
		}
		reply, err = nc.RequestMsg(newMsg(api.SubjectEnqueue, tn.producer, `{"jobs":[{"queue":"bad queue","task":"t"}]}`), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if json.Unmarshal(reply.Data, &body) != nil || body.Error.Code != api.CodeInvalidArgument {
			t.Fatalf("invalid queue name: %s", reply.Data)
		}
		// Discoverable as the flexiq micro service.
		ping, err := nc.Request("$SRV.PING.flexiq", nil, 5*time.Second)
		if err != nil {
			t.Fatalf("$SRV.PING.flexiq: %v", err)
		}
		var id struct{ Name, ID string }
		if err := json.Unmarshal(ping.Data, &id); err != nil || id.Name != "flexiq" {
			t.Fatalf("ping reply %s", ping.Data)
		}
	})
}

// Delayed jobs become claimable when due, one after the other, also when
// they were written before the node (and its actors) restarted.
func TestDelayedJobsBecomeDueInTurnAcrossARestart(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		first, second := job("q", "t"), job("q", "t")
		first.ID, second.ID = "first", "second"
		first.DelayMS, second.DelayMS = 300, 600
		enqueue(t, tn.p, first, second)
		if got := claim(t, tn.w, 10, "q"); len(got) != 0 {
			t.Fatalf("claimed %v before they were due", ids(got))
		}
		for _, want := range []string{"first", "second"} {
			got, err := tn.w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 10, WaitMS: 5000})
			if err != nil || len(got) != 1 || got[0].ID != want {
				t.Fatalf("long poll = %v %v, want [%s]", ids(got), err, want)
			}
		}
		later := job("q", "t")
		later.ID = "later"
		later.DelayMS = 400
		enqueue(t, tn.p, later)
		e.stop()
		e.boot()
		w := e.client(tn.worker)
		got, err := w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 10, WaitMS: 5000})
		if err != nil || len(got) != 1 || got[0].ID != "later" {
			t.Fatalf("after a restart the long poll = %v %v, want [later]", ids(got), err)
		}
	})
}

// A batched ack (the "acks" form of fq.v1.ack) decides each entry on its
// own, as if each were acked alone, and answers one result per entry.
func TestBatchedAckAnswersEachEntry(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		enqueue(t, tn.p, job("q", "t"), job("q", "t"), job("q", "t"), job("q", "t"))
		got := claim(t, tn.w, 4, "q")
		if len(got) != 4 {
			t.Fatalf("claimed %d jobs, want 4", len(got))
		}
		results, err := tn.w.AckMany(ctx(t), []api.AckItem{
			{ID: got[0].ID, Attempt: got[0].Attempt, Result: json.RawMessage(`{"n":1}`)},
			{ID: got[1].ID},
			{ID: got[2].ID, Attempt: got[2].Attempt + 1}, // not this lease
			{ID: "no-such-job"},
			{ID: got[0].ID, Attempt: got[0].Attempt}, // acked just above
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			id      string
			code    api.Code
			reason  api.Reason
			message string
		}{
			{got[0].ID, "", "", ""},
			{got[1].ID, "", "", ""},
			{got[2].ID, api.CodeAborted, api.ReasonLeaseLost, "job '" + got[2].ID + "' is not running under this lease"},
			{"no-such-job", api.CodeNotFound, api.ReasonUnknownJob, "job 'no-such-job' not found"},
			{got[0].ID, api.CodeAborted, api.ReasonLeaseLost, "job '" + got[0].ID + "' is not running under this lease"},
		}
		for i, w := range want {
			r := results[i]
			if r.ID != w.id {
				t.Errorf("result %d is for %q, want %q", i, r.ID, w.id)
			}
			switch {
			case w.code == "" && r.Error != nil:
				t.Errorf("result %d: error %v, want acked", i, r.Error)
			case w.code != "" && (r.Error == nil || r.Error.Code != w.code || r.Error.Reason != w.reason || r.Error.Message != w.message):
				t.Errorf("result %d: error %+v, want %s/%s %q", i, r.Error, w.code, w.reason, w.message)
			}
		}
		if j := e.job(tn.admin, got[0].ID); j.Status != api.StatusCompleted || string(j.Result) != `{"n":1}` {
			t.Errorf("job 0: %s result %s, want completed with its result", j.Status, j.Result)
		}
		for i, st := range []api.Status{api.StatusCompleted, api.StatusRunning, api.StatusRunning} {
			if j := e.job(tn.admin, got[i+1].ID); j.Status != st {
				t.Errorf("job %d: %s, want %s", i+1, j.Status, st)
			}
		}

		// The request as a whole is checked first, every refusal naming
		// the field and the limit.
		nc := tn.w.Conn()
		tooMany := make([]api.AckItem, api.MaxClaim+1)
		for i := range tooMany {
			tooMany[i].ID = "x"
		}
		big, _ := json.Marshal(api.AckRequest{Acks: tooMany})
		for body, message := range map[string]string{
			`{"id":"a","acks":[{"id":"b"}]}`:  "acks: give either id or acks, not both",
			`{"acks":[{"id":"b"},{"id":""}]}`: "acks[1].id: required",
			string(big):                       "acks: at most 1000 per ack, got 1001",
		} {
			reply, err := nc.RequestMsg(newMsg(api.SubjectAck, tn.worker, body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var eb api.ErrorBody
			if err := json.Unmarshal(reply.Data, &eb); err != nil || eb.Error == nil ||
				eb.Error.Code != api.CodeInvalidArgument || eb.Error.Message != message || reply.Header.Get(api.HeaderErrorCode) != "400" {
				t.Errorf("ack %.40s…: %v %s, want 400 INVALID_ARGUMENT %q", body, reply.Header, reply.Data, message)
			}
		}
		if j := e.job(tn.admin, got[3].ID); j.Status != api.StatusRunning {
			t.Errorf("job 3 after refused batches: %s, want running", j.Status)
		}
	})
}
