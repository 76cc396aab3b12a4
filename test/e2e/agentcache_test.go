package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cacheAgent says whether it found its caches warm (cache.txt) and who
// its git commits are by (git.txt), then leaves a marker in each cache,
// as an agent planting something for the next build would.
const cacheAgent = `set -u; w=$(pwd)
if [ -e "$XDG_CACHE_HOME/marker" ] && [ -e "$GOCACHE/marker" ]; then echo warm; else echo cold; fi > cache.txt
mkdir -p "$XDG_CACHE_HOME" "$GOCACHE" && echo x > "$XDG_CACHE_HOME/marker" && echo x > "$GOCACHE/marker"
git init -q "$TMPDIR/r" && cd "$TMPDIR/r" && echo a > a && git add a && git commit -qm a && git log -1 --format=%ae > "$w/git.txt"`

// TestAgentCachesAreTheDelegators: an agent's build caches live on
// across a delegator's delegations — its second delegation finds what its
// first left in $GOCACHE and $XDG_CACHE_HOME — and another delegator's
// agent finds none of it (what one agent puts in a cache, the next one's
// build takes on trust). With --agent-cache delegation, not even the same
// delegator's next agent finds what the first planted. A plain `git
// commit` works in every agent: it has an identity.
func TestAgentCachesAreTheDelegators(t *testing.T) {
	slow(t)
	parallel(t)
	x := startTLSExecutor(t, cacheAgent, "--transports", "archive")
	a := newCtl(t)
	a.tls = true
	if cache, git := runCacheAgent(t, a, x); cache != "cold" || !strings.HasSuffix(git, ".awcp.invalid") {
		t.Errorf("a delegator's first delegation: cache %q, git commit by %q", cache, git)
	}
	if cache, _ := runCacheAgent(t, a, x); cache != "warm" {
		t.Errorf("the same delegator's second delegation found the cache %q", cache)
	}
	b := newCtl(t) // another delegator: another identity key
	b.tls = true
	if cache, _ := runCacheAgent(t, b, x); cache != "cold" {
		t.Errorf("another delegator's delegation found the first one's cache: %q", cache)
	}

	own := startTLSExecutor(t, cacheAgent, "--transports", "archive", "--agent-cache", "delegation")
	for i := range 2 {
		if cache, _ := runCacheAgent(t, a, own); cache != "cold" {
			t.Errorf("--agent-cache delegation: delegation %d of the same delegator found the cache %q", i+1, cache)
		}
	}
}

// runCacheAgent delegates a workspace to x's cacheAgent and returns what
// it found.
func runCacheAgent(t *testing.T, c *ctl, x *executor) (cache, git string) {
	t.Helper()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "x"), []byte("x\n"), 0o644)
	r := c.run("export", ws, "--peer", "https://"+x.addr, "--peer-key", x.key(t), "--transport", "archive", "--prompt", "p")
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(filepath.Join(ws, "cache.txt"))
	g, _ := os.ReadFile(filepath.Join(ws, "git.txt"))
	return strings.TrimSpace(string(b)), strings.TrimSpace(string(g))
}
