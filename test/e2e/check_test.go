package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// checkProbes is what an executor's agent plants as the owner's check
// (test.sh) to reach the owner through it: each line tries one way out
// and prints "leak NAME" where it got through. The owner's things it
// looks for are named in its environment when the test runs it
// unconfined, and written into it for the check (the agent knows where a
// developer's things are).
const checkProbes = `
leaks=""
leak() { leaks="$leaks $1"; }
env | grep -q AWCP_OWNER_SECRET && leak env
[ -n "$SSH_AUTH_SOCK" ] && leak ssh-agent-env
grep -rqs "owner-dotenv-$(echo secret)" . && leak dotenv
grep -rqs "owner-git-$(echo credential)" . && leak git-config
cat "$OWNER_HOME/.ssh/id_ed25519" >/dev/null 2>&1 && leak ssh-key
nc -U -z "$OWNER_STATE/ctl.sock" 2>/dev/null && leak ctl.sock
nc -U -z "$OWNER_AGENT" 2>/dev/null && leak ssh-agent
nc -z -w 2 127.0.0.1 "$OWNER_PORT" 2>/dev/null && leak tcp
echo x > "/dev/shm/$SHM_MARK" 2>/dev/null # seen, or not, on the host's side
ls /dev/shm/ 2>/dev/null | grep -q owner-shm && leak shm-read
ls /tmp 2>/dev/null | grep -q owner-tmp && leak tmp
/usr/bin/python3 -c "$KEYRING_PROBE" 2>/dev/null | grep -q owner-keyring-secret && leak keyring
echo "probes:${leaks:- none}"
`

// keyringProbe finds the key the owner's session holds ("owner-key", in
// the session keyring the owner's processes inherit) and prints it.
const keyringProbe = `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = int(os.environ.get("NR_KEYCTL", "250"))
key = libc.syscall(nr, 10, -3, b"user", b"owner-key", 0)
buf = ctypes.create_string_buffer(128)
if key >= 0 and libc.syscall(nr, 11, key, buf, 128) >= 0:
    print(buf.value.decode())`

// ownerKeyring gives this thread — locked to the test's goroutine, and
// ended with it — a session keyring of its own holding "owner-key", as a
// developer's session holds keys: every process the test starts from it,
// the owner's daemon among them, inherits it.
func ownerKeyring(t *testing.T) {
	runtime.LockOSThread() // never unlocked: the thread ends with the test
	if _, _, errno := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 {
		t.Fatalf("a session keyring for the owner: %v", errno)
	}
	typ, desc, secret := []byte("user\x00"), []byte("owner-key\x00"), []byte("owner-keyring-secret")
	session := int64(unix.KEY_SPEC_SESSION_KEYRING)
	if _, _, errno := unix.RawSyscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
		uintptr(unsafe.Pointer(&secret[0])), uintptr(len(secret)), uintptr(session), 0); errno != 0 {
		t.Fatalf("the owner's key: %v", errno)
	}
}

// TestCheckRunsAsTheExecutorsAgent is the attacker of compare --check:
// of three attempts at one task, two are honest (one passes the owner's
// go test, one fails it) and one (EVIL) rewrites the check's script to
// reach everything of the owner's it can: an exported secret, the hidden
// .env and the credential in .git/config, ~/.ssh, a key in the owner's
// session keyring, awcp-ctl's own socket
// (which would lend it the home directory), the owner's ssh-agent, a
// loopback port, the host's /dev/shm and /tmp. The owner's side runs
// twice, as root and as an unprivileged user (whose sandbox is built in
// a user namespace); each time every probe is refused, nothing reached
// the port or the host's /dev/shm, no delegation was made, and the honest
// verdicts stand. The same probes run unconfined as the owner reach
// every one of those: the refusals are the sandbox's.
func TestCheckRunsAsTheExecutorsAgent(t *testing.T) {
	slow(t)
	parallel(t)
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal("go is needed on PATH: the honest check is a go test")
	}
	for _, owner := range []string{"root", "unprivileged"} {
		t.Run(owner, func(t *testing.T) {
			// The two owners share nothing: homes, daemons, temporary
			// dirs (TMPDIR, where the checks' copies go) of their own.
			t.Parallel()
			checkAsOwner(t, owner == "root")
		})
	}
}

