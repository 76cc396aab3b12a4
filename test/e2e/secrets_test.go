package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The executor's tokens stay its own: read from a --token-file (mode 600;
// one others may read is refused), or from AWCP_TOKEN, they are not in
// the environment of the agent it runs, whose output and files reach the
// delegator; nor is anything else of the daemon's environment (a cloud
// credential its supervisor set) but PATH, the locale and what the
// operator names (--agent-env, --agent-env-file of mode 600). A daemon serving beyond loopback without a token says so
// loudly; doctor fails a settings file holding a token that others may
// read.
func TestExecutorSecretsStayWithTheDaemon(t *testing.T) {
	alone(t, "sets the test process's environment (t.Setenv) for what it starts")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens")
	os.WriteFile(tokenFile, []byte("# the executor's tokens\nfile-secret-4242\n"), 0o644)
	loose := runFS(t, "serve", "--token-file", tokenFile, "--work-root", filepath.Join(dir, "w0"), "--agent-cmd", "true", "--state-dir", filepath.Join(dir, "s0"))
	if loose.code != 2 || !strings.Contains(loose.stderr, "chmod 600") {
		t.Fatalf("a token file others may read: exit %d\n%s", loose.code, loose.stderr)
	}
	os.Chmod(tokenFile, 0o600)

	t.Setenv("AWCP_TOKEN", "env-secret-1717")
	t.Setenv("CLOUD_ACCESS_KEY", "cloud-secret-9090") // the daemon's, never named
	t.Setenv("NAMED_FOR_AGENTS", "named-value")
	envFile := filepath.Join(dir, "agent.env")
	os.WriteFile(envFile, []byte("# for the agents\nMODEL_API_KEY=\"from-the-file\"\n"), 0o644)
	if r := runFS(t, "serve", "--agent-env-file", envFile, "--work-root", filepath.Join(dir, "w0"), "--agent-cmd", "true", "--state-dir", filepath.Join(dir, "s0")); r.code != 2 || !strings.Contains(r.stderr, "chmod 600") {
		t.Fatalf("an agent env file others may read: exit %d\n%s", r.code, r.stderr)
	}
	if r := runFS(t, "serve", "--agent-env", "HOME", "--work-root", filepath.Join(dir, "w0"), "--agent-cmd", "true", "--state-dir", filepath.Join(dir, "s0")); r.code != 2 || !strings.Contains(r.stderr, "fresh one") {
		t.Fatalf("--agent-env HOME: exit %d\n%s", r.code, r.stderr)
	}
	os.Chmod(envFile, 0o600)
	x := startExecutor(t, `env > agent-env.txt; echo "env has $(env | grep -c secret) secrets"`, "--token-file", tokenFile,
		"--agent-env", "NAMED_FOR_AGENTS", "--agent-env-file", envFile)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	for _, token := range []string{"file-secret-4242", "env-secret-1717"} {
		r := c.run("export", ws, "--peer", x.url, "--prompt", "show env", "--token", token, "--transport", "archive")
		if r.code != 0 {
			t.Fatalf("export with %s: %d\n%s", token, r.code, r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, "secret-") && !strings.Contains(r.stdout+r.stderr, "0 secrets") {
			t.Fatalf("the agent's output names a secret:\n%s%s", r.stdout, r.stderr)
		}
		env, err := os.ReadFile(filepath.Join(ws, "agent-env.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(env), "secret-") || strings.Contains(string(env), "AWCP_TOKEN") || strings.Contains(string(env), "CLOUD_ACCESS_KEY") {
			t.Fatalf("the agent's environment holds the executor's token or another secret of the daemon's:\n%s", env)
		}
		for _, want := range []string{"NAMED_FOR_AGENTS=named-value\n", "MODEL_API_KEY=from-the-file\n", "PATH="} {
			if !strings.Contains(string(env), want) {
				t.Errorf("the agent's environment lacks %q:\n%s", want, env)
			}
		}
	}

	// Beyond loopback without a token: a loud warning.
	open := exec.Command(filepath.Join(binDir, "awcp-fs"), "serve", "--listen", "0.0.0.0:0", "--work-root", filepath.Join(dir, "w1"),
		"--agent-cmd", "true", "--state-dir", filepath.Join(dir, "s1"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWCP_TOKEN=") {
			open.Env = append(open.Env, kv)
		}
	}
	var stderr strings.Builder
	open.Stderr = &stderr
	out, _ := open.StdoutPipe()
	if err := open.Start(); err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(out).ReadString('\n') // listening
	open.Process.Kill()
	open.Wait()
	if !strings.Contains(stderr.String(), "WITHOUT A TOKEN") {
		t.Errorf("serving on 0.0.0.0 without a token, awcp-fs said nothing:\n%s", stderr.String())
	}

	// doctor fails a settings file with a token others may read.
	conf := filepath.Join(dir, "awcp-fs.toml")
	os.WriteFile(conf, []byte("[serve]\ntoken = [\"in-the-file\"]\n"), 0o644)
	d := runFS(t, "doctor", "--config", conf, "--state-dir", filepath.Join(dir, "s2"))
	if !strings.Contains(d.stdout, "holds a token and can be read by others") {
		t.Errorf("doctor on a settings file of mode 644 holding a token:\n%s%s", d.stdout, d.stderr)
	}
}

// runFS runs awcp-fs and returns its outcome.
func runFS(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "awcp-fs"), args...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	r := result{stdout: o.String(), stderr: e.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	}
	return r
}

// An agent that runs `awcp-ctl export` without --prompt does not send its
// own task on: $AWCP_PROMPT, which its executor set, is not read.
func TestNestedExportDoesNotResendTheParentsTask(t *testing.T) {
	parallel(t)
	c := newCtl(t)
	cmd := c.command("export", t.TempDir(), "--peer", "http://127.0.0.1:1")
	cmd.Env = append(cmd.Env, "AWCP_PROMPT=the parent's task")
	var errb strings.Builder
	cmd.Stderr = &errb
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(errb.String(), "prompt") {
		t.Fatalf("export without --prompt, $AWCP_PROMPT set: %v\n%s", err, errb.String())
	}
}

// A peer given as host:port, as ssh and rsync take it, is answered with
// the URL to give instead, and the help names the flag's value plainly
// (issue 42.9).
func TestPeerAsHostPortSuggestsTheURL(t *testing.T) {
	parallel(t)
	c := newCtl(t)
	r := c.run("export", t.TempDir(), "--peer", "127.0.0.1:10250", "--prompt", "p")
	if r.code != 2 || !strings.Contains(r.stderr, "--peer https://127.0.0.1:10250") {
		t.Fatalf("--peer 127.0.0.1:10250: exit %d\n%s", r.code, r.stderr)
	}
	h := c.run("export", "--help")
	if strings.Contains(h.stdout, "--peer awcp-ctl") {
		t.Errorf("export --help shows a placeholder taken from the usage:\n%s", h.stdout)
	}
}
