package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentCachesAreTheDelegators: an agent's build caches live on
// across a delegator's delegations — its second delegation finds what its
// first left in $GOCACHE and $XDG_CACHE_HOME — and another delegator's
// agent finds none of it (what one agent puts in a cache, the next one's
// build takes on trust). A plain `git commit` works in every agent: it
// has an identity.
func TestAgentCachesAreTheDelegators(t *testing.T) {
	agentCmd := `set -u; w=$(pwd)
if [ -e "$XDG_CACHE_HOME/marker" ] && [ -e "$GOCACHE/marker" ]; then echo warm; else echo cold; fi > cache.txt
mkdir -p "$XDG_CACHE_HOME" "$GOCACHE" && echo x > "$XDG_CACHE_HOME/marker" && echo x > "$GOCACHE/marker"
git init -q "$TMPDIR/r" && cd "$TMPDIR/r" && echo a > a && git add a && git commit -qm a && git log -1 --format=%ae > "$w/git.txt"`
	x := startTLSExecutor(t, agentCmd, "--transports", "archive")
	key := x.key(t)
	run := func(c *ctl) (cache, git string) {
		t.Helper()
		ws := t.TempDir()
		os.WriteFile(filepath.Join(ws, "x"), []byte("x\n"), 0o644)
		r := c.run("export", ws, "--peer", "https://"+x.addr, "--peer-key", key, "--transport", "archive", "--prompt", "p")
		if r.code != 0 {
			t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
		}
		b, _ := os.ReadFile(filepath.Join(ws, "cache.txt"))
		g, _ := os.ReadFile(filepath.Join(ws, "git.txt"))
		return strings.TrimSpace(string(b)), strings.TrimSpace(string(g))
	}
	a := newCtl(t)
	a.tls = true
	if cache, git := run(a); cache != "cold" || !strings.HasSuffix(git, ".awcp.invalid") {
		t.Errorf("a delegator's first delegation: cache %q, git commit by %q", cache, git)
	}
	if cache, _ := run(a); cache != "warm" {
		t.Errorf("the same delegator's second delegation found the cache %q", cache)
	}
	b := newCtl(t) // another delegator: another identity key
	b.tls = true
	if cache, _ := run(b); cache != "cold" {
		t.Errorf("another delegator's delegation found the first one's cache: %q", cache)
	}
}
