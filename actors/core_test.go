package actors

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestCore(t *testing.T, doc string) *Core {
	t.Helper()
	c := NewCore("acme", rand.New(rand.NewPCG(1, 2)))
	setQuota(t, c, doc)
	c.Load(store.Counts{}, nil, t0)
	return c
}

func setQuota(t *testing.T, c *Core, doc string) {
	t.Helper()
	d, err := quota.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Snapshot()
	s.Quota, s.Revision = d, s.Revision+1
	c.SetSnapshot(s)
}

func call(c *Core, jobs ...api.Job) *EnqueueCall {
	call, err := c.NewEnqueueCall(&Message{Op: OpEnqueue}, jobs, t0)
	if err != nil {
		panic(err)
	}
	return call
}

func plain() api.Job { return api.Job{Queue: "q", Task: "t"} }

func withID(id string) api.Job { j := plain(); j.ID = id; return j }

// results fakes what the store returns: every job enqueued except those
// whose index is in dups.
func results(p *EnqueuePlan, dups map[[2]int]bool) [][]api.EnqueueResult {
	out := make([][]api.EnqueueResult, len(p.Params.Calls))
	for i, c := range p.Params.Calls {
		for k, j := range c.Jobs {
			o := api.OutcomeEnqueued
			switch {
			case c.ShedError != "":
				o = api.OutcomeShed
			case dups[[2]int{i, k}]:
				o = api.OutcomeDeduplicated
			}
			out[i] = append(out[i], api.EnqueueResult{ID: j.ID, Outcome: o})
		}
	}
	return out
}

func TestPlanEnqueueCutsAfterAnUncertainCallOnlyWhenDepthWouldRefuse(t *testing.T) {
	c := newTestCore(t, `{"max_pending":2}`)
	// Pending 0. Call A has a client id (may be a duplicate); B and C are
	// plain. Under the upper bound A+B fill the cap, so C's refusal would
	// rest on A landing: the plan must stop before C.
	a, b, cc := call(c, withID("a")), call(c, plain()), call(c, plain())
	p := c.PlanEnqueue([]*EnqueueCall{a, b, cc}, t0)
	if len(p.Calls) != 2 || len(p.Refused) != 0 || len(p.Rest) != 1 || p.Rest[0] != cc {
		t.Fatalf("plan: %d calls, %d refused, %d rest; want 2, 0, 1 (C left for later)", len(p.Calls), len(p.Refused), len(p.Rest))
	}
	// A turns out to be a duplicate: one job landed, pending 1, and C fits.
	c.EnqueueDone(&p, results(&p, map[[2]int]bool{{0, 0}: true}), nil, t0)
	if c.Pending() != 1 {
		t.Fatalf("pending = %d, want 1", c.Pending())
	}
	p2 := c.PlanEnqueue(p.Rest, t0)
	if len(p2.Calls) != 1 || len(p2.Refused) != 0 {
		t.Fatalf("second plan: %d calls %d refused, want C admitted", len(p2.Calls), len(p2.Refused))
	}

	// Without an uncertain call before it, a depth refusal is decided at once.
	c = newTestCore(t, `{"max_pending":1}`)
	p = c.PlanEnqueue([]*EnqueueCall{call(c, plain()), call(c, plain())}, t0)
	if len(p.Calls) != 1 || len(p.Refused) != 1 || len(p.Rest) != 0 {
		t.Fatalf("plain plan: %d calls %d refused %d rest, want 1 1 0", len(p.Calls), len(p.Refused), len(p.Rest))
	}
	if msg := p.Refused[0].Err.Message; msg != "queue 'q' is full: 1 pending >= max_pending 1" {
		t.Fatalf("refusal %q", msg)
	}
}

