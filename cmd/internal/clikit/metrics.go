package clikit

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/internal/metrics"
)

// MetricsListenFlag is the daemons' --metrics-listen.
func MetricsListenFlag() cli.Flag {
	return &cli.StringFlag{Name: "metrics-listen", EnvVars: []string{"AWCP_METRICS_LISTEN"},
		Usage: "serve Prometheus metrics on http://ADDR/metrics (off by default; no token guards it, so keep it on loopback or a private network)"}
}

// ServeMetrics serves reg on addr until stop is called (or ctx ends);
// stop returns once the listener is closed. An address that cannot be
// listened on is an error now, not a log line later.
func ServeMetrics(ctx context.Context, reg *metrics.Registry, addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := reg.Serve(ctx, ln, log); err != nil {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}
