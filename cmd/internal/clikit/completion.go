package clikit

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// The completion scripts ask the program itself (urfave/cli's
// --generate-bash-completion) for the commands and flags that fit, so they
// never fall behind it. zsh runs the bash one through bashcompinit.
const bashCompletion = `_%[1]s_complete() {
	local cur="${COMP_WORDS[COMP_CWORD]}"
	local IFS=$'\n'
	local args=("${COMP_WORDS[@]:1:COMP_CWORD-1}")
	case "$cur" in -*) args+=("$cur") ;; esac
	COMPREPLY=($(compgen -W "$(%[2]s "${args[@]}" --generate-bash-completion 2>/dev/null)" -- "$cur"))
}
complete -o bashdefault -o default -F _%[1]s_complete %[2]s
`

const zshPrologue = "autoload -U +X bashcompinit && bashcompinit\n"

// CompletionCommand prints the completion script of app for a shell.
func CompletionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script: bash, zsh or fish",
		ArgsUsage: "SHELL",
		Description: "  bash: source <(PROG completion bash)     (or save it in /etc/bash_completion.d/PROG)\n" +
			"  zsh:  source <(PROG completion zsh)\n" +
			"  fish: PROG completion fish > ~/.config/fish/completions/PROG.fish",
		Action: func(c *cli.Context) error {
			name := c.App.Name
			fn := strings.ReplaceAll(name, "-", "_")
			switch shell := c.Args().First(); shell {
			case "bash":
				fmt.Fprintf(c.App.Writer, bashCompletion, fn, name)
			case "zsh":
				fmt.Fprint(c.App.Writer, zshPrologue)
				fmt.Fprintf(c.App.Writer, bashCompletion, fn, name)
			case "fish":
				script, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				fmt.Fprint(c.App.Writer, script)
			default:
				return UsageError("completion takes bash, zsh or fish, not %q", shell)
			}
			return nil
		},
	}
}
