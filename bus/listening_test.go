package bus

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
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

// startKeptCalls starts the service of node n1, alone or (router not
// nil) in a cluster; setup, when not nil, may change it before any call
// comes (its interest is the server's until then).
func startKeptCalls(t *testing.T, log *slog.Logger, router Router, setup ...func(*Service)) *keptCalls {
	t.Helper()
	k := &keptCalls{b: startAuthBus(t), got: make(chan *actors.Message, 4)}
	svc, err := NewService(context.Background(), k.b.node, "n1", keepingActors{got: k.got}, workerAuth{}, router, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	svc.SetInterest(k.b.srv.GlobalAccount().SubscriptionInterest)
	for _, f := range setup {
		f(svc)
	}
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

// publish calls subject with the client's inbox as reply subject.
func (k *keptCalls) publish(t *testing.T, subject, body string) {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Reply: k.inbox.Subject, Data: []byte(body),
		Header: nats.Header{api.HeaderAuthorization: []string{"Bearer w"}}}
	if err := k.nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
}

// send calls subject with the client's inbox as reply subject and returns
// the message its actor got.
func (k *keptCalls) send(t *testing.T, subject, body string) *actors.Message {
	t.Helper()
	k.publish(t, subject, body)
	return k.received(t, subject)
}

// received is the next call the actor got.
func (k *keptCalls) received(t *testing.T, subject string) *actors.Message {
	t.Helper()
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
	k := startKeptCalls(t, nil, nil)
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
	k := startKeptCalls(t, logs.Logger(slog.LevelDebug), nil)
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

// lateInterest makes the service's interest in reply inboxes unknown
// while hidden is set, as on a node the caller's interest has not reached
// through the routes yet; asked gets a value each time it is looked up
// then.
type lateInterest struct {
	hidden atomic.Bool
	asked  chan string
}

func (l *lateInterest) wrap(s *Service) {
	real := s.interest
	l.asked = make(chan string, 1024)
	l.hidden.Store(true)
	s.SetInterest(func(subject string) bool {
		if strings.HasPrefix(subject, "_INBOX") && l.hidden.Load() {
			select {
			case l.asked <- subject:
			default:
			}
			return false
		}
		return real(subject)
	})
}

// waitAsked waits until the interest in subject was looked up n times.
func (l *lateInterest) waitAsked(t *testing.T, subject string, n int) {
	t.Helper()
	for n > 0 {
		select {
		case got := <-l.asked:
			if got == subject {
				n--
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the interest in %s was not looked up again (%d to go): the claim was not held", subject, n)
		}
	}
}

// A claim that reaches a node before its caller's interest in the reply
// subject does (in a cluster, through the routes) waits for it: answered
// before, its reply and jobs would be lost, and the actor would take it
// for a claim whose caller left. On one node, where a client's interest
// always comes first, nothing is asked.
func TestAClaimWaitsForItsCallersInterest(t *testing.T) {
	var alone lateInterest
	one := startKeptCalls(t, nil, nil, alone.wrap)
	if m := one.send(t, api.SubjectClaim, `{"queues":["q"],"max":1}`); m.Op != actors.OpClaim {
		t.Fatalf("got %v, want the claim", m.Op)
	}
	select {
	case <-alone.asked:
		t.Fatal("a node without routes asked whether a claim's caller listens before passing it on")
	default:
	}

	var late lateInterest
	k := startKeptCalls(t, nil, newView(newPlacement("n1"), "n1"), late.wrap)
	const claim = `{"queues":["q"],"max":1,"wait_ms":60000}`

	k.publish(t, api.SubjectClaim, claim)
	late.waitAsked(t, k.inbox.Subject, 3) // on arrival, then again
	select {
	case m := <-k.got:
		t.Fatalf("a claim whose caller's interest is not here yet went to its actor: %+v", m.Body)
	default:
	}
	// Other calls do not wait: they hand out nothing.
	if ack := k.send(t, api.SubjectAck, `{"id":"j"}`); ack.Op != actors.OpAck {
		t.Fatalf("got %v, want the ack", ack.Op)
	}
	late.hidden.Store(false)
	if m := k.received(t, api.SubjectClaim); m.Op != actors.OpClaim || m.Gone() {
		t.Fatalf("the claim once its caller's interest came: op %v, gone %v", m.Op, m.Gone())
	}
}

// The wait is bounded: a claim whose caller's interest never shows goes
// on after the grace, and its actor finds its caller gone; past holdMax
// held claims, more go on at once.
func TestAClaimsWaitForItsCallersInterestIsBounded(t *testing.T) {
	var late lateInterest
	var now atomic.Int64 // the service's clock, moved by hand
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	k := startKeptCalls(t, nil, newView(newPlacement("n1"), "n1"), late.wrap, func(s *Service) {
		s.now = func() time.Time { return time.Unix(0, now.Load()) }
		s.holdMax = 1
	})
	k.publish(t, api.SubjectClaim, `{"queues":["q"],"max":1,"wait_ms":60000}`)
	late.waitAsked(t, k.inbox.Subject, 2)
	// One is held: the next goes on at once.
	k.publish(t, api.SubjectClaim, `{"queues":["q"],"max":2,"wait_ms":60000}`)
	if m := k.received(t, api.SubjectClaim); m.Body.(*api.ClaimRequest).Max != 2 || !m.Gone() {
		t.Fatalf("got the claim of max %d (gone %v), want the one past the bound, gone", m.Body.(*api.ClaimRequest).Max, m.Gone())
	}
	late.waitAsked(t, k.inbox.Subject, 1)
	select {
	case m := <-k.got:
		t.Fatalf("the held claim went on before its grace passed: %+v", m.Body)
	default:
	}
	now.Add(int64(claimHearGrace))
	if m := k.received(t, api.SubjectClaim); m.Body.(*api.ClaimRequest).Max != 1 || !m.Gone() {
		t.Fatalf("got the claim of max %d (gone %v), want the held one after its grace, gone", m.Body.(*api.ClaimRequest).Max, m.Gone())
	}
}
