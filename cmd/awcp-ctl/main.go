// Command awcp-ctl is the delegator side of AWCP: it lends a directory to a
// remote executor (`export`), follows and ends delegations (`status`,
// `output`, `cancel`) and runs the delegator daemon (`serve`); `mcp` offers
// the same to MCP clients as tools.
package main

import (
	"context"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
)

func main() { clikit.Run(newApp, clikit.DelegatorProcs) }

func newApp(ctx context.Context, stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "awcp-ctl",
		Usage:     "AWCP delegator: lend a directory to a remote agent for the length of a lease",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     clikit.CommonFlags(),
		// Commands and flags for the shells' completion (`completion`).
		EnableBashCompletion: true,
		Commands: []*cli.Command{
			exportCommand(ctx),
			lendCommand(ctx),
			statusCommand(),
			outputCommand(ctx),
			logsCommand(ctx),
			cancelCommand(),
			pruneCommand(),
			diffCommand(),
			applyCommand(ctx),
			compareCommand(ctx),
			discardCommand(),
			permitCommand(),
			answerCommand(ctx),
			closeCommand(ctx),
			auditCommand(ctx),
			serveCommand(ctx),
			stopCommand(),
			mcpCommand(ctx),
			acpCommand(ctx),
			peersCommand(ctx),
			skillsCommand(ctx),
			uiCommand(ctx),
			doctorCommand(ctx),
			clikit.CompletionCommand(),
		},
	}
}
