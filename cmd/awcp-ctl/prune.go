package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
)

// recordRetention is how long an ended delegation's record is kept before
// any command removes it (the reference keeps a week too).
const recordRetention = 7 * 24 * time.Hour

// pruneCommand removes ended delegations now: a failed attempt need not
// stay in `status` for a week.
func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "remove ended delegations and their audit logs (every command removes those ended over 7 days ago)",
		Flags: append(clikit.CommonFlags(),
			clikit.DurationFlag("older-than", 24*time.Hour, "only those that ended longer ago than this (0: every ended one)", "AWCP_PRUNE_OLDER_THAN"),
			&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "say what would be removed, and remove nothing"},
			&cli.BoolFlag{Name: "json", Usage: "print the removed ids as JSON"},
		),
		Action: func(c *cli.Context) error {
			if c.Args().Len() != 0 {
				return clikit.UsageError("prune takes no arguments")
			}
			e, err := openEnv(c)
			if err != nil {
				return err
			}
			before := e.store.Now().Add(-clikit.Duration(c, "older-than"))
			var gone []string
			if c.Bool("dry-run") {
				gone, err = e.store.PrunableDelegations(before)
			} else {
				gone, err = e.store.PruneDelegations(before)
			}
			if err != nil {
				return err
			}
			if c.Bool("json") {
				if gone == nil {
					gone = []string{}
				}
				key := "removed"
				if c.Bool("dry-run") {
					key = "would_remove"
				}
				return printJSON(c.App.Writer, map[string][]string{key: gone})
			}
			if c.Bool("dry-run") {
				for _, id := range gone {
					fmt.Fprintln(c.App.Writer, id)
				}
				fmt.Fprintf(c.App.Writer, "would remove %d ended delegations (--dry-run: none removed)\n", len(gone))
				return nil
			}
			fmt.Fprintf(c.App.Writer, "removed %d ended delegations\n", len(gone))
			return nil
		},
	}
}