func TestPlanEnqueueShedsInDropModeAndFailsClosed(t *testing.T) {
	c := newTestCore(t, `{"max_pending":0,"on_excess":"drop"}`)
	p := c.PlanEnqueue([]*EnqueueCall{call(c, plain(), plain())}, t0)
	if len(p.Calls) != 1 || p.Params.Calls[0].ShedError != "quota: queue 'q' is full: 0 pending >= max_pending 0" {
		t.Fatalf("drop plan: %+v", p.Params.Calls)
	}
	c.EnqueueDone(&p, results(&p, nil), nil, t0)
	if c.Pending() != 0 {
		t.Fatalf("shed jobs counted as pending: %d", c.Pending())
	}

	s := c.Snapshot()
	s.Err = api.Errorf(api.CodeFailedPrecondition, api.ReasonQuotaUnreadable, "stopped")
	c.SetSnapshot(s)
	p = c.PlanEnqueue([]*EnqueueCall{call(c, plain())}, t0)
	if len(p.Calls) != 0 || len(p.Refused) != 1 || p.Refused[0].Err.Reason != api.ReasonQuotaUnreadable {
		t.Fatalf("fail-closed plan: %d calls %+v", len(p.Calls), p.Refused)
	}
	cp := c.PlanClaims([]*ClaimCall{{Req: api.ClaimRequest{Queues: []string{"q"}, Max: 1}}}, t0)
	if len(cp.Calls) != 0 || len(cp.Empty) != 1 {
		t.Fatal("a stopped namespace planned a claim")
	}
}

func TestFailedWriteKeepsTokensSpentAndUnloads(t *testing.T) {
	c := newTestCore(t, `{"enqueue_rate":"2/h"}`)
	p := c.PlanEnqueue([]*EnqueueCall{call(c, plain(), plain())}, t0)
	if len(p.Calls) != 1 {
		t.Fatal("not admitted")
	}
	c.EnqueueDone(&p, nil, errors.New("disk on fire"), t0)
	if c.Loaded() {
		t.Fatal("core still trusts its counts after a failed write")
	}
	c.Load(store.Counts{}, nil, t0)
	// The write may have landed: its tokens stay spent, so a retry is
	// refused for rate rather than admitted over it.
	p = c.PlanEnqueue([]*EnqueueCall{call(c, plain(), plain())}, t0)
	if len(p.Calls) != 0 || len(p.Refused) != 1 || p.Refused[0].Err.Reason != api.ReasonRateLimited {
		t.Fatalf("retry after a failed write: %d admitted, refusals %+v; want RATE_LIMITED", len(p.Calls), p.Refused)
	}
}

func TestReplayOfADeadLetterAnEarlierCallReplaysWaits(t *testing.T) {
	c := newTestCore(t, `{}`)
	a := &EnqueueCall{Msg: &Message{}, ReplayIDs: []string{"x"}, Queue: "q"}
	b := &EnqueueCall{Msg: &Message{}, ReplayIDs: []string{"y", "x"}, Queue: "q"}
	p := c.PlanEnqueue([]*EnqueueCall{a, b}, t0)
	if len(p.Calls) != 1 || len(p.Rest) != 1 || p.Rest[0] != b {
		t.Fatalf("plan: %d calls, rest %d; want b left for after a lands", len(p.Calls), len(p.Rest))
	}
}

func TestIdleWaitsForTheBucketToRefill(t *testing.T) {
	c := newTestCore(t, `{"enqueue_rate":"2/m"}`)
	p := c.PlanEnqueue([]*EnqueueCall{call(c, plain())}, t0)
	c.EnqueueDone(&p, results(&p, nil), nil, t0)
	c.Touch(t0)
	if c.Idle(t0.Add(10*time.Second), 5*time.Second) {
		t.Fatal("passivated with a spent token: a fresh actor would start full")
	}
	if !c.Idle(t0.Add(31*time.Second), 5*time.Second) {
		t.Fatal("not idle once the bucket refilled")
	}
}

