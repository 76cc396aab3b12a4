// Package gitrun runs git for awcp's own repositories — the git
// transport's, on either side — the one way: no system or user
// configuration, none of this process's GIT_ variables, no hooks, no
// fsmonitor, no prompt, and an error that names the subcommand and what
// git said.
package gitrun

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Env is the environment of such a run, with extra added.
func Env(extra ...string) []string {
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "HOME=/nonexistent", "LC_ALL=C"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Run runs git args in dir ("" for this process's) with Env(env...) and
// stdin, and returns what it wrote to stdout.
func Run(ctx context.Context, dir string, env []string, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"}, args...)...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, Env(env...), stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("git %s: %s", Verb(args), msg)
	}
	return out.Bytes(), nil
}

// Verb is the subcommand of git args: the first word that is neither an
// option nor the value of a -c.
func Verb(args []string) string {
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-c":
			i++
		case !strings.HasPrefix(args[i], "-"):
			return args[i]
		}
	}
	return strings.Join(args, " ")
}
