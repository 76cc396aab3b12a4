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
			clikit.DurationFlag("older-than", 0, "only those that ended longer ago than this (default: every ended one)", "AWCP_PRUNE_OLDER_THAN"),
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
			gone, err := e.store.PruneDelegations(e.store.Now().Add(-clikit.Duration(c, "older-than")))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				if gone == nil {
					gone = []string{}
				}
				return printJSON(c.App.Writer, map[string][]string{"removed": gone})
			}
			fmt.Fprintf(c.App.Writer, "removed %d ended delegations\n", len(gone))
			return nil
		},
	}
}