func TestPlanClaimsGatesInsideTheScan(t *testing.T) {
	c := newTestCore(t, `{"max_running":4}`)
	s := c.Snapshot()
	two, one := int64(2), int64(1)
	s.Queues = map[string]quota.QueueSettings{"mail": {MaxConcurrent: &one}}
	s.Tasks = map[string]quota.TaskSettings{"resize": {MaxConcurrent: &two}}
	c.SetSnapshot(s)
	c.pending = 10
	p := c.PlanClaims([]*ClaimCall{{Req: api.ClaimRequest{Queues: []string{"mail", "img"}, Max: 10, LeaseMS: 1000}}}, t0)
	allow := p.Params.Allow
	seq := []struct {
		queue, task string
		want        store.ClaimVerdict
	}{
		{"mail", "send", store.ClaimTake},
		{"mail", "send", store.ClaimSkipQueue},
		{"img", "resize", store.ClaimTake},
		{"img", "resize", store.ClaimTake},
		{"img", "resize", store.ClaimSkipTask},
		{"img", "thumb", store.ClaimTake},
		{"img", "thumb", store.ClaimStop}, // namespace at 4
	}
	for i, s := range seq {
		if got := allow(s.queue, s.task); got != s.want {
			t.Fatalf("step %d (%s/%s): verdict %d, want %d", i, s.queue, s.task, got, s.want)
		}
	}
	// The scratch counts are not the core's: nothing ran yet.
	if c.Running() != 0 {
		t.Fatalf("planning changed the running count to %d", c.Running())
	}
	c.ClaimDone(&p, [][]store.Job{{
		{ID: "1", Queue: "mail", Task: "send", Attempt: 1, LeaseUntil: t0.Add(time.Second)},
		{ID: "2", Queue: "img", Task: "resize", Attempt: 1, LeaseUntil: t0.Add(time.Second)},
	}}, nil)
	if c.Running() != 2 || c.Pending() != 8 {
		t.Fatalf("after claims running %d pending %d, want 2 and 8", c.Running(), c.Pending())
	}
	p = c.PlanClaims([]*ClaimCall{{Req: api.ClaimRequest{Queues: []string{"mail"}, Max: 1}}}, t0)
	if len(p.Calls) != 0 || len(p.Empty) != 1 {
		t.Fatal("a claim on a full queue reached the store")
	}
}

func TestPlanClaimsLeavesTheGateOutOnlyWhenNoCapCanBeMet(t *testing.T) {
	claim := func(c *Core, max int, queues ...string) ClaimPlan {
		return c.PlanClaims([]*ClaimCall{
			{Req: api.ClaimRequest{Queues: queues, Max: max}},
			{Req: api.ClaimRequest{Queues: queues, Max: max}},
		}, t0)
	}
	c := newTestCore(t, `{}`)
	c.pending = 100
	if p := claim(c, 32, "q"); p.Params.Allow != nil {
		t.Fatal("no caps at all, yet the store is asked per job")
	}
	c = newTestCore(t, `{"max_running":10}`)
	c.pending = 100
	if p := claim(c, 5, "q"); p.Params.Allow != nil {
		t.Fatal("two claims of 5 under max_running 10: no cap can be met, yet gated")
	}
	if p := claim(c, 6, "q"); p.Params.Allow == nil {
		t.Fatal("two claims of 6 under max_running 10 went ungated")
	}
	s := c.Snapshot()
	three := int64(3)
	s.Queues = map[string]quota.QueueSettings{"mail": {MaxConcurrent: &three}}
	s.Tasks = map[string]quota.TaskSettings{"resize": {MaxConcurrent: &three}}
	c.SetSnapshot(s)
	if p := claim(c, 1, "img"); p.Params.Allow != nil {
		t.Fatal("two jobs can meet neither the task's cap of 3 nor max_running, yet gated")
	}
	if p := claim(c, 2, "img"); p.Params.Allow == nil {
		t.Fatal("four jobs of unknown tasks could pass resize's cap of 3, yet ungated")
	}
}

