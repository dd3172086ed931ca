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

// keptCalls is a service on an embedded server whose actors keep every
// call, and one client connection with its reply inbox.
type keptCalls struct {
	b     *authBus
	got   chan *actors.Message
	nc    *nats.Conn
	inbox *nats.Subscription
}

func startKeptCalls(t *testing.T, log *slog.Logger) *keptCalls {
	t.Helper()
	k := &keptCalls{b: startAuthBus(t), got: make(chan *actors.Message, 4)}
	svc, err := NewService(context.Background(), k.b.node, "n1", keepingActors{got: k.got}, workerAuth{}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	svc.SetInterest(k.b.srv.GlobalAccount().SubscriptionInterest)
	if err := k.b.node.Flush(); err != nil {
		t.Fatal(err)
	}
	if k.nc, _ = k.b.connect(t, producerTok); k.nc == nil {
		t.Fatal("a live token cannot connect")
	}
	if k.inbox, err = k.nc.SubscribeSync(k.nc.NewInbox()); err != nil {
		t.Fatal(err)
	}
	return k
}

// send calls subject with the client's inbox as reply subject and returns
// the message its actor got.
func (k *keptCalls) send(t *testing.T, subject, body string) *actors.Message {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Reply: k.inbox.Subject, Data: []byte(body),
		Header: nats.Header{api.HeaderAuthorization: []string{"Bearer w"}}}
	if err := k.nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-k.got:
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached the actor", subject)
		return nil
	}
}

// leave closes the client's connection and waits until the server knows.
func (k *keptCalls) leave(t *testing.T) {
	t.Helper()
	k.nc.Close()
	waitListening(t, k.b, k.inbox.Subject, false)
}

// A claim tells its actor whether its client still listens: once the
// client's connection closes, the parked claim is gone and is given no
// job (which nobody would work until its lease ran out).
func TestAClaimKnowsWhenItsClientLeft(t *testing.T) {
	k := startKeptCalls(t, nil)
	claim := k.send(t, api.SubjectClaim, `{"queues":["q"],"max":1,"wait_ms":60000}`)
	if claim.Gone() {
		t.Fatal("a claim whose client listens is gone")
	}
	if ack := k.send(t, api.SubjectAck, `{"id":"j"}`); ack.Listening != nil {
		t.Fatal("an ack asks whether its client listens: only a claim may hand out jobs")
	}
	k.leave(t)
	if !claim.Gone() {
		t.Fatal("the claim of a client whose connection closed is not gone")
	}
}

// A reply nobody listens for (its caller's connection closed; in a
// cluster, the caller's interest not yet across the routes) is said at
// debug level, so a call that timed out can be told from one never
// answered.
func TestADroppedReplyIsLoggedAtDebug(t *testing.T) {
	var logs testlog.Buffer
	k := startKeptCalls(t, logs.Logger(slog.LevelDebug))
	const claim, dropped = `{"queues":["q"],"max":1}`, "reply dropped"
	k.send(t, api.SubjectClaim, claim).Reply(api.ClaimReply{}, nil)
	if _, err := k.inbox.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the listening caller got no reply: %v", err)
	}
	if strings.Contains(logs.String(), dropped) {
		t.Fatalf("a delivered reply is logged as dropped:\n%s", logs.String())
	}
	m := k.send(t, api.SubjectClaim, claim)
	k.leave(t)
	m.Reply(api.ClaimReply{}, nil)
	if got := logs.String(); !strings.Contains(got, dropped) || !strings.Contains(got, k.inbox.Subject) {
		t.Fatalf("the reply to a closed connection is not logged as dropped:\n%s", got)
	}
}
