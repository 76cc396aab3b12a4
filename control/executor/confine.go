package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/sandbox"
	"github.com/awcp/awcp/lease"
)

// deniedLine finds what a refused access looks like in an agent's
// output: the shell's "Permission denied", Node's EACCES, Python's
// PermissionError, a refused exec's status 126 — and, in a root of its
// own where what is not granted is not there at all, what a missing
// path looks like (ENOENT, a module or package not found).
var deniedLine = regexp.MustCompile(`(?i)permission denied|eacces|eperm|operation not permitted|status 126|no such file|enoent|cannot find (module|package)|module not found|not found`)

// deniedPath is an absolute path on such a line: one that starts a word
// (not the "/claude-agent-sdk" of a package name "@anthropic-ai/claude-agent-sdk").
var deniedPath = regexp.MustCompile(`(?:^|[\s'"(\[=])(/[^\s:'"()\[\],]+)`)

// loginLine is a line of an agent's words that says it has no credential:
// Claude Code's "Authentication required" and "Not logged in", Gemini
// CLI's "GEMINI_API_KEY", a 401 from a model API.
var loginLine = regexp.MustCompile(`(?i)auth(entication)? required|not logged in|/login|api[_ ]?key|unauthori[sz]ed|\b401\b|invalid x-api-key|credentials`)

// agentHint is the hint of a failed agent: what it lacks where its words
// say (credentials first, the sandbox's refusals after), "" where they say
// nothing this executor's operator can act on.
func agentHint(confine *sandbox.Policy, failed, stderr string) string {
	if h := LoginHint(failed, stderr); h != "" {
		return h
	}
	return sandboxHint(confine, failed+"\n"+stderr)
}

// LoginHint is the hint of an agent whose words (failed, or the telling
// line of its stderr) say it lacks a login: how its operator gives it
// one. "" where they do not.
func LoginHint(failed, stderr string) string {
	if !loginLine.MatchString(failed) && !loginLine.MatchString(lease.TellingLine(stderr)) {
		return ""
	}
	return "the agent has no credentials here: its operator passes its API key with awcp-fs serve --agent-env NAME " +
		"(ANTHROPIC_API_KEY for Claude Code, GEMINI_API_KEY for Gemini CLI, OPENAI_API_KEY for Codex), " +
		"or grants the login made as the daemon's user with --sandbox-allow ~/.claude:rw (~/.gemini, ~/.codex)"
}

// sandboxHint is the hint of a failed agent whose output says something
// was refused while the sandbox was on: the paths it names, and how to
// grant them. "" otherwise.
func sandboxHint(confine *sandbox.Policy, output string) string {
	if confine == nil {
		return ""
	}
	var paths []string
	denied := false
	for _, line := range strings.Split(output, "\n") {
		if !deniedLine.MatchString(line) {
			continue
		}
		denied = true
		for _, m := range deniedPath.FindAllStringSubmatch(line, -1) {
			p := m[1]
			if !slices.Contains(paths, p) && len(paths) < 5 {
				paths = append(paths, p)
			}
		}
	}
	if !denied {
		return ""
	}
	hint := "the agent's sandbox may have refused it"
	if len(paths) > 0 {
		hint += " " + strings.Join(paths, ", ")
	}
	return hint + ": the executor's operator grants a path with awcp-fs serve --sandbox-allow PATH[:rw]; awcp-fs doctor starts the agent in its sandbox and shows what it says"
}

// SandboxNote starts what the "running" event says of the agent's
// sandbox.
const SandboxNote = "sandbox: "

// confine has task at's agent, and what it starts, run in base's sandbox
// with at's work directory and a temporary directory of its own (TMPDIR,
// its summary file), which the caller removes after the task. Its caches
// are cache's (agentcache.go), or in that temporary directory without
// one. Its HOME is a fresh one in there too, unless the operator granted
// the daemon's (and the agent is the daemon's user): tools that read
// their configuration from HOME (git, which fails on a home it may not
// read) find none, rather than a refusal; a fresh one holds a git
// identity, so that the agent's plain `git commit` works. With user, the
// agent's own uid, the temporary directory and the home are that user's,
// and the cache is lent to it as its own (idmapped: Policy.Yours).
func confine(at *agent.Task, base sandbox.Policy, user *control.LocalUser, cache, executorName string) (*sandbox.Policy, string, error) {
	tmp, err := os.MkdirTemp("", "awcp-agent-")
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*sandbox.Policy, string, error) {
		os.RemoveAll(tmp)
		return nil, "", err
	}
	p := base
	p.RW = append(slices.Clone(base.RW), at.WorkDir, tmp)
	at.SummaryFile = filepath.Join(tmp, "summary")
	at.Env = append(at.Env, "TMPDIR="+tmp)
	if cache == "" {
		// A cache of its own, in its temporary directory: it starts cold
		// and leaves nothing for the next agent.
		cache = filepath.Join(tmp, "cache")
	} else {
		p.RW = append(p.RW, cache)
		p.Yours = append(slices.Clone(p.Yours), cache)
	}
	for _, c := range cacheEnv {
		at.Env = append(at.Env, c.name+"="+filepath.Join(cache, c.sub))
	}
	home, _ := os.UserHomeDir()
	if user != nil || home == "" || !(slices.Contains(p.RO, home) || slices.Contains(p.RW, home)) {
		home = filepath.Join(tmp, "home")
		if err := os.Mkdir(home, 0o700); err != nil {
			return fail(err)
		}
		if executorName == "" {
			executorName = "executor"
		}
		gitconfig := fmt.Sprintf("[user]\n\tname = awcp agent\n\temail = agent@%s.awcp.invalid\n", strings.Map(func(r rune) rune {
			if r == '.' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, executorName))
		if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(gitconfig), 0o600); err != nil {
			return fail(err)
		}
		if err := linkHomeGrants(home, p); err != nil {
			return fail(err)
		}
		at.Env = append(at.Env, "HOME="+home)
	}
	if user != nil {
		p.User = &sandbox.User{UID: user.UID, GID: user.GID, Home: home}
		at.Owner = &agent.Owner{UID: int(user.UID), GID: int(user.GID)}
		// Its temporary directory and all it holds (the home, its
		// .gitconfig and the links to the grants) are the agent's.
		if err := filepath.WalkDir(tmp, func(d string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(d, int(user.UID), int(user.GID))
		}); err != nil {
			return fail(err)
		}
	}
	at.Confine = p.Wrap
	return &p, tmp, nil
}

// linkHomeGrants makes the operator's grants that lie in the daemon's
// home (--sandbox-allow ~/.claude:rw, ~/.gemini, a ~/.codex/auth.json)
// show at the same place in the agent's fresh home, as symlinks to where
// the sandbox binds them: an agent finds its credentials at ~/.claude
// whatever HOME it has. A grant inside another is covered by it.
func linkHomeGrants(home string, p sandbox.Policy) error {
	daemonHome, err := os.UserHomeDir()
	if err != nil || daemonHome == "" || daemonHome == "/" {
		return nil
	}
	grants := append(slices.Clone(p.RW), p.RO...)
	slices.Sort(grants)
	var linked []string
	for _, g := range grants {
		rel, err := filepath.Rel(daemonHome, g)
		if err != nil || rel == "." || !filepath.IsLocal(rel) || rel == ".gitconfig" {
			continue
		}
		if slices.ContainsFunc(linked, func(l string) bool { return strings.HasPrefix(g, l+"/") }) {
			continue
		}
		at := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(at), 0o700); err != nil {
			return err
		}
		if err := os.Symlink(g, at); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		linked = append(linked, g)
	}
	return nil
}
