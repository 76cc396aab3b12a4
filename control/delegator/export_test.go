//go:build linux

package delegator

import (
	"testing"
	"time"
)

// What the tests of package delegator_test (the live mount's, which need
// the FUSE half as well) use of this package's tests.

// HeadPeer is headPeer, the stand-in for the reference's head executor.
type HeadPeer = headPeer

// NewHeadPeer is newHeadPeer.
func NewHeadPeer(t *testing.T) *HeadPeer { return newHeadPeer(t) }

// Captured is the captured message in testdata/head/name, for delegation id.
func (h *headPeer) Captured(name, id string) string { return h.captured(name, id) }

// Seen is what the live mount's root held, and whether the result was
// acknowledged.
func (h *headPeer) Seen() (mounted []string, acked bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mounted, h.acked
}

// CheckHeadRun is checkHeadRun.
var CheckHeadRun = checkHeadRun

// SetGitHistoryTimeout bounds admission's look at a repository's history
// for the test.
func SetGitHistoryTimeout(t *testing.T, d time.Duration) {
	old := gitHistoryTimeout
	gitHistoryTimeout = d
	t.Cleanup(func() { gitHistoryTimeout = old })
}
