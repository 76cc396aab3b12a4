package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
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
			Flags: append(append(clikit.CommonFlags(), skillsDirFlag("dir"),
				&cli.StringSliceFlag{Name: "a2a", Usage: "an A2A agent's `URL` to write a skill for too (awcp-ctl export --peer a2a:URL), remembered for later syncs; repeatable"},
				&cli.StringSliceFlag{Name: "drop-a2a", Usage: "forget an A2A agent named before (`URL`): its skill is removed"},
			), browseFlags()...),
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
				agents, err := e.namedA2A(c.StringSlice("a2a"), c.StringSlice("drop-a2a"))
				if err != nil {
					return err
				}
				rep, err := skills.Sync(dir, b.Peers(), readCards(ctx, agents)...)
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

// namedA2A are the A2A agents the user named for skills, kept in the state
// dir (a2a-agents, a URL a line): add are named now, drop forgotten.
func (e *env) namedA2A(add, drop []string) ([]string, error) {
	file := filepath.Join(e.state, "a2a-agents")
	var urls []string
	if b, err := os.ReadFile(file); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				urls = append(urls, line)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, u := range add {
		u = strings.TrimSuffix(strings.TrimPrefix(u, delegator.PeerPrefixA2A), "/")
		p, err := url.Parse(u)
		if err != nil || p.Host == "" || (p.Scheme != "https" && p.Scheme != "http") {
			return nil, clikit.UsageError("--a2a %s: give the agent's base URL, https://host:port", u)
		}
		if !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	for _, u := range drop {
		u = strings.TrimSuffix(strings.TrimPrefix(u, delegator.PeerPrefixA2A), "/")
		urls = slices.DeleteFunc(urls, func(x string) bool { return x == u })
	}
	if len(add)+len(drop) > 0 {
		if err := os.WriteFile(file, []byte(strings.Join(urls, "\n")+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	return urls, nil
}

// readCards reads the agent card of each A2A agent (a public document: a
// plain http:// one is read too), at most 256 KiB and 3 s each.
func readCards(ctx context.Context, urls []string) []skills.A2AAgent {
	client := &http.Client{Timeout: 3 * time.Second, CheckRedirect: control.SameServerRedirects}
	out := make([]skills.A2AAgent, 0, len(urls))
	for _, u := range urls {
		a := skills.A2AAgent{URL: u}
		card, err := readCard(ctx, client, u)
		if err != nil {
			a.Err = err.Error()
		} else {
			a.Card = card
		}
		out = append(out, a)
	}
	return out
}

func readCard(ctx context.Context, client *http.Client, base string) (*control.AgentCard, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/.well-known/agent-card.json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("its card: %s", resp.Status)
	}
	var card control.AgentCard
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<10)).Decode(&card); err != nil {
		return nil, fmt.Errorf("its card: %w", err)
	}
	return &card, nil
}
