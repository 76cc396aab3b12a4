package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An agent keeps PATH, the locale and TZ of the daemon's environment, and
// nothing else of it: not a credential its supervisor set.
func TestAgentEnvironmentIsStated(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "daemon-secret")
	t.Setenv("LC_TIME", "C.UTF-8")
	t.Setenv("TZ", "UTC")
	cmd := Command(Task{Prompt: "p", WorkDir: "/w", Env: []string{"NAMED=yes"}}, "true")
	env := strings.Join(cmd.Env, "\n")
	if strings.Contains(env, "daemon-secret") {
		t.Errorf("the agent's environment holds the daemon's secret:\n%s", env)
	}
	for _, want := range []string{"PATH=", "LC_TIME=C.UTF-8", "TZ=UTC", "NAMED=yes", "AWCP_PROMPT=p"} {
		if !slices.ContainsFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, want) }) {
			t.Errorf("the agent's environment lacks %s:\n%s", want, env)
		}
	}
}

// An environment file is systemd's form, the daemon's user's and readable
// by nobody else; what the executor sets for each agent is not the
// operator's to name.
func TestParseEnvFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "agent.env")
	os.WriteFile(f, []byte("# keys\n\nANTHROPIC_API_KEY=sk-1\nQUOTED=\"a b\"\n  SINGLE = 'c'\nEMPTY=\n"), 0o600)
	env, err := ParseEnvFile(f)
	if err != nil || !slices.Equal(env, []string{"ANTHROPIC_API_KEY=sk-1", "QUOTED=a b", "SINGLE=c", "EMPTY="}) {
		t.Errorf("parsed %q, %v", env, err)
	}
	os.Chmod(f, 0o640)
	if _, err := ParseEnvFile(f); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a file others may read: %v", err)
	}
	for _, bad := range []string{"HOME=/root\n", "AWCP_TOKEN=x\n", "AWCP_PROMPT=x\n", "no equals sign\n", "1BAD=x\n"} {
		os.WriteFile(f, []byte(bad), 0o600)
		os.Chmod(f, 0o600)
		if _, err := ParseEnvFile(f); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}
