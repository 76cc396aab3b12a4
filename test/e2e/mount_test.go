package e2e

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	awcpfs "github.com/awcp/awcp/fs"
)

// mountsUnder lists awcp FUSE mounts below an executor's work root.
func mountsUnder(t *testing.T, x *executor) []string {
	t.Helper()
	mps, err := awcpfs.Mounted()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mp := range mps {
		if strings.HasPrefix(mp, x.workRoot+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// noMountsLeft fails if x still has an awcp FUSE mount in the mount table.
func noMountsLeft(t *testing.T, x *executor) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mps := mountsUnder(t, x)
		if len(mps) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("awcp mounts left in /proc/self/mountinfo: %v", mps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitWorkRootEmpty(t *testing.T, x *executor) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ents, _ := os.ReadDir(x.workRoot); len(ents) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	x.workRootEmpty(t)
}

// waitFile waits until path holds something: a writer creates the file
// before it writes to it.
func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
	return nil
}

// The agent of the live-mount round trip works like a developer would:
// edits, renames, deletes, git, a Go build, all inside the mount. It
// commits to the owner's repository (git's control paths are read-only to
// it, its objects and refs are not).
const developerAgent = `set -e
echo "started" > progress.txt
while [ ! -e from-delegator.txt ]; do sleep 0.05; done
echo "saw: $(cat from-delegator.txt)"
echo "edited in the mount" >> README.md
mv src/old.go src/renamed.go
rm scripts/build.sh
mkdir -p newdir && echo x > newdir/x.txt
git -c safe.directory='*' config core.hooksPath /tmp/evil 2>/dev/null && exit 9
git add -A
git -c user.email=agent@example.com -c user.name=agent commit -qm "work from the executor"
go build -buildvcs=false -o app .
./app > app.out
echo "Built and committed in the live mount." > "$AWCP_SUMMARY_FILE"`

func goWorkspace(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "project")
	writeFiles(t, dir, map[string]string{
		"README.md":        "# live\n",
		"go.mod":           "module example.com/live\n\ngo 1.21\n",
		"main.go":          "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from the mount\") }\n",
		"src/old.go":       "package src\n",
		"scripts/build.sh": "#!/bin/sh\n",
	})
	return dir
}

func TestLiveMountRoundTrip(t *testing.T) {
	slow(t)
	parallel(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed by this test (.ci/run installs it)")
	}
	x := startExecutor(t, developerAgent)
	c := newCtl(t)
	dir := goWorkspace(t)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"-c", "user.email=o@x", "-c", "user.name=owner", "commit", "-qm", "the owner's base"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}

	exp := c.start("export", dir, "--peer", x.url, "--prompt", "build it", "--ssh-listen", "127.0.0.1:0")
	// The executor's write shows on this side while the task runs...
	if b := waitFile(t, filepath.Join(dir, "progress.txt")); string(b) != "started\n" {
		t.Fatalf("progress.txt = %q", b)
	}
	if mps := mountsUnder(t, x); len(mps) != 1 {
		t.Fatalf("mounts while running: %v", mps)
	}
	// The audit log, followed while the agent works, ends when the
	// delegation does, with its last operations.
	follow := c.start("audit", c.only().ID, "--follow")
	// ...and this side's write shows in the mount.
	os.WriteFile(filepath.Join(dir, "from-delegator.txt"), []byte("hi executor"), 0o644)
	if err := exp.Wait(); err != nil {
		t.Fatalf("export: %v\n%s%s", err, exp.stdout.String(), exp.stderr.String())
	}
	out := exp.stdout.String()
	if !strings.Contains(out, "(sshfs, rw)") || !strings.Contains(out, "Built and committed") {
		t.Fatalf("output:\n%s", out)
	}
	if !strings.Contains(exp.stderr.String(), "| saw: hi executor") {
		t.Fatalf("the delegator's write was not visible in the mount:\n%s", exp.stderr.String())
	}
	readme, _ := os.ReadFile(filepath.Join(dir, "README.md"))
	if string(readme) != "# live\nedited in the mount\n" {
		t.Errorf("README.md = %q", readme)
	}
	for _, p := range []string{"src/renamed.go", "newdir/x.txt", "app"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s missing: %v", p, err)
		}
	}
	for _, p := range []string{"src/old.go", "scripts/build.sh"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("%s not deleted", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "app.out")); string(b) != "hello from the mount\n" {
		t.Errorf("app.out = %q", b)
	}
	log, err := exec.Command("git", "-C", dir, "log", "--format=%s").Output()
	if err != nil || strings.TrimSpace(string(log)) != "work from the executor\nthe owner's base" {
		t.Errorf("git log in the delegator's dir: %q %v", log, err)
	}
	if st, _ := exec.Command("git", "-C", dir, "status", "--porcelain").Output(); !bytes.Contains(st, []byte("app")) || bytes.Contains(st, []byte("README")) {
		t.Errorf("git status: %s", st)
	}
	// What changed is listed a line per path, deletions too.
	for _, want := range []string{"changes made live in " + dir + ":", "\n  A src/renamed.go\n", "\n  D src/old.go\n",
		"\n  D scripts/build.sh\n", "\n  A newdir/\n", "\n  A newdir/x.txt\n", "\n  M README.md\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the result's changes lack %q:\n%s", want, out)
		}
	}
	// What the agent did is in the result's summary and in the audit log.
	if !strings.Contains(out, "audit: ") || !strings.Contains(out, "awcp-ctl audit ") {
		t.Errorf("the result has no audit summary:\n%s", out)
	}
	id := strings.Fields(out)[1] // "delegation ID completed"
	r := c.run("audit", id, "--json")
	if r.code != 0 {
		t.Fatalf("audit: %d\n%s", r.code, r.stderr)
	}
	var ops []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var op struct{ Op, Path, To string }
		if err := json.Unmarshal([]byte(line), &op); err != nil {
			t.Fatalf("audit --json line %q: %v", line, err)
		}
		ops = append(ops, strings.TrimSpace(op.Op+" "+op.Path+" "+op.To))
	}
	for _, want := range []string{"write README.md", "rename src/old.go src/renamed.go", "remove scripts/build.sh", "mkdir newdir", "create app.out"} {
		if !slices.Contains(ops, want) {
			t.Errorf("the audit log lacks %q (%d operations)", want, len(ops))
		}
	}
	r = c.run("audit", id)
	if !strings.Contains(r.stdout, "rename  src/old.go -> src/renamed.go") || !strings.Contains(r.stderr, "audit: ") {
		t.Errorf("audit, as text:\n%s%s", r.stdout, r.stderr)
	}
	followed := make(chan error, 1)
	go func() { followed <- follow.Wait() }()
	var ferr error
	select {
	case ferr = <-followed:
	case <-time.After(15 * time.Second):
		follow.Process.Kill()
		t.Fatalf("audit --follow did not end with the delegation")
	}
	if err := ferr; err != nil || follow.stdout.String() != r.stdout {
		t.Errorf("audit --follow (%v) printed what audit does not:\n%s\n--- audit:\n%s", err, follow.stdout.String(), r.stdout)
	}
	noMountsLeft(t, x)
	waitWorkRootEmpty(t, x)
}

