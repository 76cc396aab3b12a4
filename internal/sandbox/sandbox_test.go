package sandbox

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A confined shell writes in its own directory and its temporary
// directory, reads the system, has no capability even as root, and is
// refused everything else: a
// neighbour's directory (read and write), a symlink it makes out of its
// own, the test's /proc/PID (not even there with a /proc of its own),
// a signal to the test process. The same commands unconfined succeed,
// so the refusals are the sandbox's.
func TestConfinedShell(t *testing.T) {
	if ABI() == 0 {
		t.Fatal("this kernel has no Landlock: the executor's sandbox cannot be tested here")
	}
	own, tmp, other := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "secret"), []byte("the neighbour's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	script := `
cd "$OWN" || exit 9
try() { if "$@" >/dev/null 2>&1; then echo "ok $*"; else echo "refused $*"; fi; }
try sh -c 'echo mine > mine.txt'
try sh -c 'echo tmp > "$TMP/t"'
try cat /etc/hostname
try cat "$OTHER/secret"
try sh -c 'echo x > "$OTHER/written"'
try ln -s "$OTHER" escape
try cat escape/secret
try cat /proc/$PARENT/cmdline
try cat /proc/$PARENT/environ
try kill -0 $PARENT
try grep -q "CapEff:.0000000000000000" /proc/self/status
try sh -c 'echo x > /etc/awcp-sandbox-test'
`
	run := func(p *Policy) string {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = append(os.Environ(), "OWN="+own, "TMP="+tmp, "OTHER="+other, "PARENT="+pid)
		if p != nil {
			if err := p.Wrap(cmd); err != nil {
				t.Fatal(err)
			}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the script: %v\n%s", err, out)
		}
		os.Remove(filepath.Join(own, "escape"))
		os.Remove(filepath.Join(other, "written"))
		os.Remove("/etc/awcp-sandbox-test")
		return string(out)
	}
	// Landlock alone (an executor not running as root), then with a PID
	// namespace and /proc of its own. Signals are refused either way (the
	// scoping); the test's /proc/PID — its command line, and, this kernel
	// shows, its environment — only with the namespace.
	for _, private := range []bool{false, true} {
		if private && !CanPrivateProc() {
			t.Fatal("not root: the private /proc cannot be tested here")
		}
		p := &Policy{RW: []string{own, tmp}, RO: System, Devices: Devices, Strict: true, PrivateProc: private}
		confined := run(p)
		wants := []string{"ok sh -c echo mine", "ok sh -c echo tmp", "ok cat /etc/hostname",
			"refused cat " + other + "/secret", "refused sh -c echo x > \"$OTHER/written\"", "refused cat escape/secret",
			"refused kill -0 " + pid, "refused sh -c echo x > /etc/awcp-sandbox-test", "ok grep -q CapEff:.0000000000000000"}
		if private {
			wants = append(wants, "refused cat /proc/"+pid+"/cmdline", "refused cat /proc/"+pid+"/environ")
		}
		for _, want := range wants {
			if !strings.Contains(confined, want) {
				t.Errorf("confined (private /proc %v): no %q in\n%s", private, want, confined)
			}
		}
		if _, err := os.Stat(filepath.Join(other, "written")); err == nil {
			t.Error("the confined shell wrote into its neighbour's directory")
		}
	}
	free := run(nil)
	if os.Geteuid() == 0 && !strings.Contains(free, "refused grep -q CapEff:.0000000000000000") {
		t.Errorf("unconfined, as root, the shell should have capabilities:\n%s", free)
	}
	for _, want := range []string{"ok cat " + other + "/secret", "ok cat escape/secret", "ok cat /proc/" + pid + "/environ", "ok kill -0 " + pid} {
		if !strings.Contains(free, want) {
			t.Errorf("unconfined: no %q in\n%s", want, free)
		}
	}
}

// With ConnectPorts, a confined command connects over TCP to those ports
// only.
func TestConnectPorts(t *testing.T) {
	open, closed := listen(t), listen(t)
	script := `try() { if bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; then echo "ok $1"; else echo "refused $1"; fi; }; try $OPEN; try $CLOSED`
	run := func(p *Policy) string {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = append(os.Environ(), "OPEN="+strconv.Itoa(open), "CLOSED="+strconv.Itoa(closed))
		if p != nil {
			if err := p.Wrap(cmd); err != nil {
				t.Fatal(err)
			}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return string(out)
	}
	p := &Policy{RO: System, Devices: Devices, Strict: true, Net: true, ConnectPorts: []uint16{uint16(open)}}
	if got, want := run(p), fmt.Sprintf("ok %d\nrefused %d\n", open, closed); got != want {
		t.Errorf("confined: %q, want %q", got, want)
	}
	if got, want := run(nil), fmt.Sprintf("ok %d\nok %d\n", open, closed); got != want {
		t.Errorf("unconfined: %q, want %q", got, want)
	}
}

// listen is a loopback TCP port that accepts, until the test ends.
func listen(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// --sandbox-allow's values: read-only unless :rw, ~/ for the home, an
// absolute path otherwise.
func TestParseAllow(t *testing.T) {
	home, _ := os.UserHomeDir()
	for in, want := range map[string]struct {
		path string
		rw   bool
	}{
		"/opt/x": {"/opt/x", false}, "/opt/x:ro": {"/opt/x", false}, "/opt/x:rw": {"/opt/x", true},
		"~/.claude:rw": {filepath.Join(home, ".claude"), true}, "/a/b:c": {"/a/b:c", false},
	} {
		path, rw, err := ParseAllow(in)
		if err != nil || path != want.path || rw != want.rw {
			t.Errorf("%q: %q %v %v, want %q %v", in, path, rw, err, want.path, want.rw)
		}
	}
	if _, _, err := ParseAllow("relative/dir"); err == nil {
		t.Error("a relative path was taken")
	}
}
