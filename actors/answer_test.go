package actors

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/store/sqlite"
)

// answerBesideSystem is a system with Deps.AnswerBeside on a store whose
// step is not one transaction (SQLite behind ackGate, as PostgreSQL is),
// reporting its steps to the returned channel.
func answerBesideSystem(t *testing.T) (*System, chan stepReport) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obs := stepReports{ch: make(chan stepReport, 1000)}
	sys := NewSystem(context.Background(), Deps{Store: newAckGate(st), Snapshots: cachebust.New(st, time.Second, nil),
		Observer: obs, OverlapAcks: true, AnswerBeside: true})
	t.Cleanup(func() {
		if err := sys.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		st.Close()
	})
	return sys, obs.ch
}

// stepTaking waits for the report of a step that took a message.
func stepTaking(t *testing.T, steps <-chan stepReport, what string) {
	t.Helper()
	for {
		select {
		case r := <-steps:
			if r.messages > 0 {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no step took %s in 10 s", what)
		}
	}
}

// sendHeld sends an enqueue of job id to acme whose answer, once the
// actor gives it, is held in its Reply until free is called: entered is
// closed as the answer is being given, and given then gets it. free is
// also called as the test ends, before the system's Stop, so that a
// failure does not hang it.
func sendHeld(t *testing.T, sys *System, id string) (entered <-chan struct{}, given <-chan answer, free func()) {
	in, release, out := make(chan struct{}), make(chan struct{}), make(chan answer, 1)
	var once sync.Once
	free = func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	sys.Send("acme", &Message{Op: OpEnqueue, Body: &api.EnqueueRequest{Jobs: []api.Job{{ID: id, Queue: "q", Task: "t"}}},
		Reply: func(b any, e *api.Error) {
			close(in)
			<-release
			out <- answer{b, e}
		}})
	return in, out, free
}

// With AnswerBeside, giving a step's answers does not hold the actor: while
// the first call's answer is still being given, the actor takes and writes
// the next call. Each answer is given, in order, and the calls' jobs are
// stored.
func TestAnswersBesideLetTheNextStepGoOn(t *testing.T) {
	sys, steps := answerBesideSystem(t)
	entered, first, free := sendHeld(t, sys, "a")
	stepTaking(t, steps, "the first call")
	<-entered // its answer is being given, and held there

	second := send(sys, "acme", OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{ID: "b", Queue: "q", Task: "t"}}})
	// Without AnswerBeside the actor would still be inside the first
	// step, giving its answer: no second step.
	stepTaking(t, steps, "the second call while the first answer was held")
	select {
	case a := <-second:
		t.Fatalf("the second answer (%+v) overtook the first", a)
	default:
	}

	free()
	for name, ch := range map[string]<-chan answer{"a": first, "b": second} {
		a := wait(t, ch)
		if a.err != nil {
			t.Fatalf("enqueue of %s: %v", name, a.err)
		}
		if res := a.body.(api.EnqueueReply).Results; len(res) != 1 || res[0].ID != name || res[0].Outcome != api.OutcomeEnqueued {
			t.Fatalf("enqueue of %s answered %+v", name, res)
		}
	}
}

// A step's answers leave before its actor is gone: Stop does not return
// while an answer handed to the answering goroutine is still being given
// (the actor's goroutine waits for it in closeAnswers), and once it is
// given, Stop returns and that goroutine has ended (goleak, in TestMain,
// fails the package when an actor leaves it running).
func TestStopGivesTheAnswersBesideFirst(t *testing.T) {
	sys, steps := answerBesideSystem(t)
	_, given, free := sendHeld(t, sys, "a")
	stepTaking(t, steps, "the call")

	stopped := make(chan error, 1)
	go func() { stopped <- sys.Stop(context.Background()) }()
	if returned := waitBlockedIn(t, "actors.(*Actor).closeAnswers", stopped); returned {
		t.Fatal("Stop returned while the step's answer was still being given")
	}
	free()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-given:
		if a.err != nil {
			t.Fatalf("answer given at stop: %v", a.err)
		}
	default:
		t.Fatal("Stop returned before the step's answer was given")
	}
}

// waitBlockedIn waits until a goroutine is blocked receiving from a
// channel inside fn (its stack, as runtime.Stack shows it), and reports
// false; or until done has a value first, and reports true (put back).
// The goroutines' stacks are the one signal of "waits there": they are
// looked at every millisecond.
func waitBlockedIn(t *testing.T, fn string, done chan error) bool {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[chan receive") && strings.Contains(g, fn+"(") {
				return false
			}
		}
		select {
		case err := <-done:
			done <- err
			return true
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine blocked in %s within 10 s", fn)
		}
	}
}
