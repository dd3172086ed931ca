package bus

import (
	"context"
	"crypto/sha256"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
)

// tokens is a TokenVerifier over a fixed set of live tokens.
type tokens struct {
	mu   sync.Mutex
	live map[string]auth.Principal // by token
}

func (v *tokens) AuthenticateToken(_ context.Context, token string) (auth.Principal, *api.Error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	p, ok := v.live[token]
	if !ok {
		return auth.Principal{}, api.Errorf(api.CodeUnauthenticated, "", "bad token")
	}
	return p, nil
}

func (v *tokens) Live(_ context.Context, h []byte) (bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for t := range v.live {
		if sum := sha256.Sum256([]byte(t)); string(sum[:]) == string(h) {
			return true, nil
		}
	}
	return false, nil
}

func (v *tokens) revoke(token string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.live, token)
}

const (
	testSecret   = "fq_cluster_test_secret"
	producerTok  = "fq_producer_token"
	producer2Tok = "fq_other_tenant_token"
)

type authBus struct {
	srv    *server.Server
	auth   *ClientAuth
	tokens *tokens
	node   *nats.Conn
}

func startAuthBus(t *testing.T) *authBus {
	t.Helper()
	v := &tokens{live: map[string]auth.Principal{
		producerTok:  {TokenID: "tok_p", Namespace: "acme", Role: auth.RoleProducer},
		producer2Tok: {TokenID: "tok_q", Namespace: "other", Role: auth.RoleProducer},
	}}
	a := NewClientAuth(testSecret, v, nil)
	srv, err := StartEmbedded(EmbeddedOptions{Listen: "127.0.0.1:-1", Auth: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	node, err := Connect(ConnectOptions{Server: srv, Name: "node", Secret: testSecret})
	if err != nil {
		t.Fatalf("a node with the cluster secret: %v", err)
	}
	t.Cleanup(node.Close)
	// The node serves enqueue, answering "ok".
	if _, err := node.QueueSubscribe(api.SubjectEnqueue, api.QueueGroup, func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	return &authBus{srv: srv, auth: a, tokens: v, node: node}
}

// violations collects the permission errors the server sends a client.
type violations chan error

func (b *authBus) connect(t *testing.T, token string) (*nats.Conn, violations) {
	t.Helper()
	errs := make(violations, 16)
	opts := []nats.Option{
		nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }),
	}
	if token != "" {
		opts = append(opts, nats.Token(token), nats.CustomInboxPrefix(api.InboxPrefix(token)))
	}
	nc, err := nats.Connect(b.srv.ClientURL(), opts...)
	if err != nil {
		return nil, errs
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

func (v violations) want(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-v:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("%s: error %v, want a permissions violation", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the server did not refuse it", what)
	}
}

func TestConnectionsWithoutAValidTokenAreRefused(t *testing.T) {
	b := startAuthBus(t)
	for _, tc := range []struct{ name, token string }{
		{"no token", ""},
		{"unknown token", "fq_not_a_token"},
		{"the secret's prefix", testSecret[:10]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []nats.Option{nats.MaxReconnects(0)}
			if tc.token != "" {
				opts = append(opts, nats.Token(tc.token))
			}
			nc, err := nats.Connect(b.srv.ClientURL(), opts...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("error %v, want an authorization violation", err)
			}
		})
	}
}

// A client may use the request subjects and its own inbox, and nothing
// else: every other subscription or publish is refused by the server and
// delivers nothing.
func TestAClientMayOnlyRequestAndReadItsOwnInbox(t *testing.T) {
	b := startAuthBus(t)
	nc, errs := b.connect(t, producerTok)
	if nc == nil {
		t.Fatal("a live token cannot connect")
	}
	// What it may do: a request through its private inbox, on a request
	// subject or its owner form.
	reply, err := nc.Request(api.SubjectEnqueue, []byte("{}"), 5*time.Second)
	if err != nil || string(reply.Data) != "ok" {
		t.Fatalf("request: %v %v", reply, err)
	}
	owner := api.OwnerToken("n5")
	if _, err := b.node.Subscribe(api.SubjectOwner(owner, ">"), func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := b.node.Flush(); err != nil {
		t.Fatal(err)
	}
	reply, err = nc.Request(api.SubjectOwner(owner, api.SubjectAck), []byte("{}"), 5*time.Second)
	if err != nil || string(reply.Data) != "ok" {
		t.Fatalf("request on an owner subject: %v %v", reply, err)
	}

	got := make(chan *nats.Msg, 16)
	collect := func(m *nats.Msg) { got <- m }
	for _, tc := range []struct {
		name string
		sub  func() error
	}{
		{"subscribe >", func() error { _, err := nc.Subscribe(">", collect); return err }},
		{"subscribe _INBOX.>", func() error { _, err := nc.Subscribe("_INBOX.>", collect); return err }},
		{"subscribe another tenant's inbox", func() error {
			_, err := nc.Subscribe(api.InboxPrefix(producer2Tok)+".>", collect)
			return err
		}},
		{"queue-subscribe a request subject", func() error {
			_, err := nc.QueueSubscribe(api.SubjectEnqueue, api.QueueGroup, collect)
			return err
		}},
		{"subscribe an owner subject", func() error {
			_, err := nc.Subscribe(api.SubjectOwner(owner, ">"), collect)
			return err
		}},
		{"subscribe a broadcast", func() error { _, err := nc.Subscribe(api.SubjectQuotaChanged, collect); return err }},
		{"subscribe fq.internal.>", func() error { _, err := nc.Subscribe(api.SubjectInternal, collect); return err }},
	} {
		if err := tc.sub(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		errs.want(t, tc.name)
	}

	// The node's subscriptions on what a client may not publish.
	nodeGot := make(chan *nats.Msg, 16)
	for _, subj := range []string{api.SubjectQuotaChanged, "fq.internal.x", "$JS.API.STREAM.CREATE.x", "_INBOX.x"} {
		if _, err := b.node.Subscribe(subj, func(m *nats.Msg) { nodeGot <- m }); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.node.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{api.SubjectQuotaChanged, "fq.internal.x", "$JS.API.STREAM.CREATE.x", "_INBOX.x"} {
		if err := nc.Publish(subj, []byte(`{"namespace":"acme","revision":9223372036854775807}`)); err != nil {
			t.Fatal(err)
		}
		errs.want(t, "publish "+subj)
	}

	// Something every refused subscription would have seen, then a reply
	// that comes after it on the same path: when the reply arrives, the
	// refused subscriptions have had their chance.
	if err := b.node.Publish(api.SubjectQuotaChanged, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Request(api.SubjectEnqueue, []byte("{}"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.node.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		t.Fatalf("a refused subscription received %s", m.Subject)
	default:
	}
	// The node saw only its own broadcast, none of the client's.
	if m := <-nodeGot; string(m.Data) != "{}" {
		t.Fatalf("the node received the client's publish on %s: %s", m.Subject, m.Data)
	}
	select {
	case m := <-nodeGot:
		t.Fatalf("the node received the client's publish on %s: %s", m.Subject, m.Data)
	default:
	}
}

// Only a node (the cluster secret) can answer requests: a client that
// tries to serve a request subject is refused and never answers.
func TestOnlyNodesServe(t *testing.T) {
	b := startAuthBus(t)
	imp, errs := b.connect(t, producer2Tok)
	if _, err := imp.QueueSubscribe(api.SubjectEnqueue, api.QueueGroup, func(m *nats.Msg) { _ = m.Respond([]byte("forged")) }); err != nil {
		t.Fatal(err)
	}
	errs.want(t, "serving "+api.SubjectEnqueue)
	nc, _ := b.connect(t, producerTok)
	for i := 0; i < 20; i++ {
		reply, err := nc.Request(api.SubjectEnqueue, []byte("{}"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if string(reply.Data) != "ok" {
			t.Fatalf("reply %q from an impostor", reply.Data)
		}
	}
}

func TestARevokedTokensConnectionsAreClosed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(b *authBus)
	}{
		// The revocation broadcast reached this node.
		{"broadcast", func(b *authBus) { b.auth.Revoked("tok_p") }},
		// It was lost: the sweep asks the store.
		{"sweep", func(b *authBus) { b.auth.Sweep(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startAuthBus(t)
			nc, _ := b.connect(t, producerTok)
			other, _ := b.connect(t, producer2Tok)
			closed := make(chan struct{})
			nc.SetClosedHandler(func(*nats.Conn) { close(closed) })

			b.tokens.revoke(producerTok)
			tc.close(b)
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("the revoked token's connection is still open")
			}
			if _, err := other.Request(api.SubjectEnqueue, []byte("{}"), 5*time.Second); err != nil {
				t.Fatalf("another token's connection was hurt: %v", err)
			}
			if _, err := nats.Connect(b.srv.ClientURL(), nats.Token(producerTok), nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("reconnect with the revoked token: %v, want an authorization violation", err)
			}
		})
	}
}

// An embedded server that cannot listen (the address is taken, as when
// another process grabbed the port) fails at once and says why, instead
// of after its 10 s wait with no cause.
func TestStartEmbeddedSaysWhyItCannotListen(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a := NewClientAuth(testSecret, &tokens{live: map[string]auth.Principal{}}, nil)
	srv, err := StartEmbedded(EmbeddedOptions{Listen: l.Addr().String(), Auth: a})
	if err == nil {
		srv.Shutdown()
		t.Fatalf("started on %s, which another listener holds", l.Addr())
	}
	if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("error %q: want the address and why it cannot listen there", err)
	}
}
