package control

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// What an HTTP client may make the daemons hold, and for how long. Anyone
// who can reach the executor's port is a client: nothing is read past a
// small bound before it is authenticated, and a client that sends slowly
// is cut off.
const (
	// maxMessageBytes bounds a message held in memory: an INVITE, an
	// ERROR, or a START apart from its workspace (which goes to disk as it
	// is read, up to ExecutorOptions.MaxBodyBytes, and only with a valid
	// bearer token where tokens are set).
	maxMessageBytes = 1 << 20
	// MaxConns is how many connections an HTTP server of ours holds at
	// once; further clients wait in the listen backlog.
	MaxConns = 256
)

// bodyGrace is the time a body has for its first MiB, and each MiB after
// it buys as much again: a 100 MB START at 4 MB/s passes, a client
// trickling a small body is cut within 30 s of its headers. (A variable
// for the tests.)
var bodyGrace = 30 * time.Second

// NewHTTPServer is an http.Server for h with the timeouts every listener
// of ours needs: headers within 10 s, idle keep-alive connections closed
// after 60 s, headers of at most 64 KiB. Bodies are bounded by their
// handlers (limitBody).
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// limitBody reads r's body at most max bytes and under bodyGrace per MiB,
// counted from now (the handler's start, right after the headers). Once
// the handler has read what it needs it calls finished.
func limitBody(w http.ResponseWriter, r *http.Request, max int64) *pacedBody {
	rc := http.NewResponseController(w)
	b := &pacedBody{r: http.MaxBytesReader(w, r.Body, max), rc: rc, start: time.Now()}
	b.extend()
	return b
}

// pacedBody moves the connection's read deadline on as a body arrives.
type pacedBody struct {
	r     io.Reader
	rc    *http.ResponseController
	start time.Time
	n     int64 // bytes read
	mib   int64 // whole MiB read when the deadline was last set
}

func (b *pacedBody) extend() {
	b.rc.SetReadDeadline(b.start.Add(time.Duration(b.mib+1) * bodyGrace))
}

// finished ends the reading, which ended with err. Read whole, the body's
// read deadline is lifted: left on the connection, it would cancel the
// request's context once past. Refused, the connection is closed after the
// answer: net/http would otherwise read the rest of the body, with no
// deadline, before it answers.
func (b *pacedBody) finished(w http.ResponseWriter, err error) {
	if err != nil {
		w.Header().Set("Connection", "close")
		return
	}
	b.rc.SetReadDeadline(time.Time{})
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if mib := b.n >> 20; mib != b.mib {
		b.mib = mib
		b.extend()
	}
	return n, err
}

// LimitListener accepts at most n connections at once from ln: Accept
// waits while n are open.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{} // Close was called: a waiting Accept returns
	closeOnce sync.Once
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

// slotConn gives its slot back once, when closed.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
