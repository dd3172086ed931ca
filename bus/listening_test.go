package bus

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/internal/testlog"
)

// keepingActors keeps every call unanswered, as an actor keeps a parked
// claim.
type keepingActors struct{ got chan *actors.Message }

func (a keepingActors) Send(_ string, m *actors.Message) { a.got <- m }

type workerAuth struct{}

func (workerAuth) Authenticate(context.Context, string) (auth.Principal, *api.Error) {
	return auth.Principal{TokenID: "tok_w", Namespace: "acme", Role: auth.RoleWorker}, nil
}

// A claim tells its actor whether its client still listens: once the
// client's connection closes, the parked claim is gone and is given no
// job (which nobody would work until its lease ran out).
func TestAClaimKnowsWhenItsClientLeft(t *testing.T) {
	b := startAuthBus(t)
	a := keepingActors{got: make(chan *actors.Message, 4)}
	svc, err := NewService(context.Background(), b.node, "n1", a, workerAuth{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	svc.SetInterest(b.srv.GlobalAccount().SubscriptionInterest)
	if err := b.node.Flush(); err != nil {
		t.Fatal(err)
	}

	nc, _ := b.connect(t, producerTok)
	if nc == nil {
		t.Fatal("a live token cannot connect")
	}
	inbox := nc.NewInbox()
	if _, err := nc.SubscribeSync(inbox); err != nil {
		t.Fatal(err)
	}
	send := func(subject, body string) *actors.Message {
		t.Helper()
		msg := &nats.Msg{Subject: subject, Reply: inbox, Data: []byte(body),
			Header: nats.Header{api.HeaderAuthorization: []string{"Bearer w"}}}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-a.got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never reached the actor", subject)
			return nil
		}
	}
	claim := send(api.SubjectClaim, `{"queues":["q"],"max":1,"wait_ms":60000}`)
	if claim.Gone() {
		t.Fatal("a claim whose client listens is gone")
	}
	if ack := send(api.SubjectAck, `{"id":"j"}`); ack.Listening != nil {
		t.Fatal("an ack asks whether its client listens: only a claim may hand out jobs")
	}
	nc.Close()
	waitListening(t, b, inbox, false)
	if !claim.Gone() {
		t.Fatal("the claim of a client whose connection closed is not gone")
	}
}

// A reply nobody listens for (its caller's connection closed; in a
// cluster, the caller's interest not yet across the routes) is said at
// debug level, so a call that timed out can be told from one never
// answered.
func TestADroppedReplyIsLoggedAtDebug(t *testing.T) {
	b := startAuthBus(t)
	a := keepingActors{got: make(chan *actors.Message, 4)}
	var logs testlog.Buffer
	svc, err := NewService(context.Background(), b.node, "n1", a, workerAuth{}, nil, logs.Logger(slog.LevelDebug))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	svc.SetInterest(b.srv.GlobalAccount().SubscriptionInterest)
	if err := b.node.Flush(); err != nil {
		t.Fatal(err)
	}
	nc, _ := b.connect(t, producerTok)
	if nc == nil {
		t.Fatal("a live token cannot connect")
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	claim := func() *actors.Message {
		t.Helper()
		if err := nc.PublishMsg(&nats.Msg{Subject: api.SubjectClaim, Reply: inbox, Data: []byte(`{"queues":["q"],"max":1}`),
			Header: nats.Header{api.HeaderAuthorization: []string{"Bearer w"}}}); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-a.got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("the claim never reached the actor")
			return nil
		}
	}
	const dropped = "reply dropped"
	claim().Reply(api.ClaimReply{}, nil)
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the listening caller got no reply: %v", err)
	}
	if strings.Contains(logs.String(), dropped) {
		t.Fatalf("a delivered reply is logged as dropped:\n%s", logs.String())
	}
	m := claim()
	nc.Close()
	waitListening(t, b, inbox, false)
	m.Reply(api.ClaimReply{}, nil)
	if got := logs.String(); !strings.Contains(got, dropped) || !strings.Contains(got, inbox) {
		t.Fatalf("the reply to a closed connection is not logged as dropped:\n%s", got)
	}
}
