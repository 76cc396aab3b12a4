package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control/skills"
)

// skillsDirFlag is where skills are written: the Agent Skills directory of
// the user's agent.
func skillsDirFlag(name string) *cli.StringFlag {
	return &cli.StringFlag{Name: name, EnvVars: []string{"AWCP_SKILLS_DIR"},
		Usage: "the Agent Skills `DIR` of your agent (default ~/.claude/skills; Gemini CLI and Codex read ~/.gemini/skills, ~/.codex/skills)"}
}

func skillsDir(c *cli.Context, flag string) (string, error) {
	if d := c.String(flag); d != "" {
		return filepath.Abs(d)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("--%s: no home directory to default to: %w", flag, err)
	}
	return filepath.Join(home, ".claude", "skills"), nil
}

func skillsCommand(ctx context.Context) *cli.Command {
	return &cli.Command{
		Name:  "skills",
		Usage: "write an Agent Skill for each trusted executor, so your agent can route tasks to it",
		Subcommands: []*cli.Command{{
			Name:  "sync",
			Usage: "browse, then make DIR hold one skill per trusted executor: new ones written, changed ones rewritten, those no longer trusted removed",
			Description: "Each skill is a folder awcp-NAME-ID holding a SKILL.md: when to use the executor, how\n" +
				"(awcp-ctl export --peer ID), and what its manifest offers. An executor offline is marked so,\n" +
				"not removed. Folders awcp did not make are never touched. `awcp-ctl peers --watch --skills DIR`\n" +
				"keeps them in sync as executors come and go.",
			Flags: append(append(clikit.CommonFlags(), skillsDirFlag("dir")), browseFlags()...),
			Action: func(c *cli.Context) error {
				dir, err := skillsDir(c, "dir")
				if err != nil {
					return err
				}
				e, err := openEnv(c)
				if err != nil {
					return err
				}
				b := e.browser(c)
				err = b.Round(ctx)
				if serr := b.Save(); serr != nil {
					e.log.Warn("peer book", "err", serr)
				}
				if err != nil {
					return fmt.Errorf("browse: %w", err)
				}
				rep, err := skills.Sync(dir, b.Peers())
				printSkills(c.App.Writer, dir, rep, true)
				return err
			},
		}},
	}
}

// printSkills says what a sync did; all says also what it left as it was.
func printSkills(w io.Writer, dir string, rep skills.Report, all bool) {
	for _, n := range rep.Written {
		fmt.Fprintf(w, "wrote    %s\n", filepath.Join(dir, n, skills.File))
	}
	for _, n := range rep.Removed {
		fmt.Fprintf(w, "removed  %s (its executor is no longer trusted)\n", filepath.Join(dir, n, skills.File))
	}
	for _, n := range rep.Kept {
		fmt.Fprintf(w, "skipped  %s: a folder of that name that awcp did not make\n", filepath.Join(dir, n))
	}
	if all {
		for _, n := range rep.Unchanged {
			fmt.Fprintf(w, "current  %s\n", filepath.Join(dir, n, skills.File))
		}
		if len(rep.Written)+len(rep.Removed)+len(rep.Unchanged)+len(rep.Kept) == 0 {
			fmt.Fprintln(w, "no trusted executor: no skill to write (awcp-ctl peers trust ID)")
		}
	}
}
