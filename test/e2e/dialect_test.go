package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDialectsUnderTheSandbox: both dialects (the specification's seed,
// and the reference's head), over both transports, to an executor under
// its default sandbox — a root and a user of its own, and the suite's
// grant of its temporary directories, which holds the work root — of a
// directory of mode 0700 (as a reference delegator packs it, its folder's
// mode with it). Each completes, the agent's line in the file. The head
// archive failed so once ("bind …/workspace: permission denied").
func TestDialectsUnderTheSandbox(t *testing.T) {
	parallel(t)
	x := startExecutor(t, `echo "agent was here" >> notes.txt`)
	c := newCtl(t)
	for _, dialect := range []string{"seed", "head"} {
		for _, transport := range []string{"archive", "sshfs"} {
			ws := filepath.Join(t.TempDir(), "project")
			writeFiles(t, ws, map[string]string{"notes.txt": "first\n"})
			os.Chmod(ws, 0o700)
			r := c.run("export", ws, "--peer", x.url, "--prompt", "add a line", "--dialect", dialect, "--transport", transport, "--ssh-listen", "127.0.0.1:0")
			b, _ := os.ReadFile(filepath.Join(ws, "notes.txt"))
			if r.code != 0 || string(b) != "first\nagent was here\n" || !strings.Contains(r.stdout, "completed") {
				t.Errorf("%s over %s: exit %d, notes.txt %q\n%s%s", dialect, transport, r.code, b, r.stdout, r.stderr)
			}
		}
	}
}
