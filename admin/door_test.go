package admin

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/internal/testcert"
)

// failsafe bounds every client read of these tests, so a door that never
// cuts fails the test instead of hanging it. It is not what the tests
// measure: each waits for the server to act.
const failsafe = 20 * time.Second

// serve runs NewServer(h) on a Listen listener and returns the listener.
func serve(t *testing.T, h http.Handler, b Bounds, maxConns int) *Listener {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", maxConns)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(h, nil, b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.(*Listener)
}

func dial(t *testing.T, ln *Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(failsafe)); err != nil {
		t.Fatal(err)
	}
	return c
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// wantCut waits for the server to close c without answering.
func wantCut(t *testing.T, c net.Conn) {
	t.Helper()
	got, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server neither answered nor closed the connection within %v", failsafe)
	}
	if len(got) > 0 {
		t.Fatalf("the server answered %q, want the connection closed", got)
	}
}

// get sends GET path on c (kept alive) and returns the response.
func get(t *testing.T, c net.Conn, br *bufio.Reader, path string) (*http.Response, string) {
	t.Helper()
	send(t, c, "GET "+path+" HTTP/1.1\r\nHost: door\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp, string(body)
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if _, err := io.ReadAll(r.Body); err != nil {
		return
	}
	fmt.Fprintf(w, "served %s", r.URL.Path)
})

func TestHeadersThatDoNotArriveInTimeAreCut(t *testing.T) {
	ln := serve(t, okHandler, Bounds{ReadTimeout: 200 * time.Millisecond}, 8)
	c := dial(t, ln)
	send(t, c, "GET /x HTTP/1.1\r\nHost: door\r\n") // the blank line never comes
	wantCut(t, c)
}

func TestBodyThatDoesNotArriveInTimeIsCut(t *testing.T) {
	started := make(chan struct{})
	finished := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		_, err := io.ReadAll(r.Body)
		finished <- err // only if the read returns instead of cutting
	})
	ln := serve(t, h, Bounds{ReadTimeout: 200 * time.Millisecond}, 8)
	c := dial(t, ln)
	send(t, c, "POST /upload HTTP/1.1\r\nHost: door\r\nContent-Length: 100\r\n\r\n{\"a\":")
	<-started // the headers were taken: it is the body that is late
	send(t, c, "1")
	wantCut(t, c)
	select {
	case err := <-finished:
		t.Fatalf("the handler went on after its body timed out (read error %v)", err)
	default:
	}
}

func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	ln := serve(t, okHandler, Bounds{IdleTimeout: 200 * time.Millisecond}, 8)
	c := dial(t, ln)
	br := bufio.NewReader(c)
	if resp, body := get(t, c, br, "/x"); resp.StatusCode != 200 || body != "served /x" {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	// Kept alive, then idle: the server closes it.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %v, want EOF", err)
	}
}

// The read bound covers the request's arrival, not the handler: a request
// that takes longer than ReadTimeout to answer keeps its context and its
// whole (long) answer, which a WriteTimeout would cut.
func TestSlowAnswerIsNotCut(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	ctxErr := make(chan error, 1)
	const big = 4 << 20
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/long" {
			_, _ = io.ReadAll(r.Body)
			return
		}
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("long: body: %v", err)
		}
		close(started)
		<-release
		ctxErr <- r.Context().Err()
		_, _ = w.Write([]byte(strings.Repeat("m", big)))
	})
	ln := serve(t, h, Bounds{ReadTimeout: 200 * time.Millisecond}, 8)
	long := dial(t, ln)
	send(t, long, "POST /long HTTP/1.1\r\nHost: door\r\nContent-Length: 2\r\n\r\n{}")
	<-started
	// A request sent after it is cut for its late body: by then the long
	// request is older than ReadTimeout too.
	slow := dial(t, ln)
	send(t, slow, "POST /slow HTTP/1.1\r\nHost: door\r\nContent-Length: 100\r\n\r\n{")
	wantCut(t, slow)
	close(release)
	if err := <-ctxErr; err != nil {
		t.Fatalf("the long request's context ended: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(long), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || n != big || err != nil {
		t.Fatalf("long answer: %d, %d bytes of %d, %v", resp.StatusCode, n, big, err)
	}
}

