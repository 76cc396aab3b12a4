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
			if b, _ := os.ReadFile(filepath.Join(dir, end+".txt")); string(b) != end {
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
