package client

import (
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Coalesced writes.
//
// nats.go writes a connection's buffered protocol from one flusher
// goroutine, woken by every publish. Go's scheduler runs a goroutine
// woken by a channel send next on the waker's processor, so when several
// producers are woken together (the replies of one node step arrive in
// one read), each one's publish wakes the flusher, which runs as soon as
// that producer waits for its reply and writes that one request: measured
// with 32 producers of single-job enqueues, 0.83 write system calls a
// request. Each such write also wakes the NATS server's reader for one
// request, and the whole way to the node and back runs a request at a
// time. The flusher also holds the connection's lock during the system
// call, which every publish and every reply's dispatch then waits on.
//
// coalesceConn sits under nats.go (installed as its dialer): a write is
// copied to a buffer and a goroutine of its own writes the buffer out.
// That goroutine yields once before it takes the buffer, so goroutines
// woken together get to add their requests first: then 0.13 write
// calls a request (7.7 requests a write), and single-job enqueues and
// the bare protocol faster on every store (docs/performance.md, "The Go
// SDK: a connection's writes coalesced"). When nothing else is runnable,
// the yield returns at once.
//
// What a write guarantees is unchanged: a write returning nil never
// meant the server had the bytes (nats.go buffers them itself), and
// nats.go's Flush still round-trips a PING behind everything written
// before. Bytes go out in the order they were written. A write's deadline
// (nats.go sets one, FlusherTimeout, for each) bounds the system call
// that carries its bytes. A failed system call fails every later write
// and closes the connection, since the protocol stream is then cut at an
// unknown point; nats.go reconnects as after any write error.

// maxCoalesced bounds the bytes waiting to be written: a write that would
// take the buffer past it waits until the buffer is taken, as a write
// waits on a full socket. A write into an empty buffer always goes in.
const maxCoalesced = 1 << 20

// closeDrain bounds how long Close waits for written bytes to go out
// before it closes the socket.
const closeDrain = 2 * time.Second

// CoalesceWrites is a nats.go option that coalesces the connection's
// writes (the package's ConnectOptions include it). It dials as nats.go
// would, with the options' Dialer, or a net.Dialer with their Timeout.
// A SetCustomDialer given after it replaces it (nats.SetCustomDialer(nil)
// turns it off).
func CoalesceWrites() nats.Option {
	return func(o *nats.Options) error {
		o.CustomDialer = &coalesceDialer{o: o}
		return nil
	}
}

// coalesceDialer dials with the settings of the options it was set on.
// nats.Connect applies every option before it dials, so they are final
// by then.
type coalesceDialer struct{ o *nats.Options }

func (d *coalesceDialer) Dial(network, address string) (net.Conn, error) {
	nd := net.Dialer{Timeout: d.o.Timeout}
	if d.o.Dialer != nil {
		nd = *d.o.Dialer
	}
	c, err := nd.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return newCoalesceConn(c), nil
}

// coalesceConn is a net.Conn whose writes go out from one goroutine,
// several at a time. Reads are the socket's.
type coalesceConn struct {
	net.Conn

	mu    sync.Mutex
	taken *sync.Cond // the writer took the buffer (or failed, or closed)
	buf   []byte     // written, not yet taken by the writer
	spare []byte     // the writer's last buffer, for reuse
	// dl is the earliest deadline of a write in buf (zero: none); wdl the
	// deadline SetWriteDeadline set, which the next write takes.
	dl, wdl time.Time
	err     error // the first failure; every later write returns it
	closing bool
	// waiting is called as a write starts to wait for room (tests).
	waiting func()

	kick chan struct{} // cap 1: there is something to write, or closing
	done chan struct{} // the writer returned
}

func newCoalesceConn(c net.Conn) *coalesceConn {
	w := &coalesceConn{Conn: c, kick: make(chan struct{}, 1), done: make(chan struct{})}
	w.taken = sync.NewCond(&w.mu)
	go w.run()
	return w
}

func (w *coalesceConn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && !w.closing && len(w.buf) > 0 && len(w.buf)+len(p) > maxCoalesced {
		if w.waiting != nil {
			w.waiting()
		}
		w.taken.Wait()
	}
	switch {
	case w.err != nil:
		return 0, w.err
	case w.closing:
		return 0, net.ErrClosed
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !w.wdl.IsZero() && (w.dl.IsZero() || w.wdl.Before(w.dl)) {
		w.dl = w.wdl
	}
	w.buf = append(w.buf, p...)
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return len(p), nil
}

// run writes the buffer out whenever it is kicked, until Close or a
// failure.
func (w *coalesceConn) run() {
	defer close(w.done)
	for range w.kick {
		// Let goroutines woken with the kicker write first (see above).
		runtime.Gosched()
		w.mu.Lock()
		out, dl, closing := w.buf, w.dl, w.closing
		w.buf, w.dl = w.spare[:0], time.Time{}
		w.spare = nil
		w.taken.Broadcast()
		w.mu.Unlock()
		if len(out) > 0 {
			err := w.Conn.SetWriteDeadline(dl)
			if err == nil {
				_, err = w.Conn.Write(out)
			}
			if err != nil {
				w.fail(err)
				return
			}
		}
		if closing {
			return
		}
		w.mu.Lock()
		if cap(out) <= maxCoalesced {
			w.spare = out[:0]
		}
		w.mu.Unlock()
	}
}

// fail keeps err for every later write and closes the socket: a reader
// blocked on it returns, and nats.go reconnects.
func (w *coalesceConn) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.taken.Broadcast()
	w.mu.Unlock()
	_ = w.Conn.Close()
}

// SetWriteDeadline sets the deadline of the writes that follow: the
// system call carrying their bytes must end by it.
func (w *coalesceConn) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	w.wdl = t
	w.mu.Unlock()
	return nil
}

func (w *coalesceConn) SetDeadline(t time.Time) error {
	_ = w.SetWriteDeadline(t)
	return w.Conn.SetReadDeadline(t)
}

// Close writes out what was written before it (waiting at most
// closeDrain), then closes the socket.
func (w *coalesceConn) Close() error {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		<-w.done
		return net.ErrClosed
	}
	w.closing = true
	w.taken.Broadcast()
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	t := time.NewTimer(closeDrain)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
	}
	err := w.Conn.Close()
	<-w.done
	return err
}
