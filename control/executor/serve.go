package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/httpserve"
)

// plainRefusal is the whole answer to a plain HTTP request where only TLS
// is served: an AWCP ERROR that says how to connect.
var plainRefusal = func() []byte {
	body, _ := json.Marshal(control.NewError("", control.CodeAuthFailed,
		"this executor speaks TLS only (its identity key is its certificate): plain HTTP would carry the token and the workspace in clear",
		"connect with https:// and the executor's key (awcp-ctl export --peer https://HOST:PORT --peer-key KEY, or `awcp-ctl peers trust`); "+
			"for a delegator that speaks only plain HTTP (the reference implementation), start the executor with --plain-http"))
	return fmt.Appendf(nil, "HTTP/1.1 426 Upgrade Required\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}()

// Serve is the daemon's life: it runs e and answers HTTP on ln (at most
// httpserve.MaxConns connections at once) until ctx ends. Then requests
// have 2 s to finish before their connections are closed (event streams
// never end by themselves), and Serve returns once e has stopped.
func (e *Executor) Serve(ctx context.Context, ln net.Listener) error {
	srv := httpserve.NewServer(e.Handler())
	srv.ConnContext = httpserve.WithConn
	ln = httpserve.LimitListener(ln, httpserve.MaxConns)
	if e.opts.IdentityKey != nil {
		cert, err := control.IdentityCertificate(e.opts.IdentityKey)
		if err != nil {
			return fmt.Errorf("the identity certificate: %w", err)
		}
		ln = httpserve.TLSOrPlain(ln, control.ServerTLSConfig(cert), e.opts.PlainHTTP, plainRefusal)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(runCtx) }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		cancel()
		err = <-errc
	}
	stopRun()
	wg.Wait()
	// Hijacked connections are not the HTTP server's to close: the
	// reverse mounts' parked ones go here.
	for _, t := range e.opts.Transports {
		if h, ok := t.(interface{ CloseTunnels() }); ok {
			h.CloseTunnels()
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
