package delegator

import (
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// lent is what a transport is told of delegation del.
func lent(del *lease.Delegation) control.Lent {
	return control.Lent{ID: del.ID, LocalDir: del.LocalDir, AccessMode: del.AccessMode, ExpiresAt: del.ExpiresAt, Peer: del.Peer,
		Dialect: del.Dialect, Policy: del.Policy, Reverse: del.Connect == control.ConnectReverse, Token: del.Token,
		PeerAgentID: del.PeerAgentID, PeerKey: del.PeerKey, PlainHTTP: del.PlainHTTP, Snapshot: del.SnapshotMode, StagedDir: stagedDirOf(del),
		GitHistory: del.GitHistory}
}

// stagedDirOf is where del's staged result is kept; "" if it is not.
func stagedDirOf(del *lease.Delegation) string {
	if del.Staged == nil {
		return ""
	}
	return del.Staged.Dir
}
