package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/flexiq/flexiq/api"
)

// The admin door's connection bounds (docs/admin-api.md).
const (
	// DefaultReadTimeout bounds the arrival of a request: its headers and
	// its body.
	DefaultReadTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection idle that long.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultWriteStall cuts a response the client has stopped reading.
	DefaultWriteStall = 30 * time.Second
	// DefaultMaxConns bounds the connections served at once.
	DefaultMaxConns = 1024
	// MaxHeaderBytes bounds a request's headers: a bearer token and a few
	// ordinary headers need far less than net/http's 1 MiB default.
	MaxHeaderBytes = 64 << 10

	// healthReserve is how many connections past the cap are still
	// accepted, to answer GET /healthz; overflowLife is how long one of
	// them may live, so a slow client cannot hold the reserve.
	healthReserve = 16
	overflowLife  = 3 * time.Second
)

// Bounds are the admin door's timeouts; zero fields take the defaults.
// Tests shorten them.
type Bounds struct {
	ReadTimeout time.Duration
	IdleTimeout time.Duration
	WriteStall  time.Duration
}

func (b Bounds) withDefaults() Bounds {
	if b.ReadTimeout <= 0 {
		b.ReadTimeout = DefaultReadTimeout
	}
	if b.IdleTimeout <= 0 {
		b.IdleTimeout = DefaultIdleTimeout
	}
	if b.WriteStall <= 0 {
		b.WriteStall = DefaultWriteStall
	}
	return b
}

// NewServer is the admin door's HTTP server around h, bounded as
// docs/admin-api.md says: a request whose headers and body do not arrive
// within ReadTimeout is cut (its connection closed, with no answer), and a
// keep-alive connection idle for IdleTimeout is closed. Serve it on a
// Listener from Listen, which caps the connections.
//
// There is no WriteTimeout: it runs from the end of the request's headers,
// so it would bound the handler's work and cut a long answer (metrics that
// name every namespace) however steadily the client reads it. Instead each
// write must make progress within WriteStall, which cuts only a client
// that stopped reading. (ReadTimeout does not bound the handler: net/http
// lifts the read deadline once the body has been read.)
func NewServer(h http.Handler, log *slog.Logger, b Bounds) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b = b.withDefaults()
	return &http.Server{
		Handler:           &bounded{h: h, b: b, log: log},
		ReadHeaderTimeout: b.ReadTimeout,
		ReadTimeout:       b.ReadTimeout,
		IdleTimeout:       b.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateIdle {
				// The last answer is out: its write bound must not carry
				// over to the next request's.
				_ = c.SetWriteDeadline(time.Time{})
			}
		},
	}
}

// connKey finds a request's connection in its context.
type connKey struct{}

// doorConnOf is the door's own connection under c, which TLS may wrap.
func doorConnOf(c any) (*doorConn, bool) {
	if t, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = t.NetConn()
	}
	dc, ok := c.(*doorConn)
	return dc, ok
}

// bounded applies the per-request bounds and the overflow rule.
type bounded struct {
	h   http.Handler
	b   Bounds
	log *slog.Logger
}

func (d *bounded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c, ok := doorConnOf(r.Context().Value(connKey{})); ok && c.overflow {
		// Past the cap: one answer, then the connection closes and frees
		// its place in the reserve.
		w.Header().Set("Connection", "close")
		if r.Method != http.MethodGet || r.URL.Path != "/healthz" {
			writeError(w, api.Errorf(api.CodeUnavailable, "",
				"the admin door is serving its limit of %d connections; try again", c.l.max))
			return
		}
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &boundedBody{ReadCloser: r.Body, r: r, log: d.log}
	}
	rc := http.NewResponseController(w)
	d.h.ServeHTTP(&stallWriter{ResponseWriter: w, rc: rc, stall: d.b.WriteStall}, r)
	// net/http sends what is still buffered after the handler returns.
	_ = rc.SetWriteDeadline(time.Now().Add(d.b.WriteStall))
}

// boundedBody cuts the request when its body does not arrive by the read
// deadline. Left alone, the handler would answer 400 ("cannot read the
// request body"), blaming a request that was merely late.
type boundedBody struct {
	io.ReadCloser
	r   *http.Request
	log *slog.Logger
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// net/http closes the connection without an answer, as it does
		// for headers that come too late.
		b.log.Info("admin request cut: its body did not arrive in time", "method", b.r.Method, "path", b.r.URL.Path, "remote", b.r.RemoteAddr)
		panic(http.ErrAbortHandler)
	}
	return n, err
}

// stallWriter gives each write WriteStall to make progress.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

func (s *stallWriter) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall))
	return s.ResponseWriter.Write(p)
}

// Flush sends what is buffered, under the same bound.
func (s *stallWriter) Flush() {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall))
	_ = s.rc.Flush()
}

// Unwrap lets http.NewResponseController reach the connection.
func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Listener is a net.Listener that serves at most max connections at once.
//
// Past the cap it keeps accepting rather than leaving connections in the
// kernel's queue, where a health check would wait behind everything else:
// up to healthReserve more are accepted as overflow, each for at most
// overflowLife and one request, on which the door answers GET /healthz and
// refuses anything else with 503 (NewServer). Past the reserve too, a
// connection is closed at once. So /healthz keeps answering while the door
// is full, and a full door refuses quickly instead of hanging.
type Listener struct {
	net.Listener
	max int

	mu               sync.Mutex
	active, overflow int
	onRelease        func(overflow bool) // tests: a connection let go of its place
}

// Listen listens on addr (TCP) for the admin door, serving at most
// maxConns connections at once (DefaultMaxConns when not positive). The
// listener is a *Listener.
func Listen(addr string, maxConns int) (net.Listener, error) {
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Listener{Listener: ln, max: maxConns}, nil
}

// Accept returns the next connection with a place: within the cap, or in
// the health-check reserve.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		switch {
		case l.active < l.max:
			l.active++
			l.mu.Unlock()
			return &doorConn{Conn: c, l: l}, nil
		case l.overflow < healthReserve:
			l.overflow++
			l.mu.Unlock()
			dc := &doorConn{Conn: c, l: l, overflow: true, until: time.Now().Add(overflowLife)}
			_ = c.SetDeadline(dc.until)
			return dc, nil
		}
		l.mu.Unlock()
		c.Close()
	}
}

func (l *Listener) release(overflow bool) {
	l.mu.Lock()
	if overflow {
		l.overflow--
	} else {
		l.active--
	}
	hook := l.onRelease
	l.mu.Unlock()
	if hook != nil {
		hook(overflow)
	}
}

// doorConn holds a place in its Listener until it is closed. An overflow
// connection's deadlines never go past its end of life: net/http sets its
// own (or clears them) before each request.
type doorConn struct {
	net.Conn
	l        *Listener
	overflow bool
	until    time.Time
	once     sync.Once
}

func (c *doorConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.overflow) })
	return err
}

func (c *doorConn) cap(t time.Time) time.Time {
	if c.overflow && (t.IsZero() || t.After(c.until)) {
		return c.until
	}
	return t
}

func (c *doorConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.cap(t)) }
func (c *doorConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.cap(t)) }
func (c *doorConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.cap(t)) }