// With the cap's worth of connections open, /healthz still answers and
// anything else is refused at once; a connection that closes frees its
// place.
func TestFullDoorStillAnswersHealthz(t *testing.T) {
	h := http.NewServeMux()
	h.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	h.Handle("/", okHandler)
	const max = 3
	ln := serve(t, h, Bounds{}, max)
	released := make(chan bool, 64)
	ln.mu.Lock()
	ln.onRelease = func(overflow bool) { released <- overflow }
	ln.mu.Unlock()

	var idle []net.Conn
	for i := 0; i < max; i++ {
		c := dial(t, ln)
		if resp, _ := get(t, c, bufio.NewReader(c), "/x"); resp.StatusCode != 200 {
			t.Fatalf("connection %d: %d", i, resp.StatusCode)
		}
		idle = append(idle, c) // kept alive: each holds a place
	}

	for i := 0; i < 3; i++ {
		c := dial(t, ln)
		br := bufio.NewReader(c)
		resp, body := get(t, c, br, "/healthz")
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("healthz with the door full: %d %q", resp.StatusCode, body)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("an overflow connection stays open after its answer: %v", err)
		}
	}
	c := dial(t, ln)
	resp, body := get(t, c, bufio.NewReader(c), "/x")
	var e struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal([]byte(body), &e)
	if resp.StatusCode != 503 || e.Error.Code != "UNAVAILABLE" || !strings.Contains(e.Error.Message, fmt.Sprintf("limit of %d connections", max)) {
		t.Fatalf("a request with the door full: %d %s, want 503 naming the limit", resp.StatusCode, body)
	}

	// Past the health-check reserve too, a connection is closed at once.
	for i := 0; i < healthReserve; i++ {
		dial(t, ln) // silent: each holds a reserve place until overflowLife
	}
	wantCut(t, dial(t, ln))

	idle[0].Close()
	for overflow := true; overflow; overflow = <-released {
	}
	c = dial(t, ln)
	if resp, body := get(t, c, bufio.NewReader(c), "/x"); resp.StatusCode != 200 || body != "served /x" {
		t.Fatalf("after a place freed: %d %q", resp.StatusCode, body)
	}
}

// A client that stops reading an answer is cut once a write makes no
// progress for WriteStall.
func TestStalledReaderIsCut(t *testing.T) {
	writeErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("m", 1<<20))
		for {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
	})
	ln := serve(t, h, Bounds{WriteStall: 200 * time.Millisecond}, 8)
	c := dial(t, ln)
	send(t, c, "GET /metrics HTTP/1.1\r\nHost: door\r\n\r\n") // and never read
	select {
	case err := <-writeErr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the stalled answer failed with %v, want its write deadline", err)
		}
	case <-time.After(failsafe):
		t.Fatalf("an answer nobody reads still blocks after %v", failsafe)
	}
}

// Behind TLS (fq-node --tls-cert wraps the door's listener), a request on a
// connection past the cap is still refused, naming the limit: the door
// finds its own connection under the TLS one.
func TestFullDoorOverTLSRefusesPastTheCap(t *testing.T) {
	certFile, keyFile := testcert.Write(t, t.TempDir(), 1)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := Listen("127.0.0.1:0", 1)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(okHandler, nil, Bounds{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(tls.NewListener(inner, &tls.Config{Certificates: []tls.Certificate{pair}}))
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	pool := testcert.Pool(t, certFile)
	dialTLS := func() (*tls.Conn, *bufio.Reader) {
		c, err := tls.Dial("tcp", inner.Addr().String(), &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.SetDeadline(time.Now().Add(failsafe)); err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	held, br := dialTLS()
	if resp, _ := get(t, held, br, "/x"); resp.StatusCode != 200 {
		t.Fatalf("first connection: %d", resp.StatusCode)
	}
	c, br := dialTLS()
	if resp, body := get(t, c, br, "/x"); resp.StatusCode != 503 || !strings.Contains(body, "limit of 1 connections") {
		t.Fatalf("a request past the cap over TLS: %d %s, want 503 naming the limit", resp.StatusCode, body)
	}
}
