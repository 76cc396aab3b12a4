package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAgentInheritsNoDescriptorAndDeadExecutorFails: an agent started on a
// live mount holds stdin, stdout and stderr and nothing else — no FUSE
// descriptor, of its own mount or another delegation's. So when awcp-fs is
// killed, calls on its mount fail at once (ENOTCONN) rather than hang on a
// descriptor the agent keeps, the delegator fails the delegation once the
// executor has been unreachable for the reconnect bound, and a restarted
// awcp-fs cleans up.
func TestAgentInheritsNoDescriptorAndDeadExecutorFails(t *testing.T) {
	slow(t)
	alone(t, "bounds, in wall-clock seconds, how soon a dead executor is seen")
	pids := t.TempDir()
	x := startExecutor(t, `echo $$ > `+pids+`/$AWCP_DELEGATION_ID; exec sleep 300`)
	c := newCtl(t)
	// Two delegations: the second agent starts while the first mount lives.
	var exports []*background
	for range 2 {
		exports = append(exports, c.start("export", sampleWorkspace(t), "--peer", x.url, "--prompt", "p",
			"--ssh-listen", "127.0.0.1:0", "--reconnect-bound", "3s"))
	}
	var agents []int
	deadline := time.Now().Add(20 * time.Second)
	for len(agents) < 2 {
		ents, _ := os.ReadDir(pids)
		if len(ents) == 2 {
			// The pid an agent writes is its sandbox's PID namespace's:
			// found here by its environment.
			for _, e := range ents {
				if pid := agentPID(e.Name()); pid != 0 {
					agents = append(agents, pid)
				}
			}
			if len(agents) < 2 {
				agents = agents[:0]
				time.Sleep(50 * time.Millisecond)
				continue
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agents did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		for _, pid := range agents {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	for _, pid := range agents {
		fds, err := os.ReadDir("/proc/" + itoa(pid) + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		var held []string
		for _, fd := range fds {
			target, _ := os.Readlink("/proc/" + itoa(pid) + "/fd/" + fd.Name())
			held = append(held, fd.Name()+" -> "+target)
		}
		sort.Strings(held)
		if len(fds) != 3 || fds[0].Name() != "0" || fds[1].Name() != "1" || fds[2].Name() != "2" {
			t.Errorf("agent %d holds descriptors beyond stdin, stdout and stderr:\n%s", pid, strings.Join(held, "\n"))
		}
	}
	mounts := mountsUnder(t, x)
	if len(mounts) != 2 {
		t.Fatalf("mounts: %v", mounts)
	}

	x.cmd.Process.Kill()
	x.cmd.Wait()
	start := time.Now()
	for _, mp := range mounts {
		// A name never looked up: the kernel must ask the dead daemon.
		_, err := os.Stat(filepath.Join(mp, "never-seen"))
		if !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("stat in the mount of a dead awcp-fs: %v, want ENOTCONN", err)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("calls on the dead mounts took %s", took)
	}
	for _, exp := range exports {
		done := make(chan struct{})
		go func() { exp.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			exp.Process.Kill()
			<-done
			t.Fatalf("the delegator still waits 20 s after the executor died:\n%s", exp.stderr.String())
		}
		if exp.ProcessState.ExitCode() != 1 || !strings.Contains(exp.stderr.String(), "error TASK_FAILED") ||
			!strings.Contains(exp.stderr.String(), "unreachable") {
			t.Fatalf("export after the executor died: %d\n%s", exp.ProcessState.ExitCode(), exp.stderr.String())
		}
	}
	if took := time.Since(start); took > 12*time.Second {
		t.Errorf("the delegator saw the executor gone only after %s (bound 3 s)", took)
	}

	// Started again, awcp-fs stops the orphaned agents, unmounts and
	// removes the work dirs.
	x.start(t, x.addr)
	for _, pid := range agents {
		waitGone(t, pid)
	}
	noMountsLeft(t, x)
	waitWorkRootEmpty(t, x)
}

func itoa(n int) string { return strconv.Itoa(n) }

// A second awcp-fs serve on a state dir another one holds stops at once
// and says why, instead of waiting on the store's lock.
func TestSecondExecutorOnStateDirStops(t *testing.T) {
	alone(t, "bounds, in wall-clock seconds, how soon the second executor gives up")
	x := startExecutor(t, "true")
	state := x.args[slices.Index(x.args, "--state-dir")+1]
	cmd := exec.Command(filepath.Join(binDir, "awcp-fs"), "serve", "--state-dir", state,
		"--work-root", t.TempDir(), "--agent-cmd", "true", "--listen", "127.0.0.1:0")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil {
		t.Fatalf("a second awcp-fs on the same state dir ran: %s", out)
	}
	if took > 3*time.Second {
		t.Errorf("it took %s to give up", took.Round(time.Millisecond))
	}
	if !strings.Contains(string(out), "another process holds it") || strings.Contains(string(out), "goroutine ") {
		t.Errorf("its message: %s", out)
	}
}
