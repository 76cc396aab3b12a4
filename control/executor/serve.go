package executor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/awcp/awcp/internal/httpserve"
)

// Serve is the daemon's life: it runs e and answers HTTP on ln (at most
// httpserve.MaxConns connections at once) until ctx ends. Then requests
// have 2 s to finish before their connections are closed (event streams
// never end by themselves), and Serve returns once e has stopped.
func (e *Executor) Serve(ctx context.Context, ln net.Listener) error {
	srv := httpserve.NewServer(e.Handler())
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(runCtx) }()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(httpserve.LimitListener(ln, httpserve.MaxConns)) }()

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
