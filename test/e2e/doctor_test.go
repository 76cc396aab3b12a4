package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// doctorLine finds the line of check what in a doctor's output.
func doctorLine(out, what string) string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && (f[0] == "OK" || f[0] == "FAIL") && strings.HasPrefix(strings.TrimSpace(line[len(f[0]):]), what) {
			return line
		}
		if strings.HasPrefix(line, "      ") && strings.HasPrefix(strings.TrimSpace(line), what) {
			return line // an information line: neither OK nor FAIL
		}
	}
	return ""
}

// TestDoctor: both doctors say OK for a machine that works and FAIL, with
// the fix, for each thing broken on purpose: a port taken, a state dir
// others can read, a missing agent, a token not given, an executor that
// cannot reach this machine's SSH port.
func TestDoctor(t *testing.T) {
	slow(t)
	parallel(t)
	fsDoctor := func(args ...string) result {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "awcp-fs"), append([]string{"doctor"}, args...)...)
		out, err := cmd.Output()
		r := result{stdout: string(out)}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code, r.stderr = ee.ExitCode(), string(ee.Stderr)
		}
		return r
	}
	state := filepath.Join(t.TempDir(), "fs-state")
	work := filepath.Join(t.TempDir(), "work")
	good := []string{"--state-dir", state, "--work-root", work, "--agent-cmd", "sh -c true", "--listen", freeAddr(t)}
	r := fsDoctor(good...)
	if r.code != 0 {
		t.Fatalf("awcp-fs doctor on a working machine: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, what := range []string{"fuse device", "fuse mount", "state dir", "listen port", "work root", "agent", "sandbox"} {
		if !strings.HasPrefix(doctorLine(r.stdout, what), "OK") {
			t.Errorf("awcp-fs doctor: %s not OK:\n%s", what, r.stdout)
		}
	}
	if line := doctorLine(r.stdout, "sandbox"); !strings.Contains(line, "landlock ABI") || !strings.Contains(line, "checked") {
		t.Errorf("awcp-fs doctor's sandbox line: %q", line)
	}
	// A grant that opens the state dir to the agents: the confined shell
	// reaches it, and doctor says so.
	r = fsDoctor(append(good, "--sandbox-allow", filepath.Dir(state))...)
	if line := doctorLine(r.stdout, "sandbox"); r.code != 1 || !strings.HasPrefix(line, "FAIL") || !strings.Contains(line, "reached the state dir") {
		t.Errorf("awcp-fs doctor with the state dir granted: exit %d, %q", r.code, line)
	}
	// A read-write grant of a directory of root's: doctor says that every
	// agent writes there as root.
	tools := t.TempDir()
	r = fsDoctor(append(good, "--sandbox-allow", tools+":rw")...)
	if line := doctorLine(r.stdout, "sandbox grant"); !strings.Contains(line, tools+":rw is root's") || !strings.Contains(line, "set-id") {
		t.Errorf("awcp-fs doctor with a root-owned :rw grant: %q\n%s", line, r.stdout)
	}
	// What docs/agents.md grants :rw — an agent's own logins and settings
	// in its user's home (~/.gemini), root's too here — is not warned of.
	home := t.TempDir()
	os.Mkdir(filepath.Join(home, ".gemini"), 0o700)
	cmd := exec.Command(filepath.Join(binDir, "awcp-fs"), append([]string{"doctor"}, append(good, "--sandbox-allow", "~/.gemini:rw")...)...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, _ := cmd.Output()
	if line := doctorLine(string(out), "sandbox grant"); line != "" || !strings.Contains(string(out), filepath.Join(home, ".gemini")) {
		t.Errorf("awcp-fs doctor with ~/.gemini:rw, as docs/agents.md grants it, warns: %q\n%s", line, out)
	}
	// The work root is not there yet: doctor says so, not that it is
	// writable (issue 42.14).
	if line := doctorLine(r.stdout, "work root"); !strings.Contains(line, "does not exist yet") {
		t.Errorf("awcp-fs doctor on a missing work root: %q", line)
	}

	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	os.MkdirAll(state, 0o755)
	os.Chmod(state, 0o755)
	r = fsDoctor("--state-dir", state, "--agent-cmd", "no-such-agent --go", "--listen", held.Addr().String())
	if r.code != 1 {
		t.Fatalf("awcp-fs doctor with three things broken: exit %d\n%s", r.code, r.stdout)
	}
	for what, fix := range map[string]string{"listen port": "stop what holds it", "state dir": "chmod 700 " + state, "agent": "install it"} {
		line := doctorLine(r.stdout, what)
		if !strings.HasPrefix(line, "FAIL") || !strings.Contains(r.stdout, "fix: "+fix) {
			t.Errorf("awcp-fs doctor: %s: %q, want FAIL and the fix %q in\n%s", what, line, fix, r.stdout)
		}
	}
	// Not installed is said as such, not as the sandbox's refusal.
	if line := doctorLine(r.stdout, "agent"); !strings.Contains(line, "no-such-agent is not installed here: not found on PATH (") ||
		strings.Contains(r.stdout, "--sandbox-allow") {
		t.Errorf("awcp-fs doctor of an agent not installed blames the sandbox, or does not say so:\n%s", r.stdout)
	}

	// The delegator's doctor against a real executor, which needs a token.
	x := startExecutor(t, "true", "--token", "secret")
	c := newCtl(t)
	r = c.run("doctor", "--peer", x.url, "--token", "secret")
	if r.code != 0 {
		t.Fatalf("awcp-ctl doctor: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, what := range []string{"state dir", "executor reachable", "clock", "executor → here"} {
		if !strings.HasPrefix(doctorLine(r.stdout, what), "OK") {
			t.Errorf("awcp-ctl doctor: %s not OK:\n%s", what, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "auto will use sshfs") {
		t.Errorf("awcp-ctl doctor does not say the live mount will be used:\n%s", r.stdout)
	}

	r = c.run("doctor", "--peer", x.url)
	if line := doctorLine(r.stdout, "executor → here"); r.code != 1 || !strings.HasPrefix(line, "FAIL") || !strings.Contains(r.stdout, "fix: pass --token") {
		t.Errorf("awcp-ctl doctor without the token: exit %d\n%s", r.code, r.stdout)
	}
	// Listening where the executor does not dial (it dials the address
	// the request came from, 127.0.0.1): the way back is closed, which is
	// no failure — the live mount then runs in reverse.
	r = c.run("doctor", "--peer", x.url, "--token", "secret", "--ssh-listen", "127.0.0.2:0")
	if line := doctorLine(r.stdout, "executor → here"); r.code != 0 || strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "OK") ||
		!strings.Contains(line, "cannot open port") || !strings.Contains(r.stdout, "auto will use sshfs in reverse") {
		t.Errorf("awcp-ctl doctor with the way back closed: exit %d\n%s", r.code, r.stdout)
	}
	r = c.run("doctor", "--peer", "http://"+freeAddr(t))
	if line := doctorLine(r.stdout, "executor reachable"); r.code != 1 || !strings.HasPrefix(line, "FAIL") {
		t.Errorf("awcp-ctl doctor against no executor: exit %d\n%s", r.code, r.stdout)
	}
}

// TestServeRefusesAnAgentNotInstalled: serve starts with no agent it
// cannot find — a misspelt --agent-cmd or --agent-acp is refused at once
// (exit 2), naming the program and the PATH searched, rather than at the
// first delegation's "status 127" — and still starts with a command whose
// program only running it would tell: a script of the work dir's, shell
// syntax.
func TestServeRefusesAnAgentNotInstalled(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	for _, flags := range [][]string{{"--agent-cmd", `claud -p "$AWCP_PROMPT"`}, {"--agent-acp", "claude-agent-ac"}, {"--agent-cmd", "/opt/nowhere/agent"}} {
		r := runFS(t, append([]string{"serve", "--work-root", filepath.Join(dir, "w"), "--state-dir", filepath.Join(dir, "s"), "--listen", "127.0.0.1:0"}, flags...)...)
		prog := strings.Fields(flags[1])[0]
		if r.code != 2 || !strings.Contains(r.stderr, "the agent "+prog+" is not installed here: not found on PATH ("+os.Getenv("PATH")+")") {
			t.Errorf("serve %v: exit %d\n%s", flags, r.code, r.stderr)
		}
	}
	for _, cmd := range []string{"./run-agent.sh", `n=0; while [ $n -lt 1 ]; do n=1; done`, "echo hi"} {
		x := startExecutor(t, cmd)
		if x.url == "" {
			t.Errorf("serve --agent-cmd %q did not start", cmd)
		}
	}
}
