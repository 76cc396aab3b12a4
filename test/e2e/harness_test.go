// Package e2e runs awcp-fs and awcp-ctl as separate processes on loopback
// and checks what they do on disk.
package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/control/executor/agent"
)

// binDir holds the binaries under test: $AWCP_BIN_DIR, or built by TestMain.
var binDir string

func TestMain(m *testing.M) {
	if spec := os.Getenv(advertiseEnv); spec != "" {
		os.Exit(advertiseAsAttacker(spec)) // this binary re-run in a namespace (lan_test.go)
	}
	if os.Getenv(noUserNSEnv) != "" {
		os.Exit(execWithoutUserNS()) // this binary as a wrapper (nouserns_test.go)
	}
	if journal := os.Getenv(soakAgentEnv); journal != "" {
		os.Exit(soakAgent(journal)) // this binary as the soak's agent (soak_test.go)
	}
	binDir = os.Getenv("AWCP_BIN_DIR")
	if binDir == "" {
		tmp, err := os.MkdirTemp("", "awcp-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("go", "build", "-o", tmp+"/", "../../cmd/awcp-ctl", "../../cmd/awcp-fs")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build:", err)
			os.Exit(1)
		}
		binDir = tmp
	}
	code := m.Run()
	if left := daemonsLeft(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: daemons of the tests still run after them (a test let one go):\n  %s\n", strings.Join(left, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// daemonsLeft lists the `awcp-ctl serve` and `awcp-fs serve` processes of
// this run's binaries whose state dir is a test's: each test ends its
// own, and one left running holds ports, mounts and namespaces after its
// test is gone. They are named, not killed: another run may own them.
func daemonsLeft() []string {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var left []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || args[1] != "serve" ||
			(args[0] != filepath.Join(binDir, "awcp-ctl") && args[0] != filepath.Join(binDir, "awcp-fs")) {
			continue
		}
		for i, a := range args {
			if a == "--state-dir" && i+1 < len(args) && strings.HasPrefix(args[i+1], filepath.Join(os.TempDir(), "Test")) {
				left = append(left, filepath.Base(filepath.Dir(p))+": "+strings.Join(args, " "))
				break
			}
		}
	}
	return left
}

// executor is a running `awcp-fs serve`.
type executor struct {
	url      string // the URL delegators are given: http:// (plain HTTP accepted) unless started TLS only
	addr     string // host:port
	state    string // its state dir
	workRoot string
	args     []string // of awcp-fs, for a restart
	bin      string   // the awcp-fs it runs, if not binDir's
	cmd      *exec.Cmd
	log      *bytes.Buffer
}

// startExecutor runs awcp-fs serve on a free loopback port with agentCmd and
// extra flags, and stops it (SIGTERM) at cleanup.
//
// The suite's delegators speak plain HTTP to it (--plain-http at both
// ends: newCtl's environment), so that every test can name it by URL;
// TLS between the two, and the refusals of plain HTTP, are tried by the
// tests that start it with startTLSExecutor (and by discovery, whose
// trusted peers are always reached over TLS).
func startExecutor(t *testing.T, agentCmd string, extra ...string) *executor {
	t.Helper()
	return startExecutorTLS(t, agentCmd, false, extra...)
}

// startTLSExecutor is startExecutor without --plain-http: TLS only, its
// url https://.
func startTLSExecutor(t *testing.T, agentCmd string, extra ...string) *executor {
	t.Helper()
	return startExecutorTLS(t, agentCmd, true, extra...)
}

