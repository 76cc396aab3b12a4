package control

import "testing"

// What the tests of package control_test use of this package's tests: they
// test the live mount, whose halves (control/executor, control/delegator)
// import this package, so they cannot be inside it.

// ExecFixture is an Executor served on loopback (execFixture).
type ExecFixture = execFixture

// NewExecFixture is newExecFixture.
func NewExecFixture(t testing.TB, agentCmd string, mod func(*ExecutorOptions)) *ExecFixture {
	return newExecFixture(t, agentCmd, mod)
}

// URL is the executor's base URL.
func (f *execFixture) URL() string { return f.srv.URL }

// Root is the executor's work root.
func (f *execFixture) Root() string { return f.root }

// LastEvent is the terminal event of delegation id's stream.
func (f *execFixture) LastEvent(id string) *Event { return last(f.events(id, 0)) }

// Post sends msg to the executor's /awcp and decodes a 200 answer into out.
func (f *execFixture) Post(t *testing.T, msg, out any) error {
	return f.peer("").post(t.Context(), "/awcp", msg, out)
}

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