func TestUpdatesAckNackExpire(t *testing.T) {
	c := newTestCore(t, `{}`)
	c.pending = 3
	p := c.PlanClaims([]*ClaimCall{{Req: api.ClaimRequest{Queues: []string{"q"}, Max: 3}}}, t0)
	lease := t0.Add(10 * time.Second)
	c.ClaimDone(&p, [][]store.Job{{
		{ID: "a", Queue: "q", Task: "t", Attempt: 1, LeaseUntil: lease},
		{ID: "b", Queue: "q", Task: "t", Attempt: 1, LeaseUntil: lease, MaxAttempts: 1},
		{ID: "c", Queue: "q", Task: "t", Attempt: 1, LeaseUntil: t0.Add(time.Second)},
	}}, nil)
	msg := func(body any) *UpdateCall { return &UpdateCall{Msg: &Message{Body: body}} }
	yes := true
	calls := []*UpdateCall{
		msg(&api.AckRequest{ID: "a", Result: json.RawMessage(`1`)}),
		msg(&api.AckRequest{ID: "a"}), // second ack of the same job in one group
		msg(&api.NackRequest{ID: "b", Error: "x", Retry: &yes}),
		msg(&api.AckRequest{ID: "zzz"}),
		msg(&api.HeartbeatRequest{IDs: []string{"c", "a"}, LeaseMS: 5000}),
	}
	up := c.PlanUpdates(calls, t0.Add(2*time.Second)) // c's lease ran out at t0+1s
	if len(up.Unknown) != 2 {
		t.Fatalf("unknown = %d, want 2 (second ack of a, zzz)", len(up.Unknown))
	}
	kinds := map[string]store.UpdateKind{}
	for _, u := range up.Params.Updates {
		kinds[u.ID] = u.Kind
	}
	// a completes, b is dead (max_attempts 1), c expired: retried, and the
	// heartbeat does not extend jobs that end in this group.
	if kinds["a"] != store.UpdateComplete || kinds["b"] != store.UpdateDead || kinds["c"] != store.UpdateRetry || len(up.Params.Updates) != 3 {
		t.Fatalf("updates %v", up.Params.Updates)
	}
	applied := make([]bool, len(up.Params.Updates))
	for i := range applied {
		applied[i] = true
	}
	replies := c.UpdatesDone(&up, applied, nil)
	if c.Running() != 0 || c.Pending() != 1 {
		t.Fatalf("after updates running %d pending %d, want 0 and 1 (c retried)", c.Running(), c.Pending())
	}
	var hb *api.HeartbeatReply
	for _, r := range replies {
		if h, ok := r.Body.(api.HeartbeatReply); ok {
			hb = &h
		}
	}
	if hb == nil || len(hb.Extended) != 0 {
		t.Fatalf("heartbeat reply %+v, want nothing extended", hb)
	}
}

func TestBackoffBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for attempt := int64(1); attempt <= 30; attempt++ {
		base := time.Hour
		if attempt <= 13 {
			base = min(time.Second<<(attempt-1), time.Hour)
		}
		for i := 0; i < 200; i++ {
			d := Backoff(attempt, rng)
			lo, hi := time.Duration(float64(base)*0.8), min(time.Duration(float64(base)*1.2), time.Hour)
			if d < lo || d > hi {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", attempt, d, lo, hi)
			}
		}
	}
}

func TestIDsAreTimeOrderedUUIDv7(t *testing.T) {
	g := NewIDGen(rand.New(rand.NewPCG(3, 4)))
	prev := ""
	now := t0
	for i := 0; i < 20000; i++ {
		if i%7 == 0 {
			now = now.Add(time.Millisecond)
		}
		if i == 10000 {
			now = now.Add(-time.Second) // a clock step back
		}
		id := g.New(now)
		if len(id) != 36 || id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("id %q is not a UUIDv7", id)
		}
		if id <= prev {
			t.Fatalf("id %d %q not after %q", i, id, prev)
		}
		prev = id
	}
}

