//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoSetidThroughAGrant is the attacker of a read-write grant: the
// executor runs as root and lends a root-owned directory (idmapped, so
// what the agent makes there is root's). The agent tries every way it
// has to leave a set-id file or directory there — a setuid copy of a
// program for another local user to run as root, a setgid one, a setgid
// directory of group 0 open to all — by chmod, fchmod, fchmodat, creating
// opens, install, mkdir -m, mknod, from the shell, Python and Perl; each
// is refused, and nothing in the grant carries the bit. Unconfined, the
// same script leaves set-id files: the refusals are the sandbox's.
func TestNoSetidThroughAGrant(t *testing.T) {
	slow(t)
	if !CanIsolate() {
		t.Fatal("not root: the agent's idmapped grant cannot be tested here")
	}
	work, tmp := t.TempDir(), t.TempDir()
	grant := t.TempDir() // root's, as /srv/tools is
	agent := &User{UID: 2_000_000_778, GID: 2_000_000_778, Home: tmp}
	for _, d := range []string{work, tmp} {
		if err := os.Chown(d, int(agent.UID), int(agent.GID)); err != nil {
			t.Fatal(err)
		}
	}
	script := `
cd "$GRANT" || exit 9
try() { if "$@" >/dev/null 2>&1; then echo "ok $1"; else echo "refused $1"; fi; }
cp /usr/bin/id id-u
cp /usr/bin/id id-g
try chmod 4755 id-u
try chmod u+s id-u
try chmod 2755 id-g
try chmod g+s id-g
try install -m 4755 /usr/bin/id install-u
try install -m 2755 /usr/bin/id install-g
mkdir open-dir && chmod 0777 open-dir
try chmod 2777 open-dir
try mkdir -m 2777 mkdir-g
try python3 -c 'import os; os.chmod("id-u", 0o4755)'
try python3 -c 'import os; fd = os.open("id-u", os.O_RDONLY); os.fchmod(fd, 0o4755)'
try python3 -c 'import os; os.close(os.open("open-u", os.O_CREAT|os.O_WRONLY, 0o4755))'
try python3 -c 'import os; os.mkdir("py-g", 0o2777)'
try python3 -c 'import os, stat; os.mknod("node-u", stat.S_IFREG|0o4755)'
try perl -e 'chmod(04755, "id-u") or exit 1'
try perl -e 'use Fcntl; sysopen(my $f, "perl-u", O_CREAT|O_WRONLY, 04755) or exit 1'
try python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); exit(libc.syscall(90, b"id-u", 0o4755) != 0)'
try python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); exit(libc.syscall(268, -100, b"id-u", 0o4755) != 0)'
try python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); exit(libc.syscall(452, -100, b"id-u", 0o4755, 0) != 0)'
try python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); exit(libc.syscall(0x40000000 | 90, b"id-u", 0o4755) != 0)'
try chmod 0755 id-u
`
	run := func(p *Policy) string {
		entries, _ := os.ReadDir(grant)
		for _, e := range entries {
			os.RemoveAll(filepath.Join(grant, e.Name()))
		}
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GRANT="+grant)
		if p != nil {
			if err := p.Wrap(cmd); err != nil {
				t.Fatal(err)
			}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the script: %v\n%s", err, out)
		}
		return string(out)
	}
	setid := func() []string {
		var found []string
		filepath.Walk(grant, func(path string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
				found = append(found, strings.TrimPrefix(path, grant+"/")+" "+fi.Mode().String())
			}
			return nil
		})
		return found
	}

	// Unconfined, each attempt succeeds (the x32 call, where the kernel
	// has no x32, is refused by the kernel, and is there for kernels
	// that have it).
	free := run(nil)
	if n := strings.Count(free, "ok "); n < 19 || len(setid()) < 8 {
		t.Fatalf("unconfined, the script should have left set-id files; it left %v:\n%s", setid(), free)
	}
	p := &Policy{RW: []string{work, tmp, grant}, RO: System, Devices: Devices, Isolated: true, User: agent, Yours: []string{grant}}
	confined := run(p)
	if strings.Count(confined, "refused ") != 19 || !strings.Contains(confined, "ok chmod\n") {
		t.Errorf("confined: every set-id attempt should be refused, and a plain chmod pass:\n%s", confined)
	}
	if found := setid(); len(found) > 0 {
		t.Errorf("the confined agent left set-id files in its grant: %v", found)
	}
	// What it made there is root's (the grant's owner), as the operator
	// asked: the reason a set-id bit there would be root's.
	if fi, err := os.Stat(filepath.Join(grant, "id-u")); err != nil || fi.Sys() == nil {
		t.Fatalf("the agent's copy: %v", err)
	}
}
