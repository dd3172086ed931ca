package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
)

// fakeNode answers a worker's calls on a bare NATS server: one claim gets
// jobs a and b, every heartbeat extends none of them (their leases are
// gone, as after a long stall), and it records the acks and nacks.
type fakeNode struct {
	noBeats bool // heartbeats go unanswered (no responders)
	// answered, when set, is closed once the first claim is answered.
	answered chan struct{}
	mu       sync.Mutex
	claimed  bool
	finals   []string // ack or nack of an id
	beats    int
}

func (f *fakeNode) handlers() map[string]nats.MsgHandler {
	subs := map[string]nats.MsgHandler{
		api.SubjectClaim: func(m *nats.Msg) {
			f.mu.Lock()
			first := !f.claimed
			f.claimed = true
			f.mu.Unlock()
			if !first {
				respondJSON(m, api.ClaimReply{Jobs: []api.Job{}})
				return
			}
			respondJSON(m, api.ClaimReply{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t", Attempt: 1}, {ID: "b", Queue: "q", Task: "t", Attempt: 1}}})
			if f.answered != nil {
				close(f.answered)
			}
		},
		api.SubjectHeartbeat: func(m *nats.Msg) {
			f.mu.Lock()
			f.beats++
			f.mu.Unlock()
			respondJSON(m, api.HeartbeatReply{Extended: []string{}})
		},
		api.SubjectAck: func(m *nats.Msg) {
			var r api.AckRequest
			_ = json.Unmarshal(m.Data, &r)
			f.mu.Lock()
			f.finals = append(f.finals, "ack "+r.ID)
			for _, a := range r.Acks {
				f.finals = append(f.finals, "ack "+a.ID)
			}
			f.mu.Unlock()
			respondJSON(m, struct{}{})
		},
		api.SubjectNack: func(m *nats.Msg) {
			var r api.NackRequest
			_ = json.Unmarshal(m.Data, &r)
			f.mu.Lock()
			f.finals = append(f.finals, "nack "+r.ID)
			f.mu.Unlock()
			respondJSON(m, api.NackReply{Status: api.StatusPending})
		},
	}
	if f.noBeats {
		delete(subs, api.SubjectHeartbeat)
	}
	return subs
}

// respondJSON answers m with v, as a node does.
func respondJSON(m *nats.Msg, v any) {
	b, _ := json.Marshal(v)
	_ = m.Respond(b)
}

// fakeBus serves subs in a node's place on a bare NATS server and returns
// a client on it; the test's end closes both.
func fakeBus(t *testing.T, subs map[string]nats.MsgHandler) *Client {
	t.Helper()
	srv := startNATS(t)
	answering(t, srv, subs)
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitLog waits until the worker has logged msg n times, or fails with
// why after 10 s.
func waitLog(t *testing.T, logs <-chan string, msg string, n int, why string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for seen := 0; seen < n; {
		select {
		case m := <-logs:
			if m == msg {
				seen++
			}
		case <-deadline:
			t.Error(why)
			return
		}
	}
}

// notStarted is what the worker logs when it lets go of a job held ahead.
const notStarted = "lease of a job held ahead ran out before it started; not run"

// logSignal sends each record's message to a channel: the test waits on
// what the worker reports, not on time.
type logSignal struct{ ch chan string }

func (l logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l logSignal) Handle(_ context.Context, r slog.Record) error {
	select {
	case l.ch <- r.Message:
	default:
	}
	return nil
}
func (l logSignal) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logSignal) WithGroup(string) slog.Handler      { return l }

// When a heartbeat comes back without a job, its lease is gone and another
// worker may run it: the running job's handler sees its context end with
// LEASE_LOST and its result is not sent, and a job held ahead (prefetch)
// is never started nor given back.
func TestWorkerLetsGoOfJobsWhoseLeaseIsLost(t *testing.T) {
	f := &fakeNode{}
	c := fakeBus(t, f.handlers())

	logs := make(chan string, 64)
	var (
		mu  sync.Mutex
		ran []string
	)
	cause := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := NewWorker(c, WorkerConfig{
		Queues: []string{"q"}, Concurrency: 1, Prefetch: 1, Lease: 300 * time.Millisecond,
		Log: slog.New(logSignal{ch: logs}),
	}, func(hctx context.Context, j api.Job) (json.RawMessage, error) {
		mu.Lock()
		ran = append(ran, j.ID)
		mu.Unlock()
		if j.ID != "a" {
			return nil, nil
		}
		select {
		case <-hctx.Done():
			cause <- context.Cause(hctx)
		case <-time.After(10 * time.Second):
			cause <- errors.New("the handler's context did not end")
		}
		return nil, errors.New("stopped")
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	err := <-cause
	if e, ok := api.AsError(err); !ok || e.Reason != api.ReasonLeaseLost {
		t.Fatalf("handler's context ended with %v, want LEASE_LOST", err)
	}
	// Wait for the worker to let go of b, held ahead, without running it.
	waitLog(t, logs, notStarted, 1, "the worker never let go of b, held ahead")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(ran) != 1 || ran[0] != "a" {
		t.Errorf("handler ran %v, want only a (b's lease was gone before a slot freed)", ran)
	}
	if len(f.finals) != 0 {
		t.Errorf("the node got %v for jobs whose leases were lost, want nothing", f.finals)
	}
}

// When heartbeats fail (the node unreachable), a job held ahead whose
// lease has run out by the worker's own clock is not started: the node
// may have given it to another worker.
func TestWorkerDoesNotStartAHeldJobPastItsLease(t *testing.T) {
	f := &fakeNode{noBeats: true, answered: make(chan struct{})}
	c := fakeBus(t, f.handlers())
	logs := make(chan string, 64)
	var (
		mu  sync.Mutex
		ran []string
	)
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lease = 300 * time.Millisecond
	w := NewWorker(c, WorkerConfig{
		Queues: []string{"q"}, Concurrency: 1, Prefetch: 1, Lease: lease,
		Log: slog.New(logSignal{ch: logs}),
	}, func(_ context.Context, j api.Job) (json.RawMessage, error) {
		mu.Lock()
		ran = append(ran, j.ID)
		mu.Unlock()
		if j.ID == "a" {
			<-release
		}
		return nil, nil
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	// Heartbeats go every third of the lease: four failures after the
	// claim was answered span at least the lease, so b's is over however
	// late a loaded machine ran the claim (what was logged before is
	// dropped).
	<-f.answered
	for len(logs) > 0 {
		<-logs
	}
	waitLog(t, logs, "heartbeat failed", 4, "heartbeats did not fail four times")
	close(release)
	waitLog(t, logs, notStarted, 1, "the worker started b past its lease")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 1 || ran[0] != "a" {
		t.Errorf("handler ran %v, want only a", ran)
	}
}

// A worker holding more jobs than one heartbeat may name (api.MaxClaim)
// heartbeats them in several requests, so every lease is extended.
func TestWorkerHeartbeatsMoreJobsThanOneRequestNames(t *testing.T) {
	const total = api.MaxClaim + 200
	var (
		mu       sync.Mutex
		handed   int
		extended = map[string]bool{}
		largest  int
	)
	allBeat := make(chan struct{})
	var beatOnce sync.Once
	beaten := func() { beatOnce.Do(func() { close(allBeat) }) }
	subs := map[string]nats.MsgHandler{
		api.SubjectClaim: func(m *nats.Msg) {
			var r api.ClaimRequest
			_ = json.Unmarshal(m.Data, &r)
			mu.Lock()
			jobs := []api.Job{}
			for ; len(jobs) < r.Max && handed < total; handed++ {
				jobs = append(jobs, api.Job{ID: fmt.Sprintf("j%04d", handed), Queue: "q", Task: "t", Attempt: 1})
			}
			mu.Unlock()
			respondJSON(m, api.ClaimReply{Jobs: jobs})
		},
		api.SubjectHeartbeat: func(m *nats.Msg) {
			var r api.HeartbeatRequest
			_ = json.Unmarshal(m.Data, &r)
			if err := r.Validate(); err != nil {
				// As a node does: the whole request refused.
				h := nats.Header{}
				h.Set(api.HeaderErrorCode, "400")
				h.Set(api.HeaderError, err.Error())
				_ = m.RespondMsg(&nats.Msg{Header: h, Data: []byte(`{}`)})
				return
			}
			mu.Lock()
			largest = max(largest, len(r.IDs))
			before := len(extended)
			for _, id := range r.IDs {
				extended[id] = true
			}
			if before < total && len(extended) == total {
				beaten()
			}
			mu.Unlock()
			respondJSON(m, api.HeartbeatReply{Extended: r.IDs})
		},
		api.SubjectAck: func(m *nats.Msg) { respondJSON(m, api.AckReply{}) },
	}
	c := fakeBus(t, subs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A lease long enough that no job's runs out while 1200 slots take
	// their jobs on a loaded machine (CI under -race let some go); the
	// first heartbeat goes a third of it in.
	w := NewWorker(c, WorkerConfig{Queues: []string{"q"}, Concurrency: total, Lease: 3 * time.Second},
		func(context.Context, api.Job) (json.RawMessage, error) {
			<-allBeat
			return nil, nil
		})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-allBeat:
	case <-time.After(30 * time.Second):
		mu.Lock()
		t.Errorf("%d of %d jobs' leases extended", len(extended), total)
		mu.Unlock()
		beaten()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if largest > api.MaxClaim {
		t.Errorf("a heartbeat named %d jobs, more than %d", largest, api.MaxClaim)
	}
}

// A job given back at the stop can come straight back to the worker's
// claim in flight, under the same attempt. The give-back of the first
// copy must not drop the worker's hold on the second, which is then given
// back too (it was dropped, left running until its lease ran out). Which
// copy the stop finds first varies from run to run, so the test stops
// the worker ten times; each time, every copy of x handed out that did
// not run is given back.
func TestWorkerGivesBackAJobThatCameBackToItsOwnClaim(t *testing.T) {
	for range 10 {
		handed, released := stopWithAClaimInFlight(t)
		if handed != released {
			t.Fatalf("x handed out %d times and never run, given back %d times", handed, released)
		}
	}
}

func stopWithAClaimInFlight(t *testing.T) (handed, released int) {
	t.Helper()
	var (
		mu     sync.Mutex
		claims int
		held   *nats.Msg // the second claim: a long poll, answered when x comes back or the wait ends
	)
	secondClaim := make(chan struct{})
	x := api.Job{ID: "x", Queue: "q", Task: "t", Attempt: 1}
	subs := map[string]nats.MsgHandler{
		api.SubjectClaim: func(m *nats.Msg) {
			var r api.ClaimRequest
			_ = json.Unmarshal(m.Data, &r)
			mu.Lock()
			defer mu.Unlock()
			claims++
			switch claims {
			case 1:
				handed++
				respondJSON(m, api.ClaimReply{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t", Attempt: 1}, x}})
			case 2:
				held = m
				close(secondClaim)
				time.AfterFunc(time.Duration(r.WaitMS)*time.Millisecond, func() {
					mu.Lock()
					defer mu.Unlock()
					if held == m {
						held = nil
						respondJSON(m, api.ClaimReply{Jobs: []api.Job{}})
					}
				})
			default:
				respondJSON(m, api.ClaimReply{Jobs: []api.Job{}})
			}
		},
		api.SubjectNack: func(m *nats.Msg) {
			var r api.NackRequest
			_ = json.Unmarshal(m.Data, &r)
			mu.Lock()
			slow := false
			if r.ID == "x" && r.Release {
				released++
				if held != nil {
					// x is pending again: the claim waiting for a job gets
					// it, and the give-back's own answer comes later (a
					// node busy elsewhere), after the worker holds x anew.
					handed++
					respondJSON(held, api.ClaimReply{Jobs: []api.Job{x}})
					held = nil
					slow = true
				}
			}
			mu.Unlock()
			if slow {
				time.AfterFunc(20*time.Millisecond, func() { respondJSON(m, api.NackReply{Status: api.StatusPending}) })
				return
			}
			respondJSON(m, api.NackReply{Status: api.StatusPending})
		},
		api.SubjectAck: func(m *nats.Msg) { respondJSON(m, struct{}{}) },
	}
	c := fakeBus(t, subs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aRuns := make(chan struct{})
	w := NewWorker(c, WorkerConfig{Queues: []string{"q"}, Concurrency: 1, Prefetch: 2, Wait: 50 * time.Millisecond},
		func(_ context.Context, j api.Job) (json.RawMessage, error) {
			if j.ID == "a" {
				<-aRuns
			} else {
				t.Errorf("%s ran; only a was to run", j.ID)
			}
			return nil, nil
		})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-secondClaim: // a runs, x waits (prefetched), a claim is in flight
	case <-time.After(10 * time.Second):
		t.Fatal("no second claim")
	}
	cancel() // stop: x is given back, not started
	close(aRuns)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return handed, released
}

// A job held ahead whose lease is lost gives its place back at once: the
// worker claims another while its slot is still busy, instead of waiting
// for the slot to find the lost job.
func TestWorkerClaimsInPlaceOfAHeldJobWhoseLeaseIsLost(t *testing.T) {
	var (
		mu     sync.Mutex
		claims int
	)
	another := make(chan struct{})
	subs := map[string]nats.MsgHandler{
		api.SubjectClaim: func(m *nats.Msg) {
			mu.Lock()
			defer mu.Unlock()
			claims++
			switch claims {
			case 1:
				respondJSON(m, api.ClaimReply{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t", Attempt: 1}, {ID: "b", Queue: "q", Task: "t", Attempt: 1}}})
			case 2:
				close(another)
				fallthrough
			default:
				respondJSON(m, api.ClaimReply{Jobs: []api.Job{}})
			}
		},
		api.SubjectHeartbeat: func(m *nats.Msg) {
			// a's lease is extended; b's is gone.
			respondJSON(m, api.HeartbeatReply{Extended: []string{"a"}})
		},
		api.SubjectAck: func(m *nats.Msg) { respondJSON(m, struct{}{}) },
	}
	c := fakeBus(t, subs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := NewWorker(c, WorkerConfig{Queues: []string{"q"}, Concurrency: 1, Prefetch: 1, Lease: 300 * time.Millisecond, Wait: 50 * time.Millisecond},
		func(_ context.Context, j api.Job) (json.RawMessage, error) {
			if j.ID != "a" {
				t.Errorf("%s ran; its lease was lost", j.ID)
				return nil, nil
			}
			select {
			case <-another: // claimed while a still runs
			case <-time.After(10 * time.Second):
				t.Error("no claim in place of b while a ran")
			}
			return nil, nil
		})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-another:
	case <-time.After(10 * time.Second):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A claim's long poll may hand a job out more than a lease after the
// claim was sent (the job came due late in the wait): its lease starts
// then, so the worker starts it. (Timed from the claim's sending, it was
// let go of on arrival, claimed again under the next attempt and let go
// of again, each time a longer backoff: a job stuck pending.)
func TestWorkerTimesALeaseFromWhenTheNodeHandedTheJobOut(t *testing.T) {
	// Long enough for the free slot to take the job well within it on a
	// loaded machine; the poll hands it out after twice that.
	const lease = time.Second
	var (
		mu     sync.Mutex
		served bool
	)
	subs := map[string]nats.MsgHandler{
		api.SubjectClaim: func(m *nats.Msg) {
			mu.Lock()
			first := !served
			served = true
			mu.Unlock()
			if !first {
				respondJSON(m, api.ClaimReply{Jobs: []api.Job{}})
				return
			}
			// The job comes due twice the lease into the long poll.
			go func() {
				time.Sleep(2 * lease) // a slow node: the wait being modelled
				until := time.Now().Add(lease)
				respondJSON(m, api.ClaimReply{Jobs: []api.Job{{ID: "a", Queue: "q", Task: "t", Attempt: 1, LeaseUntil: &until}}})
			}()
		},
		api.SubjectAck: func(m *nats.Msg) { respondJSON(m, struct{}{}) },
	}
	c := fakeBus(t, subs)
	logs := make(chan string, 64)
	ran := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := NewWorker(c, WorkerConfig{
		Queues: []string{"q"}, Concurrency: 1, Lease: lease, Wait: 5 * lease,
		Log: slog.New(logSignal{ch: logs}),
	}, func(_ context.Context, j api.Job) (json.RawMessage, error) {
		ran <- j.ID
		return nil, nil
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for waiting := true; waiting; {
		select {
		case id := <-ran:
			if id != "a" {
				t.Errorf("ran %s, want a", id)
			}
			waiting = false
		case m := <-logs:
			if m == notStarted {
				t.Errorf("the worker let go of a job its lease had just begun for")
				waiting = false
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a never ran")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The node's lease_until, read by the worker's clock, is kept between the
// claim's sending and its answer plus the lease: a clock skewed either way
// moves the deadline by at most the claim's round trip.
func TestLeaseDeadline(t *testing.T) {
	const lease = 10 * time.Second
	sent := time.Now()
	recv := sent.Add(3 * time.Second) // a long poll
	at := func(d time.Duration) *time.Time { u := sent.Add(d).Round(0); return &u }
	for _, c := range []struct {
		name  string
		until *time.Time
		want  time.Duration // after sent
	}{
		{"no lease_until", nil, lease},
		{"handed out mid-poll, clocks agree", at(2*time.Second + lease), 2*time.Second + lease},
		{"node's clock an hour ahead", at(time.Hour + lease), 3*time.Second + lease},
		{"node's clock an hour behind", at(-time.Hour + lease), lease},
	} {
		got := leaseDeadline(api.Job{LeaseUntil: c.until}, sent, recv, lease).Sub(sent)
		if got != c.want {
			t.Errorf("%s: deadline sent+%v, want sent+%v", c.name, got, c.want)
		}
	}
}