func TestSnapshotChangeWakesParkedClaims(t *testing.T) {
	c := newTestCore(t, `{"max_running":0}`)
	w := &ClaimCall{Msg: &Message{}, Deadline: t0.Add(time.Minute)}
	c.Park([]*ClaimCall{w}, time.Time{}, false)
	if retry, _ := c.Waiters(t0); len(retry) != 1 {
		t.Fatal("a freshly loaded core should try its waiters once")
	}
	c.Park([]*ClaimCall{w}, time.Time{}, false)
	if retry, _ := c.Waiters(t0); len(retry) != 0 {
		t.Fatal("nothing changed, yet the waiter was retried")
	}
	setQuota(t, c, `{"max_running":5}`)
	if retry, _ := c.Waiters(t0); len(retry) != 1 {
		t.Fatal("raising max_running did not wake the parked claim")
	}
	c.Park([]*ClaimCall{w}, t0.Add(time.Second), true)
	if _, expired := c.Waiters(t0.Add(2 * time.Minute)); len(expired) != 1 {
		t.Fatal("a waiter past its deadline was not expired")
	}
	_ = cachebust.Snapshot{}
}

// A parked claim whose caller no longer listens is answered with nothing
// when it would be tried again, and its listener is asked only then, not
// at every step.
func TestAParkedClaimWhoseCallerLeftIsNotTriedAgain(t *testing.T) {
	c := newTestCore(t, `{}`)
	listening, asked := true, 0
	w := &ClaimCall{Msg: &Message{Listening: func() bool { asked++; return listening }}, Deadline: t0.Add(time.Minute)}
	c.Park([]*ClaimCall{w}, time.Time{}, false)
	if retry, _ := c.Waiters(t0); len(retry) != 1 {
		t.Fatal("a listening waiter was not tried after a load")
	}
	c.Park([]*ClaimCall{w}, time.Time{}, false)
	listening = false
	asked = 0
	for range 3 {
		if retry, expired := c.Waiters(t0); len(retry)+len(expired) != 0 {
			t.Fatal("nothing changed, yet the waiter was taken")
		}
	}
	if asked != 0 {
		t.Fatalf("asked whether its caller listens %d times while nothing changed", asked)
	}
	c.Poll()
	retry, expired := c.Waiters(t0)
	if len(retry) != 0 || len(expired) != 1 || asked != 1 {
		t.Fatalf("a waiter whose caller left: retried %d, expired %d, asked %d", len(retry), len(expired), asked)
	}
}

