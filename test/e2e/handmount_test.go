package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/internal/mountinfo"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/sshd"
	"github.com/awcp/awcp/sshd/sshdtest"
)

// TestMountByHand runs `awcp-fs mount --start START.json` against a real
// SSH server and ends it with SIGINT, then with `awcp-fs umount`.
func TestMountByHand(t *testing.T) {
	parallel(t)
	state, dir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi\n"), 0o644)
	auth, err := sshd.LoadAuthority(state)
	if err != nil {
		t.Fatal(err)
	}
	const id = "dlg_byhand"
	srv, err := sshd.New(sshd.Options{Authority: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Grant(id, sshd.Export{Dir: dir}, time.Time{})
	addr := sshdtest.Serve(t, srv)

	expires := time.Now().Add(time.Hour)
	cred, err := auth.Issue(id, expires)
	if err != nil {
		t.Fatal(err)
	}
	start := control.Start{
		BaseMessage: control.BaseMessage{Version: "1", Type: control.TypeStart, DelegationID: id},
		Lease:       control.StartLease{ExpiresAt: control.Timestamp(expires), AccessMode: "rw"},
		WorkDir: control.WorkDirInfo{Transport: "sshfs",
			Endpoint:      &control.Endpoint{Host: "127.0.0.1", Port: addr.Port, User: id},
			ExportLocator: "awcp/" + id,
			Credential:    &control.Credential{PrivateKey: cred.PrivateKey, Certificate: cred.Certificate},
			Options:       map[string]string{control.HostKeyOption: auth.HostPublicKey()}},
	}
	startFile := filepath.Join(t.TempDir(), "START.json")
	data, _ := json.Marshal(start)
	os.WriteFile(startFile, data, 0o600)

	for _, end := range []string{"SIGINT", "umount"} {
		t.Run(end, func(t *testing.T) {
			mnt := t.TempDir()
			cmd := exec.Command(filepath.Join(binDir, "awcp-fs"), "mount", "--start", startFile, mnt)
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || !strings.Contains(line, "mounted") {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("no mount: %q %v", line, err)
			}
			go io.Copy(io.Discard, stdout)
			if !mountinfo.IsMountpoint(mnt) {
				t.Fatal("not a mount point")
			}
			if b, err := os.ReadFile(filepath.Join(mnt, "hello.txt")); err != nil || string(b) != "hi\n" {
				t.Fatalf("read: %q %v", b, err)
			}
			os.WriteFile(filepath.Join(mnt, end+".txt"), []byte(end), 0o644)
			if b := landed(filepath.Join(dir, end+".txt"), end); b != end {
				t.Fatalf("write did not reach the delegator: %q", b)
			}
			if end == "SIGINT" {
				cmd.Process.Signal(syscall.SIGINT)
			} else if out, err := exec.Command(filepath.Join(binDir, "awcp-fs"), "umount", mnt).CombinedOutput(); err != nil {
				t.Fatalf("umount: %v %s", err, out)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("awcp-fs mount exited with %v", err)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatal("awcp-fs mount did not end")
			}
			if mountinfo.IsMountpoint(mnt) {
				t.Fatal("still mounted")
			}
		})
	}
}

// TestLendByHand follows the README's way to mount by hand: `awcp-ctl
// lend` writes a START and serves the live mount; `awcp-fs mount --start`
// mounts it; writes land in the lent directory and are audited; Ctrl-C on
// lend ends the lease, and the mount with it.
func TestLendByHand(t *testing.T) {
	slow(t)
	parallel(t)
	c := newCtl(t)
	ws := sampleWorkspace(t)
	startFile := filepath.Join(t.TempDir(), "START.json")
	lend := c.start("lend", ws, "--start-file", startFile, "--ttl", "10m", "--ssh-listen", "127.0.0.1:0")
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if fi, err := os.Stat(startFile); err == nil && fi.Size() > 0 {
			if fi.Mode().Perm() != 0o600 {
				t.Fatalf("START written with mode %v", fi.Mode().Perm())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lend wrote no START:\n%s", lend.stderr.String())
		}
	}
	mnt := t.TempDir()
	mount := exec.Command(filepath.Join(binDir, "awcp-fs"), "mount", "--start", startFile, mnt)
	stdout, _ := mount.StdoutPipe()
	var mountErr strings.Builder
	mount.Stderr = &mountErr
	if err := mount.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { mount.Process.Kill(); mount.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.Contains(line, "mounted") {
		t.Fatalf("no mount: %q %v\n%s\nlend:\n%s", line, err, mountErr.String(), lend.stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	if b, err := os.ReadFile(filepath.Join(mnt, "README.md")); err != nil || string(b) != "# sample\n" {
		t.Fatalf("read through the mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "by-hand.txt"), []byte("hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b := landed(filepath.Join(ws, "by-hand.txt"), "hand\n"); b != "hand\n" {
		t.Fatalf("the write did not reach the lent directory: %q", b)
	}
	if d := c.status(); len(d) != 1 || d[0].State != "running" {
		t.Fatalf("status while lent: %+v", d)
	}

	lend.Process.Signal(syscall.SIGINT)
	lend.Wait()
	done := make(chan error, 1)
	go func() { done <- mount.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("awcp-fs mount did not end with the lease:\n%s", mountErr.String())
	}
	if mountinfo.IsMountpoint(mnt) {
		t.Fatal("still mounted after the lease ended")
	}
	out := lend.stdout.String()
	if !strings.Contains(out, "A by-hand.txt") || !strings.Contains(out, "audit: ") {
		t.Errorf("lend's report lacks the change and the audit:\n%s%s", out, lend.stderr.String())
	}
	if d := c.status(); len(d) != 1 || d[0].State != "cancelled" {
		t.Errorf("status after Ctrl-C: %+v", d)
	}
}

// landed is what the file at p holds once it holds want, or 5 s on:
// close(2) on a live mount does not wait for the file's writes, which
// land on the delegator's side a round trip or so later.
func landed(p, want string) string {
	var b []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, _ = os.ReadFile(p); string(b) == want {
			break
		}
	}
	return string(b)
}