func startExecutorTLS(t *testing.T, agentCmd string, tlsOnly bool, extra ...string) *executor {
	t.Helper()
	dir := t.TempDir()
	x := &executor{workRoot: filepath.Join(dir, "work"), state: filepath.Join(dir, "state"), log: new(bytes.Buffer)}
	x.args = append([]string{"serve", "--state-dir", x.state, "--work-root", x.workRoot,
		"--agent-cmd", agentCmd, "--log-level", "info"}, extra...)
	if !tlsOnly {
		x.args = append(x.args, "--plain-http")
	}
	if !slices.Contains(extra, "--sandbox") {
		// The tests' agents leave markers (pid files, journals) in the
		// test's temporary dirs: their sandbox grants them, except in the
		// tests of the sandbox.
		x.args = append(x.args, "--sandbox-allow", filepath.Dir(dir)+":rw")
	}
	x.start(t, "127.0.0.1:0")
	t.Cleanup(func() {
		x.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { x.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			// Its own way out of a mount that will not let go (an abort
			// after two grace periods) has had its time: SIGKILL could
			// leave a thread in umount2 for good.
			x.cmd.Process.Kill()
			<-done
			t.Errorf("awcp-fs did not stop on SIGTERM; log:\n%s", x.log)
		}
		if t.Failed() {
			t.Logf("awcp-fs log:\n%s", x.log)
		}
	})
	return x
}

func (x *executor) start(t *testing.T, listen string) {
	t.Helper()
	bin := x.bin
	if bin == "" {
		bin = filepath.Join(binDir, "awcp-fs")
	}
	x.cmd = exec.Command(bin, append(x.args, "--listen", listen)...)
	x.cmd.Stderr = x.log
	out, err := x.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("awcp-fs did not start: %v\n%s", err, x.log)
	}
	_, url, ok := strings.Cut(strings.TrimSpace(line), "listening on ")
	url, _, _ = strings.Cut(url, ",") // then its identity
	if !ok || !strings.HasPrefix(url, "https://") {
		t.Fatalf("unexpected first line %q", line)
	}
	x.addr = strings.TrimPrefix(url, "https://")
	x.url = url
	if slices.Contains(x.args, "--plain-http") {
		x.url = "http://" + x.addr
	}
}

// key is the executor's identity key, as `awcp-fs id` prints it.
func (x *executor) key(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "awcp-fs"), "id", "--state-dir", x.state).Output()
	if err != nil {
		t.Fatalf("awcp-fs id: %v", err)
	}
	return strings.SplitN(string(out), "\n", 2)[0]
}

// crash kills awcp-fs with SIGKILL and starts it again on the same address
// and state dir.
func (x *executor) crash(t *testing.T) {
	t.Helper()
	x.cmd.Process.Kill()
	x.cmd.Wait()
	x.start(t, x.addr)
}

// workRootEmpty fails unless the executor left nothing in its work root.
func (x *executor) workRootEmpty(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(x.workRoot)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("executor work root not clean: %v", ents)
	}
}

// ctl runs awcp-ctl with a state dir.
type ctl struct {
	t     *testing.T
	state string
	tls   bool // no AWCP_PLAIN_HTTP in its environment
	// as, if set, is the user awcp-ctl runs as (not root), and env what
	// it is given beside the state dir.
	as  *syscall.Credential
	bin string // its awcp-ctl, where that user can reach it
	env []string
}

func newCtl(t *testing.T) *ctl {
	c := &ctl{t: t, state: filepath.Join(t.TempDir(), "ctl-state")}
	t.Cleanup(c.stopDaemon)
	return c
}

type result struct {
	code           int
	stdout, stderr string
}

func (c *ctl) command(args ...string) *exec.Cmd {
	bin := filepath.Join(binDir, "awcp-ctl")
	if c.bin != "" {
		bin = c.bin
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), c.env...), "AWCP_STATE_DIR="+c.state)
	if c.as != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.as}
	}
	if !c.tls {
		cmd.Env = append(cmd.Env, "AWCP_PLAIN_HTTP=1")
	}
	return cmd
}

func (c *ctl) run(args ...string) result {
	c.t.Helper()
	r := c.runQuiet(args...)
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic:") {
		c.t.Fatalf("awcp-ctl crashed:\n%s", r.stderr)
	}
	return r
}

// background is awcp-ctl running on its own, its output captured.
type background struct {
	*exec.Cmd
	stdout, stderr bytes.Buffer
}