// docs/protocol.md: a time out of bounds refuses the whole call naming the field,
// and a long delay in bounds is resolved exactly (a time.Duration of
// nanoseconds would overflow past 292 years).
func TestNewEnqueueCallResolvesAndBoundsTimes(t *testing.T) {
	c := newTestCore(t, `{}`)
	year1 := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		jobs []api.Job
		want string
	}{
		{[]api.Job{plain(), {Queue: "q", Task: "t", RunAt: &year1}},
			"jobs[1].run_at: must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got 0001-01-01T00:00:00Z"},
		{[]api.Job{{Queue: "q", Task: "t", DelayMS: math.MaxInt64}},
			"jobs[0].delay_ms: must put run_at between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got 9223372036854775807"},
		{[]api.Job{plain(), plain(), {Queue: "q", Task: "t", Debounce: &api.Debounce{Key: "k", WindowMS: math.MaxInt64}}},
			"jobs[2].debounce.window_ms: must put run_at between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got 9223372036854775807"},
	} {
		call, err := c.NewEnqueueCall(&Message{Op: OpEnqueue}, tc.jobs, t0)
		if err == nil || err.Code != api.CodeInvalidArgument || err.Message != tc.want {
			t.Errorf("NewEnqueueCall = %v, %v; want INVALID_ARGUMENT %q", call, err, tc.want)
		}
	}
	const days = 1000 * 365
	call, err := c.NewEnqueueCall(&Message{Op: OpEnqueue}, []api.Job{
		{Queue: "q", Task: "t", DelayMS: days * 86_400_000},
		{Queue: "q", Task: "t", Debounce: &api.Debounce{Key: "k", WindowMS: days * 86_400_000}},
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range call.Jobs {
		if want := t0.AddDate(0, 0, days); !j.RunAt.Equal(want) {
			t.Errorf("job %d: run_at %v, want %v", i, j.RunAt, want)
		}
	}
}

func TestClaimsStartAtTheQueuesKnownHead(t *testing.T) {
	c := newTestCore(t, `{}`)
	c.SetPromoteTime(time.Time{}, false) // no delayed jobs
	c.pending = 100
	claim := func() ClaimPlan {
		return c.PlanClaims([]*ClaimCall{{Req: api.ClaimRequest{Queues: []string{"q"}, Max: 2, LeaseMS: 1000}}}, t0)
	}
	job := func(id string, prio int64, seq int64) store.Job {
		return store.Job{ID: id, Queue: "q", Task: "t", Priority: prio, RunAt: t0, Seq: seq, Attempt: 1, LeaseUntil: t0.Add(time.Second)}
	}
	p := claim()
	if p.Params.Head != nil {
		t.Fatal("a first claim starts from a head nothing told the core")
	}
	c.ClaimDone(&p, [][]store.Job{{job("a", 0, 7), job("b", 0, 9)}}, nil)
	p = claim()
	if h := p.Params.Head; h == nil || h.Seq != 9 || h.Priority != 0 || !h.RunAt.Equal(t0) {
		t.Fatalf("after claiming seq 7 and 9 the head is %+v, want priority 0, run_at t0, seq 9", h)
	}
	// A claim on another queue knows nothing of it.
	if o := c.PlanClaims([]*ClaimCall{{Req: api.ClaimRequest{Queues: []string{"other"}, Max: 1}}}, t0); o.Params.Head != nil {
		t.Fatal("a head of q used for queue other")
	}
	// A new job of higher priority goes before the head: it moves back.
	e := c.PlanEnqueue([]*EnqueueCall{call(c, api.Job{Queue: "q", Task: "t", Priority: 5})}, t0)
	c.EnqueueDone(&e, results(&e, nil), nil, t0)
	p = claim()
	if h := p.Params.Head; h == nil || h.Priority != 5 || h.Seq != 0 {
		t.Fatalf("after enqueueing a priority-5 job the head is %+v, want priority 5 seq 0", h)
	}
	c.ClaimDone(&p, [][]store.Job{{job("c", 5, 12), job("d", 0, 10)}}, nil)
	if h := claim().Params.Head; h == nil || h.Seq != 10 || h.Priority != 0 {
		t.Fatalf("after claiming seq 12 (priority 5) and 10 the head is %+v, want priority 0 seq 10", h)
	}
	// A release puts a job back at its old place: the head is forgotten.
	rel := c.PlanUpdates([]*UpdateCall{{Msg: &Message{Body: &api.NackRequest{ID: "a", Release: true}}}}, t0)
	if len(rel.Params.Updates) != 1 || rel.Params.Updates[0].Kind != store.UpdateRelease {
		t.Fatalf("release planned as %+v", rel.Params.Updates)
	}
	c.UpdatesDone(&rel, []bool{true}, nil)
	c.SetPromoteTime(time.Time{}, false) // as if the store said nothing is delayed
	if h := claim().Params.Head; h != nil {
		t.Fatalf("after a release the head is still %+v", h)
	}
	// Promoting due delayed jobs forgets it too, and so does a failed write.
	p = claim()
	c.ClaimDone(&p, [][]store.Job{{job("e", 0, 20)}}, nil)
	c.wakeAt(t0)
	if p = claim(); p.Params.NoPromote || p.Params.Head != nil {
		t.Fatalf("a claim that promotes used head %+v", p.Params.Head)
	}
	c.ClaimDone(&p, [][]store.Job{{job("f", 0, 21)}}, nil)
	c.SetPromoteTime(time.Time{}, false)
	if h := claim().Params.Head; h == nil || h.Seq != 21 {
		t.Fatalf("after a promoting claim took seq 21 the head is %+v", h)
	}
	p = claim()
	c.ClaimDone(&p, nil, errors.New("store down"))
	c.Load(store.Counts{}, nil, t0)
	c.SetPromoteTime(time.Time{}, false)
	c.pending = 100
	if h := claim().Params.Head; h != nil {
		t.Fatalf("after a failed claim and a reload the head is %+v", h)
	}
}
