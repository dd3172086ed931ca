package actors

import (
	"context"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
)

var queueFull = api.Errorf(api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full")

// The pace: Burst refusals in a row go at once, then one every Interval,
// each held at most MaxHold and at most MaxHeld at a time; a quiet
// namespace gets its burst back.
func TestPaceRefusalHoldsPastTheBurst(t *testing.T) {
	c := newTestCore(t, `{}`)
	pace := DefaultPace()
	c.SetPace(pace)
	burst, interval, maxHold, maxHeld := pace.Burst, pace.Interval, pace.MaxHold, pace.MaxHeld
	paced := func() *Message { return &Message{Op: OpEnqueue, Paced: true} }
	for i := 0; i < burst; i++ {
		if !c.PaceRefusal(paced(), queueFull, t0) {
			t.Fatalf("refusal %d of the burst held", i+1)
		}
	}
	first := paced()
	first.Body = &api.EnqueueRequest{Jobs: make([]api.Job, 10000)}
	if c.PaceRefusal(first, queueFull, t0) {
		t.Fatal("the refusal past the burst was answered at once")
	}
	if first.Body != nil {
		t.Error("a held refusal keeps its call's jobs in memory")
	}
	if got := c.NextDeadline(); !got.Equal(t0.Add(interval)) {
		t.Errorf("NextDeadline %v, want the held refusal's turn %v", got.Sub(t0), interval)
	}
	if !c.Busy() {
		t.Error("a core holding a refusal is not busy: its actor could passivate with an answer owed")
	}
	if due := c.DueRefusals(t0.Add(interval - time.Nanosecond)); len(due) != 0 {
		t.Fatalf("%d refusals answered before their turn", len(due))
	}
	if due := c.DueRefusals(t0.Add(interval)); len(due) != 1 || due[0].Msg != first || due[0].Err != queueFull {
		t.Fatalf("at its turn: %+v, want the held refusal", due)
	}

	// A flood: the held ones are at most maxHeld, none held longer
	// than maxHold, answered in order at the pace.
	now := t0.Add(interval)
	held := 0
	for i := 0; i < 4*maxHeld; i++ {
		if !c.PaceRefusal(paced(), queueFull, now) {
			held++
		}
	}
	if held != maxHeld {
		t.Errorf("%d refusals held, want at most %d", held, maxHeld)
	}
	var last time.Time
	for _, r := range c.pace.held {
		if r.at.Before(last) || r.at.After(now.Add(maxHold)) {
			t.Fatalf("held until %v (last %v): out of order or past the longest hold", r.at.Sub(now), last.Sub(now))
		}
		last = r.at
	}
	if due := c.DueRefusals(now.Add(maxHold)); len(due) != maxHeld {
		t.Errorf("%d answered after the longest hold, want all %d", len(due), maxHeld)
	}

	// The node's own calls and refusals that are not quota's go at once.
	if !c.PaceRefusal(&Message{Op: OpEnqueue}, queueFull, now) {
		t.Error("a periodic fire's refusal was held")
	}
	if !c.PaceRefusal(paced(), api.InvalidArgument("queue: required"), now) {
		t.Error("an invalid call's refusal was held")
	}

	// Without a pace (Deps.Pace zero), nothing is held.
	none := newTestCore(t, `{}`)
	for i := 0; i < 2*burst; i++ {
		if !none.PaceRefusal(paced(), queueFull, now) {
			t.Fatal("a core without a pace held a refusal")
		}
	}

	// Quiet for the burst and the longest hold: the burst is back.
	later := now.Add(time.Duration(burst)*interval + maxHold)
	for i := 0; i < burst; i++ {
		if !c.PaceRefusal(paced(), queueFull, later) {
			t.Fatalf("after a quiet spell, refusal %d of the burst held", i+1)
		}
	}
}

// A call with a deadline (Message.AnswerBy: a gRPC call's) is held at
// most until then, ahead of refusals held before it with later turns,
// and answered at once when its deadline has passed.
func TestPaceRefusalAnswersByTheCallersDeadline(t *testing.T) {
	c := newTestCore(t, `{}`)
	pace := DefaultPace()
	c.SetPace(pace)
	for i := 0; i < pace.Burst; i++ {
		c.PaceRefusal(&Message{Op: OpEnqueue, Paced: true}, queueFull, t0)
	}
	// Ten held at their turns, the pace's interval apart.
	for range 10 {
		if c.PaceRefusal(&Message{Op: OpEnqueue, Paced: true}, queueFull, t0) {
			t.Fatal("a refusal past the burst answered at once")
		}
	}
	by := t0.Add(3 * pace.Interval / 2)
	hurried := &Message{Op: OpEnqueue, Paced: true, AnswerBy: by}
	if c.PaceRefusal(hurried, queueFull, t0) {
		t.Fatal("a refusal past the burst with time to spare answered at once")
	}
	due := c.DueRefusals(by)
	if len(due) != 2 || due[1].Msg != hurried {
		t.Fatalf("at the caller's deadline %d answered (want 2: the first turn, then the call with the deadline)", len(due))
	}
	if got := c.NextDeadline(); !got.Equal(t0.Add(2 * pace.Interval)) {
		t.Errorf("NextDeadline %v after it, want the next turn %v", got.Sub(t0), 2*pace.Interval)
	}
	if !c.PaceRefusal(&Message{Op: OpEnqueue, Paced: true, AnswerBy: t0}, queueFull, t0) {
		t.Error("a refusal whose caller's deadline has come was held")
	}
}

// In the actor: a client's refused enqueues past the burst are answered
// by later steps at their turn, the node's own at once, and a stopping
// actor answers what it holds.
func TestActorAnswersHeldRefusalsAtTheirTurn(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_000_000, 0)
	pace := DefaultPace()
	burst, interval := pace.Burst, pace.Interval
	a, _ := sqliteActor(t, `{"max_pending":0}`, pace)
	enqueue := func(paced bool, into *[]answer) {
		a.Send(collect(&Message{Op: OpEnqueue, Paced: paced, Body: &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}}}, into))
	}

	var clients, own []answer
	for i := 0; i < burst+2; i++ {
		enqueue(true, &clients)
	}
	enqueue(false, &own)
	for a.Pending() > 0 {
		a.Step(ctx, now)
	}
	if len(clients) != burst || len(own) != 1 {
		t.Fatalf("answered %d client calls and %d own, want the burst (%d) and 1", len(clients), len(own), burst)
	}
	for _, got := range append(clients, own...) {
		if got.err == nil || got.err.Reason != api.ReasonQueueFull {
			t.Fatalf("answer %+v, want QUEUE_FULL", got)
		}
	}
	next := a.Core().NextDeadline()
	if !next.Equal(now.Add(interval)) {
		t.Fatalf("the actor next wakes at +%v, want +%v", next.Sub(now), interval)
	}
	a.Step(ctx, next)
	if len(clients) != burst+1 || clients[burst].err.Reason != api.ReasonQueueFull {
		t.Fatalf("at its turn: %d answered, want %d", len(clients), burst+1)
	}
	a.stop()
	if len(clients) != burst+2 {
		t.Fatalf("a stopping actor answered %d, want all %d", len(clients), burst+2)
	}
}
