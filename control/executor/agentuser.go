package executor

import (
	"sync"

	"github.com/awcp/awcp/control"
)

// Agents' users. Where the sandbox gives each agent a root of its own
// (the executor runs as root), each running delegation's agent also runs
// as a uid of its own, which no account and no other agent has: what it
// makes is its own, what root or another agent owns it may not touch
// beyond what the mode bits grant anyone. The uids are AgentUIDBase and
// up, in use from START until the work dir is removed.
const (
	AgentUIDBase  = 2_000_000_000
	agentUIDCount = 1 << 16
	// ProbeUID is the uid an agent is started as outside any delegation:
	// the ACP agent's initialize at serve's start, doctor's checks.
	ProbeUID = AgentUIDBase - 1
)

// agentUsers hands out the agents' uids.
type agentUsers struct {
	mu   sync.Mutex
	byID map[string]uint32
	used map[uint32]bool
}

// take is delegation id's agent's user, the one it has or a free one; nil
// if every uid is in use (the executor's concurrency limit is far below).
func (u *agentUsers) take(id string) *control.LocalUser {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byID == nil {
		u.byID, u.used = map[string]uint32{}, map[uint32]bool{}
	}
	uid, ok := u.byID[id]
	for i := uint32(0); !ok && i < agentUIDCount; i++ {
		if !u.used[AgentUIDBase+i] {
			uid, ok = AgentUIDBase+i, true
			u.byID[id], u.used[uid] = uid, true
		}
	}
	if !ok {
		return nil
	}
	return &control.LocalUser{UID: uid, GID: uid}
}

// of is delegation id's agent's user; nil if it has none.
func (u *agentUsers) of(id string) *control.LocalUser {
	u.mu.Lock()
	defer u.mu.Unlock()
	uid, ok := u.byID[id]
	if !ok {
		return nil
	}
	return &control.LocalUser{UID: uid, GID: uid}
}

// release frees delegation id's uid: its agent has ended and its work dir
// is gone.
func (u *agentUsers) release(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if uid, ok := u.byID[id]; ok {
		delete(u.byID, id)
		delete(u.used, uid)
	}
}
