package bus

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
)

// recordingActors answers every call at once and keeps the messages.
type recordingActors struct {
	mu   sync.Mutex
	msgs []*actors.Message
}

func (a *recordingActors) Send(_ string, m *actors.Message) {
	a.mu.Lock()
	a.msgs = append(a.msgs, m)
	a.mu.Unlock()
	m.Reply(api.EnqueueReply{Results: []api.EnqueueResult{{ID: "j", Outcome: api.OutcomeEnqueued}}}, nil)
}

// A node's own call forwarded to the namespace's owner keeps what the
// owner's actor needs to pace its refusal: that it is a client's call
// (gRPC), and how long its caller still waits.
func TestInternalOpsCarryPaceAndDeadline(t *testing.T) {
	b := startAuthBus(t)
	conn := func(id string) *nats.Conn {
		nc, err := Connect(ConnectOptions{Server: b.srv, Name: id, Secret: testSecret})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	owner := &recordingActors{}
	sub, err := ServeInternalOps(conn("n2"), "n2", owner, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	waitListening(t, b, api.SubjectInternalOp("n2"), true)
	rs := &RoutedSender{NC: conn("n1"), Local: &recordingActors{}, Router: view{p: newPlacement("n2"), node: "n1"}}

	send := func(m *actors.Message) *actors.Message {
		t.Helper()
		answered := make(chan *api.Error, 1)
		m.Op, m.Body = actors.OpEnqueue, &api.EnqueueRequest{Jobs: []api.Job{{Queue: "q", Task: "t"}}}
		m.Reply = func(_ any, e *api.Error) { answered <- e }
		rs.Send("acme", m)
		if e := <-answered; e != nil {
			t.Fatal(e)
		}
		owner.mu.Lock()
		defer owner.mu.Unlock()
		return owner.msgs[len(owner.msgs)-1]
	}
	by := time.Now().Add(3 * time.Second)
	got := send(&actors.Message{Paced: true, AnswerBy: by})
	if !got.Paced || got.AnswerBy.Before(by.Add(-time.Second)) || got.AnswerBy.After(by.Add(time.Second)) {
		t.Fatalf("the owner's actor got paced %v, answer by %v from now; want true, about 3 s", got.Paced, time.Until(got.AnswerBy))
	}
	if got := send(&actors.Message{}); got.Paced || !got.AnswerBy.IsZero() {
		t.Fatalf("the node's own call reached the owner as paced %v, answer by %v; want neither", got.Paced, got.AnswerBy)
	}
}
