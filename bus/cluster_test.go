package bus

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/internal/testcert"
	"github.com/flexiq/flexiq/internal/tlsfiles"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, made in the
// test, and returns their paths.
func selfSigned(t *testing.T) (pair *tlsfiles.Pair, certFile string) {
	certFile, keyFile := testcert.Write(t, t.TempDir(), 1)
	pair, err := tlsfiles.Load(certFile, keyFile, "test TLS", nil)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certFile
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// logSpy collects a server's log lines.
type logSpy struct {
	seen chan string
}

func newLogSpy() *logSpy { return &logSpy{seen: make(chan string, 1024)} }

func (l *logSpy) log(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	select {
	case l.seen <- line:
	default:
	}
}
func (l *logSpy) Noticef(format string, v ...any) { l.log(format, v...) }
func (l *logSpy) Warnf(format string, v ...any)   { l.log(format, v...) }
func (l *logSpy) Fatalf(format string, v ...any)  { l.log(format, v...) }
func (l *logSpy) Errorf(format string, v ...any)  { l.log(format, v...) }
func (l *logSpy) Debugf(format string, v ...any)  { l.log(format, v...) }
func (l *logSpy) Tracef(format string, v ...any)  { l.log(format, v...) }

// waitLine waits for a log line containing want.
func (l *logSpy) waitLine(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line := <-l.seen:
			if testing.Verbose() {
				t.Log(line)
			}
			if strings.Contains(line, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no log line with %q", want)
		}
	}
}

func clusterMember(t *testing.T, o EmbeddedOptions) *server.Server {
	t.Helper()
	v := &tokens{live: map[string]auth.Principal{producerTok: {TokenID: "tok_p", Namespace: "acme", Role: auth.RoleProducer}}}
	o.Auth = NewClientAuth(o.ClusterSecret, v, nil)
	if o.Listen == "" {
		o.Listen = "127.0.0.1:-1"
	}
	s, err := StartEmbedded(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// Two embedded servers joined by a route over TLS, authenticated with the
// cluster secret: a node on one serves a client on the other; a client
// that does not trust the certificate cannot connect at all.
func TestRoutesAndClientsOverTLS(t *testing.T) {
	pair, cert := selfSigned(t)
	routeA := freePort(t)
	a := clusterMember(t, EmbeddedOptions{ServerName: "a", ClusterSecret: testSecret, ClusterListen: routeA, TLS: pair})
	spy := newLogSpy()
	a.SetLoggerV2(spy, false, false, false)
	b := clusterMember(t, EmbeddedOptions{ServerName: "b", ClusterSecret: testSecret, Routes: []string{"nats://" + routeA}, TLS: pair})
	spy.waitLine(t, "Route connection created")

	node, err := Connect(ConnectOptions{Server: a, Name: "node-a", Secret: testSecret, TLS: pair})
	if err != nil {
		t.Fatalf("node over TLS: %v", err)
	}
	defer node.Close()
	if _, err := node.QueueSubscribe(api.SubjectEnqueue, api.QueueGroup, func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	c, err := nats.Connect(b.ClientURL(), nats.Token(producerTok), nats.CustomInboxPrefix(api.InboxPrefix(producerTok)),
		nats.Secure(&tls.Config{RootCAs: testcert.Pool(t, cert), MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatalf("client over TLS: %v", err)
	}
	defer c.Close()
	// The node's interest crosses the route just after the route forms: a
	// request may find no responder for a moment, never more.
	for i := 0; ; i++ {
		reply, err := c.Request(api.SubjectEnqueue, []byte("{}"), 5*time.Second)
		if err == nil {
			if string(reply.Data) != "ok" {
				t.Fatalf("reply %q", reply.Data)
			}
			break
		}
		if err != nats.ErrNoResponders || i > 10000 {
			t.Fatalf("request across the route: %v", err)
		}
	}
	if !c.TLSRequired() {
		t.Fatal("the connection is not TLS")
	}
	if nc, err := nats.Connect(b.ClientURL(), nats.Token(producerTok), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a client that does not trust the certificate connected")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("connect without the CA: %v, want a certificate error", err)
	}
}

// A route that does not present the cluster secret is refused.
func TestARouteWithoutTheSecretIsRefused(t *testing.T) {
	routeA := freePort(t)
	a := clusterMember(t, EmbeddedOptions{ServerName: "a", ClusterSecret: testSecret, ClusterListen: routeA})
	spy := newLogSpy()
	a.SetLoggerV2(spy, false, false, false)
	clusterMember(t, EmbeddedOptions{ServerName: "intruder", ClusterSecret: "fq_cluster_wrong", Routes: []string{"nats://" + routeA}})
	spy.waitLine(t, "Authentication Failure")
	if n := a.NumRoutes(); n != 0 {
		t.Fatalf("%d routes after refusing the intruder", n)
	}
}
