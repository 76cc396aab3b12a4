// Package httpserve holds what every HTTP listener of awcp needs against
// clients that have not authenticated yet: header and idle timeouts, a
// bound on open connections, and request bodies bounded in size and paced
// in time.
package httpserve

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// What an HTTP client may make the daemons hold, and for how long. Anyone
// who can reach the executor's port is a client: nothing is read past a
// small bound before it is authenticated, and a client that sends slowly
// is cut off.
const (
	// MaxConns is how many connections an HTTP server of ours holds at
	// once; further clients wait in the listen backlog.
	MaxConns = 256
)

// DefaultBodyGrace is the time a body has for its first MiB, and each MiB
// after it buys as much again: a 100 MB START at 4 MB/s passes, a client
// trickling a small body is cut within 30 s of its headers.
const DefaultBodyGrace = 30 * time.Second

// NewServer is an http.Server for h with the timeouts every listener
// of ours needs: headers within 10 s, idle keep-alive connections closed
// after 60 s, headers of at most 64 KiB. Bodies are bounded by their
// handlers (LimitBody); one a handler leaves unread ends the connection at
// once (closeUnread).
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           closeUnread(h),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// LimitBody reads r's body at most max bytes and under grace per MiB,
// counted from now (the handler's start, right after the headers). Once
// the handler has read what it needs it calls Finished.
func LimitBody(w http.ResponseWriter, r *http.Request, max int64, grace time.Duration) *PacedBody {
	rc := http.NewResponseController(w)
	b := &PacedBody{r: http.MaxBytesReader(w, r.Body, max), rc: rc, start: time.Now(), grace: grace}
	b.extend()
	return b
}

// PacedBody moves the connection's read deadline on as a body arrives.
type PacedBody struct {
	r     io.Reader
	rc    *http.ResponseController
	start time.Time
	grace time.Duration // for each MiB
	n     int64         // bytes read
	mib   int64         // whole MiB read when the deadline was last set
}

func (b *PacedBody) extend() {
	b.rc.SetReadDeadline(b.start.Add(time.Duration(b.mib+1) * b.grace))
}

// Finished ends the reading, which ended with err. Read whole, the body's
// read deadline is lifted: left on the connection, it would cancel the
// request's context once past. Refused, the connection is closed after the
// answer: net/http would otherwise read the rest of the body, with no
// deadline, before it answers.
func (b *PacedBody) Finished(w http.ResponseWriter, err error) {
	if err != nil {
		w.Header().Set("Connection", "close")
		return
	}
	b.rc.SetReadDeadline(time.Time{})
}

func (b *PacedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if mib := b.n >> 20; mib != b.mib {
		b.mib = mib
		b.extend()
	}
	return n, err
}

// closeUnread makes every answer given before the request's body was read
// to its end the connection's last, and stops reading the body once the
// handler returns. Without it, net/http reads up to 256 KiB of an unread
// body, with no deadline, before it writes the answer and again when it
// closes the request: a client refused for a wrong token that trickles a
// byte every few seconds would hold its connection, and one of MaxConns,
// for as long as it liked.
func closeUnread(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		body := &eofBody{ReadCloser: r.Body}
		r.Body = body
		h.ServeHTTP(&closeIfUnread{ResponseWriter: w, body: body}, r)
		if !body.eof.Load() {
			// The rest is not wanted: the read that closes the body fails
			// at once, and the connection with it.
			http.NewResponseController(w).SetReadDeadline(time.Now())
		}
	})
}

// eofBody records whether its reader saw the body's end.
type eofBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// closeIfUnread asks for the connection to be closed after an answer
// written while the body is still unread.
type closeIfUnread struct {
	http.ResponseWriter
	body        *eofBody
	wroteHeader bool
}

func (w *closeIfUnread) WriteHeader(status int) {
	if !w.wroteHeader {
		w.wroteHeader = true
		if !w.body.eof.Load() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *closeIfUnread) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush is the writer beneath's: a handler that streams by asserting
// http.Flusher (the A2A SDK's SSE) finds it here.
func (w *closeIfUnread) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer beneath (deadlines,
// flushes, the hijack of the reverse mount's upgrade).
func (w *closeIfUnread) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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

// WriteJSON answers with v as JSON and the given status. HTML characters
// are not escaped: the peers read JSON, not HTML.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}
