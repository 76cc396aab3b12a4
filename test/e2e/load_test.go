package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// openFDs counts a process's open file descriptors.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestConcurrentDelegations: 20 delegations at once, live mounts and
// archives mixed, on one executor with --max-concurrent 20. All complete;
// afterwards the executor holds no more descriptors or mounts than before,
// and both sides agree that every delegation completed.
func TestConcurrentDelegations(t *testing.T) {
	slow(t)
	parallel(t)
	const n = 20
	x := startExecutor(t, `for i in 1 2 3; do echo "step $i" >> log.txt; sleep 0.1; done; echo ok`,
		"--max-concurrent", strconv.Itoa(n))
	pid := x.cmd.Process.Pid
	time.Sleep(200 * time.Millisecond)
	fdsBefore := openFDs(t, pid)
	goroutinesBefore := goroutines(t, x)

	c := newCtl(t)
	var wg sync.WaitGroup
	results := make([]result, n)
	dirs := make([]string, n)
	for i := range n {
		dirs[i] = filepath.Join(t.TempDir(), fmt.Sprintf("ws%d", i))
		writeFiles(t, dirs[i], map[string]string{"README.md": fmt.Sprintf("ws %d\n", i)})
		transport := "archive"
		if i%2 == 0 {
			transport = "sshfs"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.runQuiet("export", dirs[i], "--peer", x.url, "--prompt", "load", "--transport", transport,
				"--ssh-listen", "127.0.0.1:0")
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("delegation %d: exit %d\n%s%s", i, r.code, r.stdout, r.stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(dirs[i], "log.txt")); string(b) != "step 1\nstep 2\nstep 3\n" {
			t.Errorf("delegation %d: log.txt = %q", i, b)
		}
	}
	noMountsLeft(t, x)
	waitWorkRootEmpty(t, x)
	// Each judged by the count that ended the wait, not a second reading:
	// asking for the goroutines is itself a request, whose connection's
	// goroutine a second reading may catch.
	deadline := time.Now().Add(10 * time.Second)
	after := openFDs(t, pid)
	for after > fdsBefore && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		after = openFDs(t, pid)
	}
	if after > fdsBefore {
		t.Errorf("executor descriptors: %d before, %d after", fdsBefore, after)
	}
	deadline = time.Now().Add(10 * time.Second)
	after = goroutines(t, x)
	for after > goroutinesBefore && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		after = goroutines(t, x)
	}
	if after > goroutinesBefore {
		t.Errorf("executor goroutines: %d before, %d after", goroutinesBefore, after)
		// The Go runtime writes every goroutine's stack to the log shown
		// below, and exits.
		defer dumpGoroutines(x)
	}

	// Both stores agree.
	resp, err := statusClient.Get(x.url + "/awcp/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Active      int `json:"active"`
		Delegations []struct {
			ID    string `json:"delegationId"`
			State string `json:"state"`
		} `json:"delegations"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	executorSide := map[string]string{}
	for _, d := range st.Delegations {
		executorSide[d.ID] = d.State
	}
	ds := c.status()
	if len(ds) != n || st.Active != 0 {
		t.Fatalf("%d delegations on the delegator's side, %d active on the executor's", len(ds), st.Active)
	}
	for _, d := range ds {
		if d.State != "completed" || executorSide[d.ID] != "completed" {
			t.Errorf("%s: delegator %s, executor %s", d.ID, d.State, executorSide[d.ID])
		}
	}
}

// dumpGoroutines has the executor write its goroutines' stacks to its
// log (SIGQUIT) and waits for it to exit.
func dumpGoroutines(x *executor) {
	x.cmd.Process.Signal(syscall.SIGQUIT)
	x.cmd.Wait()
}

func goroutines(t *testing.T, x *executor) int {
	t.Helper()
	resp, err := statusClient.Get(x.url + "/awcp/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Goroutines int `json:"goroutines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Goroutines
}
