package main

import (
	"context"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/webui"
)

// uiCommand is `awcp-ctl ui`: the page (control/delegator/webui) on
// loopback, reading the store the other commands read and acting through
// the same delegator.
func uiCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "ui",
		ArgsUsage: "[ID]",
		Usage:     "a page in your browser: delegations live, one delegation's output and audit, review and apply, attempts side by side, permissions, peers",
		Description: "Serves on loopback and prints a URL holding a token of this run: open it (or pass --open).\n" +
			"The token is in the URL's fragment, which the browser never sends: the page keeps it in its\n" +
			"origin's storage (not a cookie, which every port of 127.0.0.1 would get) and sends it with each\n" +
			"request; one without it is refused, and one that changes anything must also come from the\n" +
			"page itself. --open hands the browser a file of yours (0600, in the state dir) that leads to\n" +
			"the page, never the URL: a command line is readable by every local user. Ctrl-C stops it.",
		Flags: append(append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0", Usage: "loopback address to serve on (a free port by default)", EnvVars: []string{"AWCP_UI_LISTEN"}},
			&cli.BoolFlag{Name: "open", Usage: "open the page in the desktop's browser (xdg-open, given a file of yours that leads there: the token is never on a command line); with ID (a delegation or a group), at its view"},
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
			srv, err := webui.Start(ctx, c.String("listen"), webui.Options{Store: e.store, Delegator: dlg, Peers: b,
				Cancel: func(id string) error { return cancelOne(e, dlg, id) }, Answerer: "awcp-ctl ui by " + userName(), Logger: e.log})
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
				url := srv.URL()
				if arg := c.Args().First(); arg != "" {
					// The view of one delegation or group, with the
					// token, in one URL.
					route := "/g/" + arg
					if !strings.HasPrefix(arg, delegator.GroupPrefix) {
						d, err := e.resolve(arg)
						if err != nil {
							return err
						}
						route = "/d/" + d.ID
					}
					url += "&to=" + route
				}
				file, err := openPage(e.state, url)
				if err != nil {
					fmt.Fprintf(c.App.ErrWriter, "awcp: --open: %v; open the URL above yourself\n", err)
				} else {
					defer os.Remove(file)
				}
			}
			return srv.Wait()
		},
	}
}

// openPage has the desktop's browser open url through a file that only
// this user may read (0600, in the state dir), which leads to it: the
// browser, and xdg-open, keep their arguments in /proc/PID/cmdline for
// every local user to read, and the token must not be there (Jupyter's
// way). It returns the file, removed when the page stops.
func openPage(state, url string) (string, error) {
	file := filepath.Join(state, fmt.Sprintf("ui-%d.html", os.Getpid()))
	u := html.EscapeString(url)
	page := `<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=` + u + `"><title>awcp</title></head>
<body><p>Opening <a href="` + u + `">the awcp page</a>…</p></body></html>
`
	os.Remove(file) // a previous run's, with another token
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(page)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = exec.Command("xdg-open", file).Start()
	}
	if err != nil {
		os.Remove(file)
		return "", err
	}
	return file, nil
}
