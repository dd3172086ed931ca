package client

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/internal/testcert"
)

// gatedConn is a socket whose writes are recorded, each with the write
// deadline set before it. The first write blocks until open is closed
// (entered says it started), so a test can write while the writer is
// busy.
type gatedConn struct {
	net.Conn // nil: only what the tests call is implemented
	entered  chan struct{}
	open     chan struct{}
	failWith error

	mu     sync.Mutex
	writes []string
	dls    []time.Time
	dl     time.Time
	closed chan struct{}
	once   sync.Once
}

func newGatedConn() *gatedConn {
	return &gatedConn{entered: make(chan struct{}), open: make(chan struct{}), closed: make(chan struct{})}
}

func (g *gatedConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	first := len(g.writes) == 0
	g.writes = append(g.writes, string(p))
	g.dls = append(g.dls, g.dl)
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.open
	}
	if g.failWith != nil {
		return 0, g.failWith
	}
	return len(p), nil
}

func (g *gatedConn) SetWriteDeadline(t time.Time) error {
	g.mu.Lock()
	g.dl = t
	g.mu.Unlock()
	return nil
}

func (g *gatedConn) SetReadDeadline(time.Time) error { return nil }

func (g *gatedConn) Close() error {
	g.once.Do(func() { close(g.closed) })
	return nil
}

func (g *gatedConn) recorded() ([]string, []time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.writes...), append([]time.Time(nil), g.dls...)
}

func mustWrite(t *testing.T, w io.Writer, s string) {
	t.Helper()
	if n, err := w.Write([]byte(s)); err != nil || n != len(s) {
		t.Fatalf("write %q: %d, %v", s, n, err)
	}
}

// Writes made while the socket is busy go out together, in order, in one
// system call.
func TestCoalescedWritesGoOutTogether(t *testing.T) {
	g := newGatedConn()
	w := newCoalesceConn(g)
	mustWrite(t, w, "PUB a\r\n")
	<-g.entered
	mustWrite(t, w, "PUB b\r\n")
	mustWrite(t, w, "PUB c\r\n")
	mustWrite(t, w, "PUB d\r\n")
	close(g.open)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	writes, _ := g.recorded()
	want := []string{"PUB a\r\n", "PUB b\r\nPUB c\r\nPUB d\r\n"}
	if len(writes) != len(want) || writes[0] != want[0] || writes[1] != want[1] {
		t.Fatalf("socket writes %q, want %q", writes, want)
	}
	if _, err := w.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v, want net.ErrClosed", err)
	}
}

// Each system call ends by the earliest deadline of the writes it
// carries; writes without one add none.
func TestCoalescedWriteKeepsItsDeadline(t *testing.T) {
	g := newGatedConn()
	w := newCoalesceConn(g)
	d1 := time.Now().Add(time.Minute)
	d2 := d1.Add(-time.Second)
	_ = w.SetWriteDeadline(d1)
	mustWrite(t, w, "a")
	_ = w.SetWriteDeadline(time.Time{})
	<-g.entered
	mustWrite(t, w, "b")
	_ = w.SetWriteDeadline(d2)
	mustWrite(t, w, "c")
	_ = w.SetWriteDeadline(time.Time{})
	mustWrite(t, w, "d")
	close(g.open)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	writes, dls := g.recorded()
	if len(writes) != 2 || writes[1] != "bcd" {
		t.Fatalf("socket writes %q", writes)
	}
	if !dls[0].Equal(d1) || !dls[1].Equal(d2) {
		t.Fatalf("deadlines %v, want %v then %v", dls, d1, d2)
	}

	// A write alone, with no deadline, has none.
	g2 := newGatedConn()
	close(g2.open)
	w2 := newCoalesceConn(g2)
	_ = w2.SetDeadline(time.Time{})
	mustWrite(t, w2, "x")
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, dls := g2.recorded(); len(dls) != 1 || !dls[0].IsZero() {
		t.Fatalf("deadlines %v, want none", dls)
	}
}