// start runs awcp-ctl without waiting for it.
func (c *ctl) start(args ...string) *background {
	c.t.Helper()
	b := &background{Cmd: c.command(args...)}
	b.Stdout, b.Stderr = &b.stdout, &b.stderr
	if err := b.Start(); err != nil {
		c.t.Fatal(err)
	}
	return b
}

// runQuiet runs awcp-ctl and never fails the test itself, so it may be
// called from other goroutines.
func (c *ctl) runQuiet(args ...string) result {
	cmd := c.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		r.code, r.stderr = -1, err.Error()
	}
	return r
}

// delegation is the part of `status --json` the tests read.
type delegation struct {
	ID         string   `json:"id"`
	State      string   `json:"state"`
	Peer       string   `json:"peer"`
	Summary    string   `json:"summary"`
	Highlights []string `json:"highlights"`
	Conflicts  []string `json:"conflicts"`
	Failure    *struct {
		Code string `json:"code"`
	} `json:"failure"`
	Transitions []struct {
		To string `json:"to"`
	} `json:"transitions"`
	OwnerPID    int `json:"ownerPid"`
	Permissions []struct {
		RequestID string `json:"requestId"`
		Title     string `json:"title"`
		Outcome   string `json:"outcome"`
		OptionID  string `json:"optionId"`
		DecidedBy string `json:"decidedBy"`
		Options   []struct {
			OptionID string `json:"optionId"`
		} `json:"options"`
	} `json:"permissions"`
}

// accepted reports whether the executor ever accepted the delegation (one
// refused at INVITE is only on the delegator's side).
func (d delegation) accepted() bool {
	for _, tr := range d.Transitions {
		if tr.To == "accepted" {
			return true
		}
	}
	return false
}