func TestLiveMountReadOnly(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `for op in "touch new.txt" "echo x >> README.md" "rm README.md" "mkdir d" \
		"mv README.md R.md" "chmod 777 README.md" "ln -s README.md l" "truncate -s 0 README.md"; do
		if out=$(sh -c "$op" 2>&1); then echo "WROTE: $op"; else echo "refused: $op: $out"; fi
	done
	cat README.md >/dev/null && echo read-ok`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	before := tree(t, dir)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "try to write", "--access", "ro", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 || !strings.Contains(r.stdout, "(sshfs, ro)") {
		t.Fatalf("%d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "WROTE") || !strings.Contains(r.stderr, "read-ok") {
		t.Fatalf("agent output:\n%s", r.stderr)
	}
	for _, line := range strings.Split(r.stderr, "\n") {
		if strings.Contains(line, "refused:") && !strings.Contains(line, "Read-only file system") && !strings.Contains(line, "Permission denied") {
			t.Errorf("refused with an unexpected error: %s", line)
		}
	}
	sameTree(t, dir, before)
	noMountsLeft(t, x)
	waitWorkRootEmpty(t, x)
}

func TestLiveMountSymlinkEscapes(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `
	ln -s /etc/passwd abs-link 2>/dev/null && echo "ESCAPED: absolute link made"
	ln -s ../../../outside rel-link 2>/dev/null && echo "ESCAPED: relative link made"
	cat planted 2>/dev/null | grep -q delegator-secret && echo "ESCAPED: read through planted link"
	echo done`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	os.WriteFile(filepath.Join(filepath.Dir(dir), "secret.txt"), []byte("delegator-secret\n"), 0o600)
	os.Symlink("../secret.txt", filepath.Join(dir, "planted"))
	before := tree(t, dir)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "escape", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 || strings.Contains(r.stderr, "ESCAPED") || !strings.Contains(r.stderr, "| done") {
		t.Fatalf("%d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameTree(t, dir, before)
	noMountsLeft(t, x)
}

func TestLiveMountEndsOnCancelAndExpiry(t *testing.T) {
	slow(t)
	parallel(t)
	for _, how := range []string{"cancel", "expiry"} {
		t.Run(how, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "agent.pid")
			x := startExecutor(t, `echo $$ > `+pidFile+`; while :; do ls >/dev/null; sleep 0.1; done`)
			c := newCtl(t)
			dir := sampleWorkspace(t)
			args := []string{"export", dir, "--peer", x.url, "--prompt", "p", "--ssh-listen", "127.0.0.1:0"}
			code := control.CodeCancelled
			if how == "expiry" {
				args = append(args, "--ttl", "2s")
				code = control.CodeExpired
			}
			exp := c.start(args...)
			pgid := readPID(t, pidFile)
			d := c.waitState("", "running")
			if mps := mountsUnder(t, x); len(mps) != 1 {
				t.Fatalf("mounts while running: %v", mps)
			}
			if how == "cancel" {
				if r := c.run("cancel", d.ID); r.code != 0 {
					t.Fatalf("cancel: %s", r.stderr)
				}
			}
			exp.Wait()
			if exp.ProcessState.ExitCode() != 1 || !strings.Contains(exp.stderr.String(), "error "+code) {
				t.Fatalf("%d %s", exp.ProcessState.ExitCode(), exp.stderr.String())
			}
			nothingLeft(t, c, x, pgid)
		})
	}
}

// TestDelegatorCrashMidMount: the daemon that serves a live mount is killed
// with SIGKILL and started again on the same SSH port; the executor's mount
// re-dials, the agent only stalls, and the delegation completes with all of
// the agent's writes on disk.
func TestDelegatorCrashMidMount(t *testing.T) {
	slow(t)
	parallel(t)
	for _, staged := range []bool{false, true} {
		name := "auto"
		if staged {
			name = "staged"
		}
		t.Run(name, func(t *testing.T) { delegatorCrashMidMount(t, staged) })
	}
}

// delegatorCrashMidMount kills the daemon serving a live mount mid-task
// and starts it again; staged, the staging area it reopens holds what the
// agent wrote before and after, and the owner's directory nothing of it
// until apply.
func delegatorCrashMidMount(t *testing.T, staged bool) {
	gate := filepath.Join(t.TempDir(), "gate")
	x := startExecutor(t, `echo one > first.txt; while [ ! -e `+gate+` ]; do sleep 0.05; done; echo two > second.txt; cat first.txt > copy.txt; echo finished`)
	c := newCtl(t)
	dir := sampleWorkspace(t)

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	sshAddr := ln.Addr().String()
	ln.Close()
	startDaemon := func() *exec.Cmd {
		d := c.command("serve", "--state-dir", c.state, "--ssh-listen", sshAddr)
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		return d
	}
	daemon := startDaemon()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(c.state, "ctl.sock")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	args := []string{"export", dir, "--peer", x.url, "--prompt", "p", "--background"}
	if staged {
		args = append(args, "--snapshot", "staged")
	}
	before := tree(t, dir)
	r := c.run(args...)
	if r.code != 0 {
		t.Fatalf("%d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	if staged {
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(c.run("diff", id, "--name-status").stdout, "A\tfirst.txt"); {
			if time.Now().After(deadline) {
				t.Fatal("first.txt never showed in the staged result")
			}
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		waitFile(t, filepath.Join(dir, "first.txt"))
	}

	daemon.Process.Kill()
	daemon.Wait()
	time.Sleep(500 * time.Millisecond)
	daemon = startDaemon()
	defer func() { daemon.Process.Signal(syscall.SIGTERM); daemon.Wait() }()
	os.WriteFile(gate, nil, 0o644)

	out := c.run("output", id, "--block", "--timeout", "30s")
	if out.code != 0 {
		t.Fatalf("after the crash: %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	if staged {
		sameTree(t, dir, before)
		if r := c.run("apply", id); r.code != 0 {
			t.Fatalf("apply: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	for name, want := range map[string]string{"first.txt": "one\n", "second.txt": "two\n", "copy.txt": "one\n"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != want {
			t.Errorf("%s = %q, want %q", name, b, want)
		}
	}
	nothingLeft(t, c, x, 0)
}

// TestExecutorCrashMidTask: awcp-fs is killed with SIGKILL while its agent
// works in a live mount; started again, it stops the orphaned agent,
// unmounts the stale mount, removes the work dir without deleting through
// it, and the waiting delegator hears TASK_FAILED. The delegator's files
// are intact.
func TestExecutorCrashMidTask(t *testing.T) {
	parallel(t)
	pidFile := filepath.Join(t.TempDir(), "agent.pid")
	x := startExecutor(t, `echo $$ > `+pidFile+`; echo partial > partial.txt; while :; do sleep 0.1; done`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	exp := c.start("export", dir, "--peer", x.url, "--prompt", "p", "--ssh-listen", "127.0.0.1:0")
	pgid := readPID(t, pidFile)
	waitFile(t, filepath.Join(dir, "partial.txt"))
	before := tree(t, dir)

	x.crash(t)

	exp.Wait()
	if exp.ProcessState.ExitCode() != 1 || !strings.Contains(exp.stderr.String(), "error TASK_FAILED") ||
		!strings.Contains(exp.stderr.String(), "restarted") {
		t.Fatalf("%d\n%s", exp.ProcessState.ExitCode(), exp.stderr.String())
	}
	nothingLeft(t, c, x, pgid)
	sameTree(t, dir, before)
}

// TestDelegatorGoneForGood: the delegator vanishes (SIGKILL, never comes
// back) while the agent works in the mount; calls fail after the reconnect
// bound, and the executor tears the mount down at the lease's end at the
// latest.
func TestDelegatorGoneForGood(t *testing.T) {
	slow(t)
	alone(t, "bounds, in wall-clock seconds, how soon the mount gives up on a delegator gone")
	pidFile := filepath.Join(t.TempDir(), "agent.pid")
	x := startExecutor(t, `echo $$ > `+pidFile+`; while :; do ls >/dev/null 2>&1; sleep 0.1; done`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	exp := c.start("export", dir, "--peer", x.url, "--prompt", "p", "--ttl", "3s", "--ssh-listen", "127.0.0.1:0")
	pgid := readPID(t, pidFile)
	c.waitState("", "running")
	exp.Process.Kill()
	exp.Wait()
	start := time.Now()
	waitGone(t, pgid)
	noMountsLeft(t, x)
	waitWorkRootEmpty(t, x)
	// The lease ends 3 s after ACCEPT; the agent blocked in the mount is
	// interrupted by the kill, so teardown follows within the 2 s target
	// (plus slack for a loaded machine).
	if el := time.Since(start); el > 6*time.Second {
		t.Fatalf("mount torn down only after %s", el)
	}
}
