//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// keyringProbe tries, from Python's ctypes, what an agent would do with
// the kernel's keyrings: read the key the daemon holds ($SERIAL), find it
// in the session keyring it inherited, name its session keyring, leave a
// key in its uid's user keyring for the next delegation's agent, and find
// one an earlier agent left there. One line each: "ok …" or "refused …".
const keyringProbe = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
ADD, REQ, CTL = int(os.environ["NR_ADD_KEY"]), int(os.environ["NR_REQUEST_KEY"]), int(os.environ["NR_KEYCTL"])
libc.syscall.restype = ctypes.c_long
def say(what, r):
    print(("ok " if r >= 0 else "refused ") + what + ("" if r >= 0 else " " + os.strerror(ctypes.get_errno())))
buf = ctypes.create_string_buffer(256)
say("read the daemon's key", libc.syscall(CTL, 11, int(os.environ["SERIAL"]), buf, 256))
print("read:", buf.value.decode(errors="replace"))
say("search the session keyring", libc.syscall(CTL, 10, -3, b"user", b"awcp-daemon-secret", 0))
say("name the session keyring", libc.syscall(CTL, 0, -3, 0))
say("leave a key in the user keyring", libc.syscall(ADD, b"user", b"left-behind", b"from-" + os.environ["WHO"].encode(), 16, -4))
say("find a key left in the user keyring", libc.syscall(REQ, b"user", b"left-behind", None, 0))
say("search the user keyring", libc.syscall(CTL, 10, -4, b"user", b"left-behind", 0))
`

// sessionKeyring is KEY_SPEC_SESSION_KEYRING (-3) as a system call's
// argument.
var sessionKeyring = func() uintptr { v := int64(unix.KEY_SPEC_SESSION_KEYRING); return uintptr(v) }()

// TestNoKeyringAcrossTheSandbox is the agent after the kernel's keyrings:
// the daemon (here, the test) holds a key in its session keyring; a
// confined agent reads it, searches for it or names that keyring not at
// all, and cannot leave a key in its uid's user keyring for a later
// delegation's agent of the same uid to find. Unconfined, the same probe
// reads the key: the refusals are the sandbox's.
func TestNoKeyringAcrossTheSandbox(t *testing.T) {
	if !CanIsolate() {
		t.Fatal("not root: the agent's sandbox cannot be tested here")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A session keyring of the test's own, on a thread that dies with
		// this goroutine (never unlocked): the commands below are forked
		// from it and inherit it, as an agent inherits the daemon's.
		runtime.LockOSThread()
		if _, _, errno := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 {
			t.Errorf("join a session keyring: %v", errno)
			return
		}
		typ, desc, secret := []byte("user\x00"), []byte("awcp-daemon-secret\x00"), []byte("s3cret-of-the-daemon")
		serial, _, errno := unix.RawSyscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
			uintptr(unsafe.Pointer(&secret[0])), uintptr(len(secret)), sessionKeyring, 0)
		if errno != 0 {
			t.Errorf("add the daemon's key: %v", errno)
			return
		}
		work, tmp := t.TempDir(), t.TempDir()
		agent := &User{UID: 2_000_000_783, GID: 2_000_000_783, Home: tmp}
		for _, d := range []string{work, tmp} {
			os.Chown(d, int(agent.UID), int(agent.GID))
		}
		run := func(who string, p *Policy) string {
			cmd := exec.Command("/usr/bin/python3", "-c", keyringProbe)
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "WHO="+who, fmt.Sprint("SERIAL=", serial), fmt.Sprint("NR_ADD_KEY=", unix.SYS_ADD_KEY),
				fmt.Sprint("NR_REQUEST_KEY=", unix.SYS_REQUEST_KEY), fmt.Sprint("NR_KEYCTL=", unix.SYS_KEYCTL))
			if p != nil {
				if err := p.Wrap(cmd); err != nil {
					t.Error(err)
				}
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("the probe as %s: %v\n%s", who, err, out)
			}
			return string(out)
		}
		if free := run("unconfined", nil); !strings.Contains(free, "read: s3cret-of-the-daemon") {
			t.Errorf("unconfined, the probe should read the daemon's key:\n%s", free)
		}
		policy := func() *Policy {
			return &Policy{RW: []string{work, tmp}, RO: System, Devices: Devices, Isolated: true, User: agent}
		}
		first, second := run("the first agent", policy()), run("the next agent", policy())
		for _, out := range []string{first, second} {
			if strings.Contains(out, "ok ") || strings.Contains(out, "s3cret") || strings.Contains(out, "from-") {
				t.Errorf("a confined agent reached a keyring:\n%s", out)
			}
			if strings.Count(out, "refused ") != 6 {
				t.Errorf("the probe did not run to its end:\n%s", out)
			}
		}
	}()
	<-done
}
