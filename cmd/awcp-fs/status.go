package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/internal/peercred"
)

// The executor's operator reaches the running daemon over a unix socket in
// its state dir, mode 0600 in a 0700 directory: no agent (another uid, in
// a root of its own) and no other user reaches it, and nothing on it
// crosses the network.
const operatorSocket = "operator.sock"

// serveOperator serves ex's operator API on the state dir's socket until
// ctx ends; it returns once it has stopped.
func serveOperator(ctx context.Context, state string, ex *executor.Executor, log *slog.Logger) (stop func(), err error) {
	path := filepath.Join(state, operatorSocket)
	os.Remove(path) // a dead daemon's: the store's lock says none runs
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("the operator's socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	ln = peercred.SameUser(ln) // the kernel's word too, not the file's mode alone
	srv := &http.Server{Handler: ex.OperatorHandler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("operator socket", "err", err)
		}
	}()
	return func() {
		srv.Close()
		<-done
		os.Remove(path)
	}, nil
}

// statusCommand is `awcp-fs status`: the running executor's delegations.
func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "list the running executor's delegations: who made them, from where, their state and agent",
		Flags: append(clikit.CommonFlags(), &cli.BoolFlag{Name: "json", Usage: "print the report as JSON"}),
		Action: func(c *cli.Context) error {
			state, err := clikit.StateDirPath(c)
			if err != nil {
				return err
			}
			path := filepath.Join(state, operatorSocket)
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "unix", path)
				}}}
			resp, err := client.Get("http://executor/v1/status")
			if err != nil {
				return fmt.Errorf("no executor runs with state dir %s (its socket: %v)", state, err)
			}
			defer resp.Body.Close()
			var rep control.StatusReport
			if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
				return fmt.Errorf("the executor's status: %w", err)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			fmt.Fprintf(c.App.Writer, "%s (%s): %d of %d active; transports %v\n", clikit.Printable(rep.Name), rep.Version, rep.Active, rep.MaxConcurrent, rep.Transports)
			if len(rep.Delegations) == 0 {
				fmt.Fprintln(c.App.Writer, "no delegations")
				return nil
			}
			tw := tabwriter.NewWriter(c.App.Writer, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tTRANSPORT\tACCESS\tDELEGATOR\tFROM\tAGENT PID\tEXPIRES\tPROMPT")
			for _, d := range rep.Delegations {
				delegator := d.Delegator
				if delegator == "" {
					delegator = "(plain HTTP)"
				}
				pid := "-"
				if d.AgentPID > 0 {
					pid = fmt.Sprint(d.AgentPID)
				}
				prompt := clikit.Printable(d.Prompt)
				if len(prompt) > 40 {
					prompt = prompt[:37] + "..."
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.DelegationID, d.State, d.Transport, d.AccessMode, delegator, d.Peer, pid, d.ExpiresAt, prompt)
			}
			return tw.Flush()
		},
	}
}
