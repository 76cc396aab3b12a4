package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func task(t *testing.T) Task {
	return Task{
		DelegationID: "dlg_test", Prompt: "fix it; rm -rf / $(reboot)", Description: "d",
		WorkDir: t.TempDir(), AccessMode: "rw", SummaryFile: filepath.Join(t.TempDir(), "summary"),
	}
}

func TestRunContract(t *testing.T) {
	tk := task(t)
	var lines []string
	res, err := Run(context.Background(), tk, Options{
		Command: `echo "one"; echo "$AWCP_PROMPT" > prompt.env; cat > prompt.stdin; pwd > cwd; echo two; echo oops >&2`,
		Line:    func(l string) { lines = append(lines, l) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Summary != "one\ntwo" || res.StderrTail != "oops" {
		t.Fatalf("result %+v", res)
	}
	if strings.Join(lines, "|") != "one|two" {
		t.Fatalf("lines %q", lines)
	}
	for _, f := range []string{"prompt.env", "prompt.stdin"} {
		b, _ := os.ReadFile(filepath.Join(tk.WorkDir, f))
		if strings.TrimSpace(string(b)) != tk.Prompt {
			t.Errorf("%s = %q: the prompt must arrive verbatim and never be run", f, b)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(tk.WorkDir, "cwd")); strings.TrimSpace(string(b)) != tk.WorkDir {
		t.Errorf("cwd %q", b)
	}
}

func TestSummaryFileWins(t *testing.T) {
	res, err := Run(context.Background(), task(t), Options{Command: `echo noise; echo "Added 3 tests." > "$AWCP_SUMMARY_FILE"`})
	if err != nil || res.Summary != "Added 3 tests." {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestNonZeroExit(t *testing.T) {
	res, err := Run(context.Background(), task(t), Options{Command: `echo compiling; echo "error: x.go:3: boom" >&2; exit 3`})
	if err != nil || res.ExitCode != 3 || !strings.Contains(res.StderrTail, "boom") {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestCancelKillsProcessGroup(t *testing.T) {
	tk := task(t)
	pidFile := filepath.Join(tk.WorkDir, "child.pid")
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan int, 1)
	errc := make(chan error, 1)
	go func() {
		// The child ignores SIGTERM: only the SIGKILL after the grace ends it.
		_, err := Run(ctx, tk, Options{
			Command:   `sh -c 'trap "" TERM; echo $$ > child.pid; while :; do sleep 0.1; done' & wait`,
			Started:   func(pid int) { started <- pid },
			KillGrace: 200 * time.Millisecond,
		})
		errc <- err
	}()
	pgid := <-started
	var childPID int
	for i := 0; i < 100 && childPID == 0; i++ {
		time.Sleep(20 * time.Millisecond)
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 1 {
			childPID = atoi(strings.TrimSpace(string(b)))
		}
	}
	if childPID == 0 {
		t.Fatal("child never started")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrKilled) {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	for i := 0; i < 50; i++ {
		if !GroupAlive(pgid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("child %d of group %d survived", childPID, pgid)
}

func TestBackgroundChildDoesNotHoldRun(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(context.Background(), task(t), Options{Command: `sleep 30 & echo started`})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run waited for a background child")
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}
