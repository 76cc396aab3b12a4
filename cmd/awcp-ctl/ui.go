package main

import (
	"context"
	"fmt"
	"os/exec"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control/delegator/webui"
)

// uiCommand is `awcp-ctl ui`: the page (control/delegator/webui) on
// loopback, reading the store the other commands read and acting through
// the same delegator.
func uiCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:  "ui",
		Usage: "a page in your browser: delegations live, one delegation's output and audit, review and apply, attempts side by side, permissions, peers",
		Description: "Serves on loopback and prints a URL holding a token of this run: open it (or pass --open).\n" +
			"The first visit trades the token for a cookie; a request without it is refused, and one\n" +
			"that changes anything must come from the page itself. Ctrl-C stops it.",
		Flags: append(append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0", Usage: "loopback address to serve on (a free port by default)", EnvVars: []string{"AWCP_UI_LISTEN"}},
			&cli.BoolFlag{Name: "open", Usage: "open the page in the desktop's browser (xdg-open)"},
		), browseFlags()...),
		Action: func(c *cli.Context) error {
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			dlg, err := e.delegator(nil)
			if err != nil {
				return err
			}
			b := e.browser(c)
			srv, err := webui.Start(ctx, c.String("listen"), webui.Options{Store: e.store, Delegator: dlg, Peers: b, Answerer: "awcp-ctl ui by " + userName(), Logger: e.log})
			if err != nil {
				return fail(c, err)
			}
			// The peers page shows what a running browse finds.
			browseCtx, stopBrowsing := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := b.Run(browseCtx); err != nil {
					e.log.Debug("browse", "err", err)
				}
			}()
			defer func() { stopBrowsing(); wg.Wait() }()
			fmt.Fprintln(c.App.Writer, srv.URL())
			fmt.Fprintln(c.App.ErrWriter, "awcp: the page is served on loopback until Ctrl-C; the URL above holds its token: keep it to yourself")
			if c.Bool("open") {
				if err := exec.Command("xdg-open", srv.URL()).Start(); err != nil {
					fmt.Fprintf(c.App.ErrWriter, "awcp: --open: %v; open the URL above yourself\n", err)
				}
			}
			return srv.Wait()
		},
	}
}
