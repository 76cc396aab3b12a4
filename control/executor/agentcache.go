package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/awcp/awcp/lease"
)

// The agents' caches. A build cache (Go's, Go's modules, npm's, pip's,
// and the XDG cache dir the rest use) lives on across delegations, or
// every delegation's agent starts cold: a hello-world Go build took 11 s
// in a fresh sandbox against half a second warm. A cache is safe to share
// only with the one who could have filled it: what one agent puts there —
// a compiled package, a module — the next one's build takes on trust. So
// each cache is one delegator's, by the identity key its delegations were
// made with (lease.Assignment.DelegatorKey): its delegations share it,
// another delegator's never see it. A delegation made over plain HTTP has
// no key, and no cache.

// cacheEnv are the variables that point each tool at its part of a cache
// dir.
var cacheEnv = []struct{ name, sub string }{
	{"GOCACHE", "go-build"},
	{"GOMODCACHE", "go-mod"},
	{"npm_config_cache", "npm"},
	{"PIP_CACHE_DIR", "pip"},
	{"XDG_CACHE_HOME", "xdg"},
}

// agentCache is delegation a's agent's cache dir, made if need be; "" if
// it has none (no key, or caches off).
func (e *Executor) agentCache(a *lease.Assignment) string {
	if e.opts.NoAgentCaches || a.DelegatorKey == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(a.DelegatorKey))
	dir := filepath.Join(e.opts.StateDir, "caches", hex.EncodeToString(sum[:12]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.log.Warn("agent cache", "delegation", a.ID, "err", err)
		return ""
	}
	return dir
}
