package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/lease"
)

// logsCommand prints the agent's progress lines of a delegation, and with
// --follow keeps printing them as they come until it ends (kubectl logs
// -f): the way to watch a delegation `export --background` handed to the
// daemon, or one another terminal runs. The lines are the record's (the
// last lease.MaxProgress), so any process may follow.
func logsCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print the agent's progress lines of a delegation; -f follows them until it ends (exit as output)",
		ArgsUsage: "ID",
		Flags: append(clikit.CommonFlags(),
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new lines until the delegation ends"},
			&cli.BoolFlag{Name: "timestamps", Usage: "prefix each line with the time the executor sent it"},
			&cli.IntFlag{Name: "tail", Aliases: []string{"n"}, Value: -1, Usage: "print only the last N lines kept (then follow with -f); -1: all"},
		),
		Action: func(c *cli.Context) error {
			e, d, err := openDelegation(c)
			if err != nil {
				return err
			}
			p := &logPrinter{w: c.App.Writer, timestamps: c.Bool("timestamps")}
			if d.ProgressDropped > 0 {
				fmt.Fprintf(c.App.ErrWriter, "awcp: %d earlier lines are no longer kept (a delegation keeps its last %d)\n", d.ProgressDropped, lease.MaxProgress)
			}
			if n := c.Int("tail"); n >= 0 && n < len(d.Progress) {
				if n > 0 {
					p.last = &d.Progress[len(d.Progress)-n-1] // the lines after it are printed
				} else if len(d.Progress) > 0 {
					p.last = &d.Progress[len(d.Progress)-1]
				}
			}
			p.print(d)
			if !c.Bool("follow") {
				return nil
			}
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			state := d.State
			for !d.State.Terminal() {
				select {
				case <-ctx.Done():
					return nil // the delegation goes on; only the watching stops
				case <-tick.C:
				}
				if d, err = e.store.Delegation(d.ID); err != nil {
					return err
				}
				p.print(d)
				if d.State != state {
					state = d.State
					fmt.Fprintf(c.App.ErrWriter, "awcp: delegation %s %s\n", d.ID, d.State)
				}
			}
			if f := d.Failed(); f != nil {
				fmt.Fprintf(c.App.ErrWriter, "error %s: %s\n", clikit.Printable(f.Code), clikit.PrintableText(f.Message))
			}
			return exitFor(d)
		},
	}
}

// logPrinter prints each progress line once, however often the record
// is read.
type logPrinter struct {
	w          io.Writer
	timestamps bool
	last       *lease.ProgressLine // the last line printed
	// holdEnd, if set, is a turn's line prefix ("turn 2: "): the line
	// that says how the turn ended is held (held), to be printed after
	// the turn's reply and anything recorded after it — the end last.
	holdEnd string
	held    *lease.ProgressLine
}

func (p *logPrinter) print(d *lease.Delegation) {
	for _, l := range lease.ProgressAfter(d.Progress, p.last) {
		p.last = &l
		if p.holdEnd != "" && strings.HasPrefix(l.Text, p.holdEnd) && l.Text != p.holdEnd+"sent" {
			p.held = &l
			continue
		}
		p.line(l)
	}
}

func (p *logPrinter) line(l lease.ProgressLine) {
	if p.timestamps {
		fmt.Fprintf(p.w, "%s ", l.At.Local().Format(time.RFC3339))
	}
	fmt.Fprintln(p.w, clikit.PrintableText(strings.TrimRight(l.Text, "\r\n")))
}

// flushHeld prints the held line of the turn's end, if any.
func (p *logPrinter) flushHeld() {
	if p.held != nil {
		p.line(*p.held)
		p.held = nil
	}
}
