//go:build linux

package sandbox

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A confined shell writes in its own directory and its temporary
// directory, reads the system, has no capability even as root, and is
// refused everything else: a neighbour's directory (read and write), a
// symlink it makes out of its own, the test's /proc/PID (not even there
// with a root of its own), a signal to the test process. With a root and
// a user of its own it is also refused what Landlock does not cover: a
// pathname socket outside its grants (connect(2)), the host's /tmp,
// /run and /dev/shm, the other mounts, and what only root may read. The
// same commands unconfined succeed, so the refusals are the sandbox's.
func TestConfinedShell(t *testing.T) {
	if ABI() == 0 {
		t.Fatal("this kernel has no Landlock: the executor's sandbox cannot be tested here")
	}
	own, tmp, other := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "secret"), []byte("the neighbour's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A careless daemon's socket, open to every user, in a directory the
	// shell is not granted, and the host's shared places.
	sock := filepath.Join(other, "daemon.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o777)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// A mount of the host's (another delegation's, say).
	mnt := filepath.Join(other, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	marker := fmt.Sprintf("awcp-sandbox-marker-%d", os.Getpid())
	for _, dir := range []string{"/tmp", "/dev/shm", "/run"} {
		os.WriteFile(filepath.Join(dir, marker), nil, 0o644)
		defer os.Remove(filepath.Join(dir, marker))
	}
	// A grant of the daemon's own, as ~/.claude is: only its owner may
	// read it.
	granted := t.TempDir()
	if err := os.WriteFile(filepath.Join(granted, "credentials"), []byte("key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A mount beneath the grant (another delegation's, were the grant
	// above the work root): not shown through the grant.
	beneath := filepath.Join(granted, "beneath")
	os.Mkdir(beneath, 0o755)
	if err := syscall.Mount("tmpfs", beneath, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(beneath, syscall.MNT_DETACH)
	os.WriteFile(filepath.Join(beneath, "theirs"), []byte("x"), 0o644)
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
try nc -U -z "$OTHER/daemon.sock"
try ls /tmp/$MARKER
try ls /dev/shm/$MARKER
try ls /run/$MARKER
try grep -q " $OTHER/mnt " /proc/self/mountinfo
try cat /etc/shadow
try sh -c 'test "$(id -un)" = awcp-agent'
try sh -c 'echo shared > /dev/shm/x && cat /dev/shm/x'
try sh -c 'echo x > /tmp/x && cat /tmp/x'
try cat "$GRANTED/credentials"
try sh -c 'echo session > "$GRANTED/session"'
try cat "$GRANTED/beneath/theirs"
`
	run := func(p *Policy) string {
		os.Remove(filepath.Join(own, "mine.txt"))
		os.Remove(filepath.Join(tmp, "t"))
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = own
		cmd.Env = append(os.Environ(), "OWN="+own, "TMP="+tmp, "OTHER="+other, "PARENT="+pid, "MARKER="+marker, "GRANTED="+granted)
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
	agent := &User{UID: 2_000_000_777, GID: 2_000_000_777, Home: tmp}
	// Landlock alone (an executor not running as root), then with a root
	// and a user of its own. Signals are refused either way (the
	// scoping); the test's /proc/PID — its command line, and, this kernel
	// shows, its environment — only with the root of its own, and what
	// Landlock does not cover only there.
	beyondLandlock := []string{"nc -U -z " + sock, "ls /tmp/" + marker, "ls /dev/shm/" + marker, "ls /run/" + marker,
		"grep -q  " + mnt + "  /proc/self/mountinfo", "cat /etc/shadow", "cat " + beneath + "/theirs"}
	for _, isolated := range []bool{false, true} {
		if isolated && !CanIsolate() {
			t.Fatal("not root: the root and user of its own cannot be tested here")
		}
		p := &Policy{RW: []string{own, tmp, granted}, RO: System, Devices: Devices, Strict: true, Isolated: isolated, Yours: []string{granted}}
		if isolated {
			// The agent's user; the directories it works in are its own.
			p.User = agent
			for _, d := range []string{own, tmp} {
				if err := os.Chown(d, int(agent.UID), int(agent.GID)); err != nil {
					t.Fatal(err)
				}
			}
		}
		confined := run(p)
		wants := []string{"ok sh -c echo mine", "ok sh -c echo tmp", "ok cat /etc/hostname",
			"refused cat " + other + "/secret", "refused sh -c echo x > \"$OTHER/written\"", "refused cat escape/secret",
			"refused kill -0 " + pid, "refused sh -c echo x > /etc/awcp-sandbox-test", "ok grep -q CapEff:.0000000000000000",
			"ok sh -c echo shared > /dev/shm/x", "ok cat " + granted + "/credentials", "ok sh -c echo session > \"$GRANTED/session\""}
		if isolated {
			wants = append(wants, "ok sh -c echo x > /tmp/x", "refused cat /proc/"+pid+"/cmdline", "refused cat /proc/"+pid+"/environ", "ok sh -c test \"$(id -un)\" = awcp-agent")
			for _, b := range beyondLandlock {
				wants = append(wants, "refused "+b)
			}
		} else {
			// What Landlock alone leaves open, so that the refusals above
			// are the root's and the user's.
			for _, b := range beyondLandlock {
				wants = append(wants, "ok "+b)
			}
		}
		for _, want := range wants {
			if !strings.Contains(confined, want) {
				t.Errorf("confined (a root of its own %v): no %q in\n%s", isolated, want, confined)
			}
		}
		if _, err := os.Stat(filepath.Join(other, "written")); err == nil {
			t.Error("the confined shell wrote into its neighbour's directory")
		}
		if _, err := os.Stat("/dev/shm/x"); err == nil {
			os.Remove("/dev/shm/x")
			if isolated {
				t.Error("the confined shell's /dev/shm is the host's")
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(own, "mine.txt")); err != nil {
		t.Fatal(err)
	} else if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != agent.UID {
		t.Errorf("what the agent made is uid %d's, not its own (%d)", uid, agent.UID)
	}
	// What the agent wrote in the grant is the daemon's, as if it had
	// written it.
	if fi, err := os.Stat(filepath.Join(granted, "session")); err != nil {
		t.Fatal(err)
	} else if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != uint32(os.Geteuid()) {
		t.Errorf("what the agent wrote in the daemon's grant is uid %d's, not the daemon's", uid)
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

// An executor whose root is bounded to the capabilities the sandbox needs
// — the systemd unit's CapabilityBoundingSet, a Kubernetes pod's — has no
// CAP_SETPCAP to empty a command's bounding set with. A command that runs
// as a user of its own still starts, and holds no capability; one that
// would run as root is refused, saying why.
func TestBoundedRootWithoutSetpcap(t *testing.T) {
	if !CanIsolate() {
		t.Fatal("not root: the root of its own cannot be tested here")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal("setpriv (util-linux) starts the executor's stand-in without CAP_SETPCAP")
	}
	run := func(user *User) (string, error) {
		work := t.TempDir()
		p := &Policy{RW: []string{work}, RO: System, Devices: Devices, Isolated: true, User: user}
		if user != nil {
			os.Chown(work, int(user.UID), int(user.GID))
		}
		cmd := exec.Command("/bin/sh", "-c", `id -u; grep -E '^Cap(Inh|Prm|Eff|Amb):' /proc/self/status`)
		cmd.Dir = work
		if err := p.Wrap(cmd); err != nil {
			t.Fatal(err)
		}
		// The helper started as the bounded daemon would be: the same
		// namespaces, without CAP_SETPCAP in its bounding set.
		cmd.Args = append([]string{setpriv, "--bounding-set=-setpcap", "--", cmd.Path}, cmd.Args[1:]...)
		cmd.Path = setpriv
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run(&User{UID: 2_000_000_781, GID: 2_000_000_781})
	if err != nil || !strings.HasPrefix(out, "2000000781\n") {
		t.Fatalf("a user's command under a bounded root: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if !strings.HasSuffix(line, "0000000000000000") {
			t.Errorf("the command holds a capability: %s", line)
		}
	}

	out, err = run(nil)
	if err == nil || !strings.Contains(out, "needs CAP_SETPCAP") {
		t.Errorf("a root command under a bounded root: %v\n%s\nwant it refused, naming CAP_SETPCAP", err, out)
	}
}

// Check builds a policy's sandbox around nothing: nil where it can be
// built, and the helper's own words where it cannot.
func TestCheck(t *testing.T) {
	if !CanIsolate() {
		t.Fatal("not root: the root of its own cannot be tested here")
	}
	if err := Check(Policy{RO: System, Devices: Devices, Isolated: true, User: &User{UID: 2_000_000_782, GID: 2_000_000_782}}); err != nil {
		t.Fatalf("a sandbox this machine can build: %v", err)
	}
	err := Check(Policy{RO: System, User: &User{UID: 2_000_000_782, GID: 2_000_000_782}})
	if err == nil || err.Error() != "a user of its own needs a root of its own" {
		t.Fatalf("a sandbox that cannot be built: %v, want the helper's reason alone", err)
	}
}