// A failed system call fails every later write and closes the socket:
// the stream is cut at an unknown point.
func TestCoalescedWriteFailureFailsLaterWrites(t *testing.T) {
	g := newGatedConn()
	g.failWith = errors.New("broken pipe")
	close(g.open)
	w := newCoalesceConn(g)
	mustWrite(t, w, "a")
	<-g.closed
	<-w.done
	if _, err := w.Write([]byte("b")); !errors.Is(err, g.failWith) {
		t.Fatalf("write after a failure: %v, want %v", err, g.failWith)
	}
	_ = w.Close()
	if writes, _ := g.recorded(); len(writes) != 1 {
		t.Fatalf("socket writes %q, want only the first", writes)
	}
}

// Past maxCoalesced bytes waiting, a write waits for the writer to take
// them, as a write waits on a full socket.
func TestCoalescedWriteWaitsForRoom(t *testing.T) {
	g := newGatedConn()
	w := newCoalesceConn(g)
	waits := make(chan struct{}, 1)
	w.mu.Lock()
	w.waiting = func() {
		select {
		case waits <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
	mustWrite(t, w, "a")
	<-g.entered
	big := string(bytes.Repeat([]byte("x"), maxCoalesced))
	mustWrite(t, w, big) // into an empty buffer: goes in whatever its size
	wrote := make(chan error, 1)
	go func() {
		_, err := w.Write([]byte("y"))
		wrote <- err
	}()
	select {
	case <-waits:
	case err := <-wrote:
		t.Fatalf("a write past the bound returned (%v) while the socket was busy", err)
	}
	close(g.open)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	writes, _ := g.recorded()
	if got := joined(writes); got != "a"+big+"y" {
		t.Fatalf("socket got %d bytes, want %d in order", len(got), len(big)+2)
	}
}

func joined(ss []string) string {
	var b bytes.Buffer
	for _, s := range ss {
		b.WriteString(s)
	}
	return b.String()
}

// Over a real socket: what was written before Close arrives, then the
// end of the stream.
func TestCoalescedCloseWritesWhatWasWritten(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	d := &coalesceDialer{o: &nats.Options{Timeout: 5 * time.Second}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 0; i < 1000; i++ {
		s := "PUB fq.v1.enqueue 2\r\n{}\r\n"
		want.WriteString(s)
		mustWrite(t, c, s)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("peer got %d bytes, want %d", len(b), want.Len())
	}
}

// A client's connection coalesces its writes unless told otherwise.
func TestConnectCoalescesWrites(t *testing.T) {
	srv := startNATS(t)
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.Conn().Opts.CustomDialer.(*coalesceDialer); !ok {
		t.Fatalf("dialer %T, want coalesced writes", c.Conn().Opts.CustomDialer)
	}
	// A round trip through it (PING, PONG).
	if err := c.Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	off, err := Connect(srv.ClientURL(), "tok", nats.SetCustomDialer(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if off.Conn().Opts.CustomDialer != nil {
		t.Fatalf("dialer %T after SetCustomDialer(nil)", off.Conn().Opts.CustomDialer)
	}
}

// Over TLS, the handshake and the records go through the coalesced
// writes: a request and its reply.
func TestCoalescedWritesOverTLS(t *testing.T) {
	certFile, keyFile := testcert.Write(t, t.TempDir(), 1)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats server not ready")
	}
	defer srv.Shutdown()
	secure := nats.Secure(&tls.Config{RootCAs: testcert.Pool(t, certFile), MinVersion: tls.VersionTLS12})

	responder, err := nats.Connect(srv.ClientURL(), secure)
	if err != nil {
		t.Fatal(err)
	}
	defer responder.Close()
	if _, err := responder.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}
	c, err := Connect(srv.ClientURL(), "tok", secure)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.Conn().Opts.CustomDialer.(*coalesceDialer); !ok || !c.Conn().TLSRequired() {
		t.Fatalf("dialer %T, TLS %v", c.Conn().Opts.CustomDialer, c.Conn().TLSRequired())
	}
	payload := bytes.Repeat([]byte("z"), 100_000)
	reply, err := c.Conn().Request("echo", payload, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(reply.Data, payload) {
		t.Fatalf("reply of %d bytes, want the %d sent", len(reply.Data), len(payload))
	}
}
