package peercred

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOtherUserIsRefused: a socket and its directory left open to all
// (mode 0777), served through SameUser: this user's process is answered;
// another user's (nobody, in a process of its own, the test binary run as
// it) connects and is closed before a byte of the service reaches it.
func TestOtherUserIsRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root to start a process as another user: run it as root (CI does)")
	}
	dir := t.TempDir()
	for d := dir; strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) { // the test's own, never the temp dir itself
		os.Chmod(d, 0o777)
	}
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o777)
	served := SameUser(ln)
	go func() {
		for {
			c, err := served.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "served\n")
			c.Close()
		}
	}()

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(c).ReadString('\n'); line != "served\n" {
		t.Errorf("this user's process: %q", line)
	}
	c.Close()

	bin := filepath.Join(dir, "peercred.test")
	self, _ := os.ReadFile(os.Args[0])
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperConnect$")
	cmd.Env = []string{"PEERCRED_SOCK=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "connected; read: \"\" EOF") {
		t.Errorf("nobody's process: %v\n%s", err, out)
	}
}

// TestHelperConnect is the other user's process of TestOtherUserIsRefused.
func TestHelperConnect(t *testing.T) {
	sock := os.Getenv("PEERCRED_SOCK")
	if sock == "" {
		t.Skip("a helper of TestOtherUserIsRefused")
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	t.Logf("connected; read: %q %v", line, err)
	os.Stdout.WriteString("connected; read: \"" + line + "\" " + errString(err) + "\n")
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