func checkAsOwner(t *testing.T, asRoot bool) {
	ownerKeyring(t)
	// The owner: a home, a state dir, a workspace, all theirs.
	base, err := os.MkdirTemp("", "awcp-check-owner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	home, ws, tmp := filepath.Join(base, "home"), filepath.Join(base, "ws"), filepath.Join(base, "tmp")
	c := &ctl{t: t, state: filepath.Join(home, ".awcp")}
	t.Cleanup(c.stopDaemon)
	uid, gid := 0, 0
	if !asRoot {
		uid, gid = 1_999_990_123, 1_999_990_123
		c.as = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		c.bin = filepath.Join(base, "awcp-ctl")
		if err := copyFile(filepath.Join(binDir, "awcp-ctl"), c.bin, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, home, map[string]string{".ssh/id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY----- the owner's\n"})
	writeFiles(t, ws, map[string]string{
		"go.mod":       "module example.com/calc\n\ngo 1.22\n",
		"calc.go":      "package calc\n\nfunc Add(a, b int) int { return a - b }\n",
		"calc_test.go": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"1+2 is not 3\")\n\t}\n}\n",
		"test.sh":      "export GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod\nexec go test ./...\n",
		".env":         "TOKEN=owner-dotenv-secret\n",
		".git/config":  "[remote \"origin\"]\n\turl = https://me:owner-git-credential@git.example/calc.git\n",
		".git/HEAD":    "ref: refs/heads/main\n",
	})
	os.Chmod(filepath.Join(home, ".ssh/id_ed25519"), 0o600)
	if err := os.MkdirAll(c.state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	chownTree(t, base, uid, gid)

	// The owner's session: an ssh-agent, a service on a loopback port,
	// things in the host's shared /dev/shm and /tmp.
	agentSock := filepath.Join(home, "agent.sock")
	sshAgent := exec.Command("ssh-agent", "-D", "-a", agentSock)
	sshAgent.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	if err := sshAgent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sshAgent.Process.Kill(); sshAgent.Wait() })
	waitFor(t, agentSock)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var reached atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			conn.Close()
		}
	}()
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	mark := fmt.Sprintf("awcp-check-%d-%d", os.Getpid(), uid)
	for _, p := range []string{"/dev/shm/owner-shm-" + mark, "/tmp/owner-tmp-" + mark} {
		os.WriteFile(p, nil, 0o644)
		t.Cleanup(func() { os.Remove(p) })
	}
	t.Cleanup(func() { os.Remove("/dev/shm/" + mark) })
	c.env = []string{"HOME=" + home, "TMPDIR=" + tmp, "AWCP_OWNER_SECRET=hunter2", "SSH_AUTH_SOCK=" + agentSock}

	// The probes run by the owner as they are: every one reaches its
	// target, or the refusals below would prove nothing.
	probeEnv := []string{"OWNER_HOME=" + home, "OWNER_STATE=" + c.state, "OWNER_AGENT=" + agentSock, "OWNER_PORT=" + port, "SHM_MARK=" + mark,
		"KEYRING_PROBE=" + keyringProbe, fmt.Sprint("NR_KEYCTL=", unix.SYS_KEYCTL)}
	c.serve()
	free := exec.Command("/bin/sh", "-c", checkProbes)
	free.Dir = ws
	free.Env = append(append(os.Environ(), c.env...), probeEnv...)
	free.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	out, err := free.CombinedOutput()
	if want := "probes: env ssh-agent-env dotenv git-config ssh-key ctl.sock ssh-agent tcp shm-read tmp keyring\n"; err != nil || string(out) != want {
		t.Fatalf("unconfined, the probes should reach everything: %v\n%s\nwant %s", err, out, want)
	}
	if _, err := os.Stat("/dev/shm/" + mark); err != nil || reached.Load() == 0 {
		t.Fatalf("unconfined, the probes should have written into the host's /dev/shm (%v) and reached the port", err)
	}
	os.Remove("/dev/shm/" + mark)
	reached.Store(0)

	// EVIL's agent writes the probes, with the owner's places in them,
	// as the check; the honest ones fix the code or break it further.
	evil := "export OWNER_HOME=" + home + " OWNER_STATE=" + c.state + " OWNER_AGENT=" + agentSock + " OWNER_PORT=" + port + " SHM_MARK=" + mark +
		fmt.Sprint(" NR_KEYCTL=", unix.SYS_KEYCTL) + "\nKEYRING_PROBE='" + keyringProbe + "'\n" + checkProbes
	agents := []string{
		`sed -i 's/a - b/a + b/' calc.go; echo "fixed Add"`,
		`sed -i 's/a - b/a * b/' calc.go; echo "multiplied"`,
		`cat > test.sh <<'PROBES'` + "\n" + evil + "PROBES\n" + `echo "improved the tests"`,
	}
	var args []string
	for _, a := range agents {
		x := startExecutor(t, a, "--transports", "archive")
		args = append(args, "--peer", x.url)
	}
	r := c.run(append([]string{"export", ws, "--prompt", "fix Add", "--transport", "archive"}, args...)...)
	if r.code != 0 {
		t.Fatalf("export to three peers: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	before := len(c.status())
	group := strings.Fields(r.stdout[strings.Index(r.stdout, "grp-"):])[0]

	r = c.run("compare", group, "--check", "sh test.sh", "--json")
	if r.code != 0 {
		t.Fatalf("compare --check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var cmp struct {
		Attempts []struct {
			Summary string `json:"summary"`
			Check   *struct {
				Passed bool   `json:"passed"`
				Exit   int    `json:"exit"`
				Output string `json:"output"`
			} `json:"check"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &cmp); err != nil {
		t.Fatalf("compare --json: %v\n%s", err, r.stdout)
	}
	verdicts := map[string]string{}
	for _, a := range cmp.Attempts {
		if a.Check == nil {
			t.Fatalf("attempt %q was not checked:\n%s", a.Summary, r.stdout)
		}
		verdicts[a.Summary] = fmt.Sprintf("passed=%v %s", a.Check.Passed, a.Check.Output)
	}
	if v := verdicts["fixed Add"]; !strings.HasPrefix(v, "passed=true") || !strings.Contains(v, "ok  \texample.com/calc") {
		t.Errorf("the honest fix's go test: %s", v)
	}
	if v := verdicts["multiplied"]; !strings.HasPrefix(v, "passed=false") || !strings.Contains(v, "1+2 is not 3") {
		t.Errorf("the broken attempt's go test: %s", v)
	}
	if v := verdicts["improved the tests"]; !strings.Contains(v, "probes: none") {
		t.Errorf("the attacker's check reached the owner's things: %s", v)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the check reached the owner's loopback port %d times", n)
	}
	if _, err := os.Stat("/dev/shm/" + mark); err == nil {
		t.Error("the check wrote into the host's /dev/shm")
	}
	if after := len(c.status()); after != before {
		t.Errorf("the check made delegations through the owner's socket: %d, then %d", before, after)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "awcp-check-*", "tree"))
	inTmp, _ := filepath.Glob(filepath.Join(os.TempDir(), "awcp-check-*", "tree")) // none made there: TMPDIR is the owner's
	if left = append(left, inTmp...); len(left) > 0 {
		t.Errorf("the checks' copies were left: %v", left)
	}
	if asRoot {
		return
	}

	// Where no sandbox can be had — this owner may make no user
	// namespace (noUserNSEnv) — the check is refused with the reason,
	// and never run with less.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(base, "e2e-wrapper")
	if err := copyFile(self, wrapper, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(home, "check-ran")
	refused := &ctl{t: t, state: c.state, as: c.as, bin: wrapper, env: append(c.env, noUserNSEnv+"=1")}
	r = refused.run(append([]string{c.bin}, "compare", group, "--check", "touch "+marker)...)
	if r.code == 0 || !strings.Contains(r.stderr, "no sandbox for the executor's code here") || !strings.Contains(r.stderr, "user namespace") {
		t.Errorf("compare --check where no user namespace can be made: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the check ran though no sandbox could be had")
	}
}

// chownTree gives dir and everything in it to uid and gid.
func chownTree(t *testing.T, dir string, uid, gid int) {
	t.Helper()
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until path exists.
func waitFor(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}
