package httpserve

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
)

// TLSOrPlain serves TLS (cfg) and, where plain is set, plain HTTP on one
// listener: a connection whose first byte opens a TLS handshake is TLS,
// any other is plain — or, without plain, answered refusal (a whole HTTP
// response) and closed. The first byte is read by the connection's own
// first Read, in its server goroutine, under its header deadline: Accept
// never waits on a client.
func TLSOrPlain(ln net.Listener, cfg *tls.Config, plain bool, refusal []byte) net.Listener {
	return &sniffListener{Listener: ln, cfg: cfg, plain: plain, refusal: refusal}
}

type sniffListener struct {
	net.Listener
	cfg     *tls.Config
	plain   bool
	refusal []byte
}

func (l *sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, l: l}, nil
}

// errPlainRefused ends a plain connection on a listener that serves TLS
// only.
var errPlainRefused = errors.New("plain HTTP refused: this listener speaks TLS")

// sniffConn is a connection before and after its first byte is known.
type sniffConn struct {
	net.Conn
	l    *sniffListener
	once sync.Once
	br   *bufio.Reader // plain: what was read to peek
	err  error
	// tls is set by sniff; Close, from another goroutine (the server
	// shutting down), reads it under mu.
	mu  sync.Mutex
	tls *tls.Conn
}

// tlsRecordHandshake is the first byte of every TLS connection.
const tlsRecordHandshake = 0x16

func (c *sniffConn) sniff() {
	br := bufio.NewReaderSize(c.Conn, 1024)
	first, err := br.Peek(1)
	switch {
	case err != nil:
		c.err = err
	case first[0] == tlsRecordHandshake:
		c.mu.Lock()
		c.tls = tls.Server(&peeked{Conn: c.Conn, r: br}, c.l.cfg)
		c.mu.Unlock()
	case c.l.plain:
		c.br = br
	default:
		c.Conn.Write(c.l.refusal)
		c.err = errPlainRefused
	}
}

func (c *sniffConn) Read(p []byte) (int, error) {
	c.once.Do(c.sniff)
	switch {
	case c.err != nil:
		return 0, c.err
	case c.tls != nil:
		return c.tls.Read(p)
	}
	return c.br.Read(p)
}

func (c *sniffConn) Write(p []byte) (int, error) {
	c.once.Do(c.sniff)
	switch {
	case c.err != nil:
		return 0, c.err
	case c.tls != nil:
		return c.tls.Write(p)
	}
	return c.Conn.Write(p)
}

func (c *sniffConn) Close() error {
	c.mu.Lock()
	t := c.tls
	c.mu.Unlock()
	if t != nil {
		return t.Close()
	}
	return c.Conn.Close()
}

// ConnectionState is the connection's TLS state, and whether it is TLS.
func (c *sniffConn) ConnectionState() (tls.ConnectionState, bool) {
	c.mu.Lock()
	t := c.tls
	c.mu.Unlock()
	if t == nil {
		return tls.ConnectionState{}, false
	}
	return t.ConnectionState(), true
}

// peeked is a connection whose first bytes were read into r already.
type peeked struct {
	net.Conn
	r *bufio.Reader
}

func (p *peeked) Read(b []byte) (int, error) { return p.r.Read(b) }

// connKey is the context key of a request's connection (WithConn).
type connKey struct{}

// WithConn is an http.Server's ConnContext that keeps each request's
// connection, for PeerTLS.
func WithConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// PeerTLS is the TLS state of r's connection, if it came over TLS through
// TLSOrPlain (and the server's ConnContext is WithConn).
func PeerTLS(r *http.Request) (tls.ConnectionState, bool) {
	c, _ := r.Context().Value(connKey{}).(interface {
		ConnectionState() (tls.ConnectionState, bool)
	})
	if c == nil {
		return tls.ConnectionState{}, false
	}
	return c.ConnectionState()
}
