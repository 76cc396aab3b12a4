package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSetidProgramInAGrant is the agent of a read-write grant that holds a
// setuid-root program (a tool the operator keeps there): the kernel clears
// the bit on write(2), not on a store through a shared mapping, so the
// agent rewrites the program through mmap and the bit stays — for another
// user of the host to run its bytes as root. awcp-fs refuses to serve with
// such a grant, naming the file and what to do; doctor fails it the same
// way; the program is untouched. (Where awcp-fs serves anyway, the test
// delegates the attack and reports what it did.)
func TestSetidProgramInAGrant(t *testing.T) {
	parallel(t)
	grant := t.TempDir()
	tool := filepath.Join(grant, "bin", "tool")
	os.MkdirAll(filepath.Dir(tool), 0o755)
	if err := copyFile("/usr/bin/id", tool, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(tool, 0o4755); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(tool)
	agent := `/usr/bin/python3 -c 'import mmap, os
f = os.open("` + tool + `", os.O_RDWR)
m = mmap.mmap(f, 0)
s = b"#!/bin/sh\necho pwned\n"
m[0:len(s)] = s
m.flush()'; echo rewrote`
	dir := t.TempDir()
	args := []string{"serve", "--state-dir", filepath.Join(dir, "state"), "--work-root", filepath.Join(dir, "work"),
		"--agent-cmd", agent, "--plain-http", "--transports", "archive", "--listen", "127.0.0.1:0", "--sandbox-allow", grant + ":rw"}
	cmd := exec.Command(filepath.Join(binDir, "awcp-fs"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err == nil {
		// It serves: delegate, as the attacker would.
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		_, url, _ := strings.Cut(strings.TrimSpace(line), "listening on ")
		url, _, _ = strings.Cut(url, ",")
		url = "http://" + strings.TrimPrefix(url, "https://")
		ws := t.TempDir()
		os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\n"), 0o644)
		c := newCtl(t)
		r := c.run("export", ws, "--peer", url, "--prompt", "p", "--transport", "archive")
		fi, _ := os.Stat(tool)
		now, _ := os.ReadFile(tool)
		t.Fatalf("awcp-fs served with a setuid-root program in an :rw grant; the agent (exit %d) left it %v holding %q\n%s%s",
			r.code, fi.Mode(), now[:min(len(now), 24)], r.stdout, r.stderr)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("awcp-fs neither served nor exited")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("awcp-fs serve with a set-id program in an :rw grant: %v", err)
	}
	for _, want := range []string{tool, "set-id", grant + ":ro", "chmod u-s,g-s"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, stderr.String())
		}
	}
	doctor := exec.Command(filepath.Join(binDir, "awcp-fs"), "doctor", "--state-dir", filepath.Join(dir, "state"),
		"--work-root", filepath.Join(dir, "work"), "--agent-cmd", "true", "--sandbox-allow", grant+":rw")
	dout, derr := doctor.CombinedOutput()
	if derr == nil || !strings.Contains(string(dout), "sandbox grant") || !strings.Contains(string(dout), tool) {
		t.Errorf("doctor with a set-id program in an :rw grant: %v\n%s", derr, dout)
	}
	if after, _ := os.ReadFile(tool); !bytes.Equal(after, before) {
		t.Errorf("the program changed")
	}
	var st syscall.Stat_t
	if syscall.Stat(tool, &st) != nil || st.Mode&syscall.S_ISUID == 0 {
		t.Errorf("the program's own bit was changed: awcp-fs refuses, it does not rewrite the operator's files")
	}
	// Read-only, the same grant is served.
	ro := exec.Command(filepath.Join(binDir, "awcp-fs"), "doctor", "--state-dir", filepath.Join(dir, "state"),
		"--work-root", filepath.Join(dir, "work"), "--agent-cmd", "true", "--sandbox-allow", grant+":ro")
	if rout, _ := ro.CombinedOutput(); strings.Contains(string(rout), "set-id") {
		t.Errorf("doctor refused a read-only grant of set-id programs:\n%s", rout)
	}
}
