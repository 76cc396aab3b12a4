package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLargeTreeWatched: a tree of 24,000 directories and 24,000 files —
// past the spec's archive limits, and past what a watch of a mark per
// directory holds — is lent over the live mount with admission's flags;
// the agent reads a file in the deepest directory, the owner rewrites it,
// and the agent sees the new text through the mount (the delegator, run as
// root, watches the export's whole file system with one mark: an exact
// watch at any size). The time the agent took to see it, and the
// delegator's memory after admission's and the watch's walks, are logged;
// `make bench` is where speed is judged.
func TestLargeTreeWatched(t *testing.T) {
	slow(t)
	parallel(t)
	ws := filepath.Join(t.TempDir(), "monorepo")
	deep := ws
	for i := range 30 {
		deep = filepath.Join(deep, fmt.Sprintf("level%02d", i))
	}
	dirs := []string{deep}
	for i := range 24000 - 30 {
		dirs = append(dirs, filepath.Join(ws, fmt.Sprintf("pkg%02d", i/1000), fmt.Sprintf("mod%03d", i%1000)))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range 1 {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.txt", f)), []byte("original\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	rel := strings.TrimPrefix(filepath.Join(deep, "f0.txt"), ws+"/")
	agent := `f='` + rel + `'; cat "$f" >/dev/null; echo ready > ready.txt; i=0
while [ $i -lt 3000 ]; do c=$(cat "$f"); case "$c" in changed*) echo "$c $(date +%s%N)" > seen.txt; exit 0;; esac; i=$((i+1)); sleep 0.005; done
echo never > seen.txt`
	made := time.Now()
	x := startExecutor(t, agent)
	c := newCtl(t)
	export := c.start("export", ws, "--peer", x.url, "--prompt", "watch", "--max-files", "200000", "--ssh-listen", "127.0.0.1:0")
	ready := filepath.Join(ws, "ready.txt")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never read the tree: %+v", c.status())
		}
	}
	rss := vmRSS(export.Process.Pid)
	readyAt := time.Now()
	written := time.Now().UnixNano()
	if err := os.WriteFile(filepath.Join(deep, "f0.txt"), []byte("changed "+strconv.FormatInt(written, 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := export.Wait(); err != nil {
		t.Fatalf("export: %v\n%s", err, export.stderr.String())
	}
	seen, _ := os.ReadFile(filepath.Join(ws, "seen.txt"))
	f := strings.Fields(string(seen))
	if len(f) != 3 || f[0] != "changed" {
		t.Fatalf("the agent never saw the owner's change in the deepest directory: %q", seen)
	}
	at, _ := strconv.ParseInt(f[2], 10, 64)
	t.Logf("24,000 directories, 24,000 files: the owner's change seen through the mount after %v; the delegator's RSS after the walks %s; export to the agent's first read %v, the agent's end to the export's %v",
		time.Duration(at-written).Round(time.Millisecond), rss, readyAt.Sub(made).Round(time.Millisecond), time.Since(time.Unix(0, at)).Round(time.Millisecond))
}

// vmRSS is a process's resident memory, as /proc says it.
func vmRSS(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
