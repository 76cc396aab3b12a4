package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadmeQuickStart runs the README's quick start as a newcomer would:
// the block between its quickstart markers, as written, in a fresh copy of
// the repository (what `git clone` of this tree gives) with a HOME of its
// own, so both programs use the default state dir (~/.awcp) on one
// machine. Every command must succeed, the agent's line must land in the
// lent file, and nothing may stay mounted.
func TestReadmeQuickStart(t *testing.T) {
	slow(t)
	parallel(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	clone, home := filepath.Join(tmp, "awcp"), filepath.Join(tmp, "home")
	copyTree(t, root, clone)
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	script := quickStart(t, filepath.Join(clone, "README.md"))

	// A HOME of its own, and the Go toolchain's settings it would
	// otherwise read from the real one.
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
	for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GOFLAGS", "GOTOOLCHAIN"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir, cmd.Env = clone, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The executor the script starts in the background keeps its output
	// open; should the script stop early, it would keep Wait waiting.
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever the script left running
	work := filepath.Join(home, "awcp-try", "work")
	t.Cleanup(func() { unmountBeneath(work) })
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s", err, out.String())
	}
	notes, err := os.ReadFile(filepath.Join(home, "awcp-try", "project", "notes.txt"))
	if err != nil || string(notes) != "first line\na line from the agent\n" {
		t.Fatalf("notes.txt after the quick start: %q, %v\n%s", notes, err, out.String())
	}
	for _, want := range []string{
		"OK    executor reachable",            // doctor
		"| appended a line",                   // the agent's progress
		"changes made live in",                // the live mount, not the archive
		"M notes.txt",                         // what changed
		"first line\na line from the agent\n", // cat
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "FAIL") {
		t.Errorf("doctor failed a check:\n%s", out.String())
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mounts, []byte(work)) {
		t.Errorf("a mount is left under %s", work)
	}
}

// quickStart is the shell block between README's quickstart markers.
func quickStart(t *testing.T, readme string) string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start, end := strings.Index(s, "<!-- quickstart -->"), strings.Index(s, "<!-- /quickstart -->")
	if start < 0 || end < start {
		t.Fatal("README.md has no quickstart block")
	}
	block := s[start:end]
	open := strings.Index(block, "```sh\n")
	close := strings.LastIndex(block, "```")
	if open < 0 || close <= open {
		t.Fatal("the quickstart block holds no ```sh code")
	}
	return block[open+len("```sh\n") : close]
}

// copyTree copies what a clone of root holds — its tracked files and the
// new ones git does not ignore, as they are in the working tree — to dst.
func copyTree(t *testing.T, root, dst string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		} else if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(target, to)
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !fi.Mode().IsRegular() {
			continue // a submodule
		}
		if err := copyFile(src, to, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// unmountBeneath detaches whatever is still mounted under dir.
func unmountBeneath(dir string) {
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
}

// TestDemo runs `make demo`'s script: the delegation completes, the
// workspace shows the agent's changes, the audit it points to is shown
// before the demo's state goes, and nothing of it is left behind.
func TestDemo(t *testing.T) {
	parallel(t)
	_, port, _ := strings.Cut(freeAddr(t), ":")
	tmp := t.TempDir()
	cmd := exec.Command("sh", "demo/run.sh")
	cmd.Env = append(os.Environ(), "BIN="+binDir, "AWCP_DEMO_PORT="+port, "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{"A test/greet_test.sh", "D TODO.txt", "-rwxr-xr-x ./src/greet.sh",
		"== what the executor did, operation by operation: awcp-ctl audit ", "remove  TODO.txt"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the demo left %v behind", left)
	}
}

// TestDemoACP runs `make demo-acp`'s script: a session opened from the
// command line with the scripted ACP agent, its permission answered, a
// second turn, and the close; the workspace holds both turns' writes, and
// nothing of the demo is left behind.
func TestDemoACP(t *testing.T) {
	slow(t)
	parallel(t)
	modules, _ := sessionAgentScript(t)
	_, port, _ := strings.Cut(freeAddr(t), ":")
	tmp := t.TempDir()
	cmd := exec.Command("sh", "demo/acp.sh")
	cmd.Env = append(os.Environ(), "BIN="+binDir, "AWCP_DEMO_PORT="+port, "TMPDIR="+tmp, "AWCP_DEMO_AGENT_DIR="+modules)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the ACP demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{"awaits a permission decision (perm-1)", "permission allow", "turn 2 of process", "completed", "   direct-2.txt", "   turn-2.txt"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the ACP demo's output lacks %q:\n%s", want, out)
		}
	}
	// The close's report says each turn's reply once in its summary, and
	// the agent's lines in its output without quoting them.
	_, closed, _ := strings.Cut(string(out), "== closing it")
	if n := strings.Count(closed, "turn 2 of process"); n != 2 {
		t.Errorf("the close's report has turn 2's reply %d times, want 2 (the summary and the agent's output):\n%s", n, out)
	}
	if strings.Contains(string(out), `| "agent: `) {
		t.Errorf("the agent's output lines are shown quoted:\n%s", out)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the ACP demo left %v behind", left)
	}
}