func (c *ctl) status() []delegation {
	c.t.Helper()
	r := c.run("status", "--json")
	var ds []delegation
	if err := json.Unmarshal([]byte(r.stdout), &ds); err != nil {
		c.t.Fatalf("status --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	return ds
}

// waitState polls until delegation id (or the only one, if id is "") is in state.
func (c *ctl) waitState(id, state string) delegation {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, d := range c.status() {
			if (id == "" || d.ID == id) && d.State == state {
				return d
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("delegation %q never reached %s: %+v", id, state, c.status())
	return delegation{}
}

// serve runs `awcp-ctl serve` with args until stop (or the test's end),
// returning once its socket is up; log holds what it wrote to stderr.
func (c *ctl) serve(args ...string) (log *strings.Builder, stop func()) {
	c.t.Helper()
	daemon := c.command(append([]string{"serve"}, args...)...)
	log = new(strings.Builder)
	daemon.Stderr = log
	if err := daemon.Start(); err != nil {
		c.t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			daemon.Process.Signal(syscall.SIGTERM)
			daemon.Wait()
		})
	}
	c.t.Cleanup(stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(c.state, "ctl.sock")); err == nil {
			return log, stop
		}
		if time.Now().After(deadline) {
			stop()
			c.t.Fatalf("awcp-ctl serve %v did not start:\n%s", args, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopDaemon ends an `awcp-ctl serve` a background export started.
func (c *ctl) stopDaemon() { endDaemons(c.state) }

// stopDaemonHard kills the daemon as a crash would.
func (c *ctl) stopDaemonHard() {
	if c.signalDaemon(syscall.SIGKILL) == 0 {
		c.t.Fatal("no daemon to kill")
	}
}

func (c *ctl) signalDaemon(sig syscall.Signal) int { return signalDaemons(c.state, sig) }

// endDaemons ends the `awcp-ctl serve` of state dir state, if one runs
// (a background export starts it detached, so nothing else waits for it),
// and waits until it has: a daemon outliving its test kept running with
// its state dir removed beneath it. SIGTERM, then SIGKILL after 10 s.
func endDaemons(state string) {
	if signalDaemons(state, syscall.SIGTERM) == 0 {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if signalDaemons(state, 0) == 0 {
			return
		}
	}
	signalDaemons(state, syscall.SIGKILL)
}

// signalDaemons sends sig to each `awcp-ctl serve` of state dir state and
// returns how many there were.
func signalDaemons(state string, sig syscall.Signal) int {
	out, _ := exec.Command("pgrep", "-f", "awcp-ctl serve --state-dir "+state).Output()
	n := 0
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, sig)
			n++
		}
	}
	return n
}

// tree records every path of dir: kind, mode, content hash or link target.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		}
		m[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameTree(t *testing.T, dir string, before map[string]string) {
	t.Helper()
	after := tree(t, dir)
	for p, d := range before {
		if after[p] != d {
			t.Errorf("%s changed: %q -> %q", p, d, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", p)
		}
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sampleWorkspace makes a small project with a script, a subdir and a .git.
func sampleWorkspace(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "project")
	writeFiles(t, dir, map[string]string{
		"README.md":        "# sample\n",
		"src/main.go":      "package main\n\nfunc main() {}\n",
		"src/old.go":       "package main\n",
		"scripts/build.sh": "#!/bin/sh\necho build\n",
		".git/HEAD":        "ref: refs/heads/main\n",
	})
	if err := os.Symlink("src/main.go", filepath.Join(dir, "main-link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

func waitGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !agent.GroupAlive(pgid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("agent process group %d still runs", pgid)
}

// statusClient asks executors for their status without keeping the
// connection: tests count the executor's descriptors.
var statusClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// storesAgree fails unless the executor's store holds every delegation of
// the delegator's in the same state.
func storesAgree(t *testing.T, c *ctl, x *executor) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := statusClient.Get(x.url + "/awcp/status")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Delegations []struct {
				ID    string `json:"delegationId"`
				State string `json:"state"`
			} `json:"delegations"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		executorSide := map[string]string{}
		for _, d := range st.Delegations {
			executorSide[d.ID] = d.State
		}
		var disagree []string
		for _, d := range c.status() {
			if _, known := executorSide[d.ID]; !known && !d.accepted() {
				continue
			}
			if executorSide[d.ID] != d.State {
				disagree = append(disagree, fmt.Sprintf("%s: delegator %s, executor %q", d.ID, d.State, executorSide[d.ID]))
			}
		}
		if len(disagree) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stores disagree: %v", disagree)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nothingLeft checks what every fault test ends with: no agent process, no
// mount, an empty work root, and the two stores in agreement.
func nothingLeft(t *testing.T, c *ctl, x *executor, agentPGID int) {
	t.Helper()
	if agentPGID > 0 {
		waitGone(t, agentPGID)
	}
	noMountsLeft(t, x)
	waitWorkRootEmpty(t, x)
	storesAgree(t, c, x)
}

// parallel marks a test that shares nothing with the others — its ports
// come from the kernel, its homes, state dirs, work roots and namespaces
// are its own — and runs it beside them. Go runs every test that does
// not call it first, one at a time, then these together (-parallel).
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// alone marks a test that runs with no other beside it, and says in one
// line why: what it shares (the test process's environment, a fixed port
// or namespace name) or needs whole (the machine's CPU, for its timings).
// TestEachTestSaysHowItRuns holds every test to one of the two.
func alone(t *testing.T, why string) {
	t.Helper()
	if strings.TrimSpace(why) == "" {
		t.Fatal("alone: say why the test cannot run beside the others")
	}
}

// slow marks a test that takes a second or more here: `make test-short`
// (go test -short), the loop while working, leaves it out; `make test`
// and CI run every test.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a second or more: make test runs it")
	}
}

// writeShared writes data to path, a file in a directory the tests share
// (the npm cache of nodeModules): into a file of its own beside it, then
// renamed over path, so that a test running an agent from path meanwhile
// reads the whole file, never one being written (node read an empty
// script and exited before answering initialize).
func writeShared(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".write-*")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), perm)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		t.Fatal(err)
	}
}
