package delegator

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	wire "github.com/awcp/awcp/sshd/sftpwire"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// ExportRequest is what `awcp-ctl export` and MCP's delegate ask for.
type ExportRequest struct {
	Dir string `json:"dir"`
	// Limits raise or lower admission's for this export; zero fields take
	// the transport's defaults (AdmissionLimits).
	Limits AdmissionLimits `json:"limits,omitzero"`
	// Session lends Dir for an ACP session rather than a task: the
	// executor's agent is driven by an editor through OpenSession's
	// channel (control/session.go); Prompt says what for, for the record.
	Session bool `json:"session,omitempty"`
	// Driven makes it a session whose turns come from the store, not an
	// editor (lease.Delegation.Turns): Prompt is the first, and
	// Say queues the next ones. It implies Session.
	Driven      bool          `json:"driven,omitempty"`
	Peer        string        `json:"peer"`
	Prompt      string        `json:"prompt"`
	Description string        `json:"description"`
	TTL         time.Duration `json:"ttl"`       // default 1h
	Access      string        `json:"access"`    // default rw
	Transport   string        `json:"transport"` // auto, sshfs or archive; default auto
	Token       string        `json:"token,omitempty"`
	// Dialect is the AWCP dialect to speak: seed (the specification's),
	// head (the reference implementation's later wire), or auto (the
	// default): an INVITE both read, then the dialect the ACCEPT is in.
	Dialect string `json:"dialect,omitempty"`

	// Hide adds patterns of paths not to lend (sftpwire.Hidden), to
	// wire.DefaultHide unless NoHideDefaults.
	Hide           []string `json:"hide,omitempty"`
	NoHideDefaults bool     `json:"noHideDefaults,omitempty"`
	// NoDelete refuses the executor deletes and renames over a name.
	NoDelete bool `json:"noDelete,omitempty"`
	// MaxWriteBytes bounds what the executor writes over the live mount
	// (0: no bound).
	MaxWriteBytes int64 `json:"maxWriteBytes,omitempty"`
	// AllowGitControl lets the executor change what git executes or
	// obeys (untrusted.GitControlled); by default it is read-only to it,
	// and an apply of a staged result leaves it out.
	AllowGitControl bool `json:"allowGitControl,omitempty"`
	// LendHiddenHistory lends a .git whose index or history holds a
	// hidden path; admission refuses one otherwise.
	LendHiddenHistory bool `json:"lendHiddenHistory,omitempty"`
	// GitHistory, with the git transport, lends the last GitHistory
	// commits of the directory's current branch under the export view's
	// commit; refused if a hidden path is in any of them.
	GitHistory int `json:"gitHistory,omitempty"`

	// Snapshot is what becomes of the result: auto (the default: applied
	// as it comes, or written in place over a live mount), staged (kept
	// for review: diff, apply, discard) or discard.
	Snapshot string `json:"snapshotMode,omitempty"`
	// Group names the attempts this delegation is one of (Delegation.Group).
	Group string `json:"group,omitempty"`
	// Scope, if set, is the one directory under Dir (relative, slash-
	// separated) the executor may change: the rest is lent read-only to
	// it. Delegations of one directory with scopes apart run at once.
	Scope string `json:"scope,omitempty"`

	// CallChain is the agents this request passed through before this
	// delegator (control.CallChainEnv of an agent that delegates on).
	CallChain []string `json:"callChain,omitempty"`
	// PeerAgentID, PeerName and PeerChoice say which agent Peer is and
	// how it was chosen, when discovery resolved it (discovery.Resolve).
	PeerAgentID string `json:"peerAgentId,omitempty"`
	// PeerKey is the identity key trusted for PeerAgentID; the executor
	// proves it holds it before the token goes.
	PeerKey  string `json:"peerKey,omitempty"`
	PeerName string `json:"peerName,omitempty"`
	// PeerFallbacks are invited in turn when Peer declines for want of a
	// free slot (lease.Delegation.PeerFallbacks).
	PeerFallbacks []lease.PeerRef `json:"peerFallbacks,omitempty"`
	// PlainHTTP speaks plain HTTP to the executor: the token, the
	// workspace and the session in clear. Only for a peer that speaks
	// nothing else (the reference implementation); refused otherwise.
	PlainHTTP  bool   `json:"plainHttp,omitempty"`
	PeerChoice string `json:"peerChoice,omitempty"`
}

// callChain is the chain the INVITE carries: req's, then self. A peer
// already in it is refused here, before it is asked.
func (req ExportRequest) callChain(self string) ([]string, error) {
	if err := control.CheckCallChain(req.CallChain); err != nil {
		return nil, control.Errorf(control.CodeDeclined, "%v", err).WithHint("$" + control.CallChainEnv + " is set by the executor that runs this agent")
	}
	chain := control.DelegatorCallChain(req.CallChain, self)
	if len(chain) > control.MaxCallChain {
		return nil, control.Errorf(control.CodeDeclined, "this delegation passed through %d agents already", len(req.CallChain))
	}
	if control.IsCircular(chain, req.PeerAgentID) {
		pe := control.CircularCall(req.PeerAgentID, chain)
		if req.PeerAgentID == self {
			pe.Message = fmt.Sprintf("circular call: executor %s is this agent itself (%s), and this delegator runs inside one of its delegations", req.Peer, self)
		}
		return nil, pe
	}
	return chain, nil
}

// policy is the export policy req asks for.
func (req ExportRequest) policy() (lease.ExportPolicy, error) {
	p := lease.ExportPolicy{NoDelete: req.NoDelete, MaxWriteBytes: req.MaxWriteBytes, ProtectGit: !req.AllowGitControl}
	if !req.NoHideDefaults {
		p.Hide = append(p.Hide, wire.DefaultHide...)
	}
	for _, pat := range req.Hide {
		if err := wire.CheckHidePattern(pat); err != nil {
			return p, control.Errorf(control.CodeWorkspaceInvalid, "%v", err).
				WithHint("a pattern is a name (\"*.pem\", \".env*\") or names joined by / (\"config/secrets.json\"), matched anywhere")
		}
		if !slices.Contains(p.Hide, pat) {
			p.Hide = append(p.Hide, pat)
		}
	}
	if p.MaxWriteBytes < 0 {
		return p, control.Errorf(control.CodeWorkspaceInvalid, "max-write-bytes must not be negative")
	}
	if req.Scope != "" {
		scope := path.Clean(filepath.ToSlash(req.Scope))
		if path.IsAbs(scope) || scope == "." || scope == ".." || strings.HasPrefix(scope, "../") || strings.ContainsAny(scope, "\n\x00") {
			return p, control.Errorf(control.CodeWorkspaceInvalid, "scope %q: a directory under the one lent, given relative to it", req.Scope)
		}
		if fi, err := os.Stat(filepath.Join(req.Dir, filepath.FromSlash(scope))); err != nil || !fi.IsDir() {
			return p, control.Errorf(control.CodeWorkspaceInvalid, "scope %q: no such directory in %s", req.Scope, req.Dir)
		}
		p.WriteScope = scope
	}
	if len(wire.ExportPolicy(p).Encode()) > wire.MaxPolicyBytes {
		return p, control.Errorf(control.CodeWorkspaceInvalid, "too many hide patterns: they must fit in %d bytes", wire.MaxPolicyBytes)
	}
	return p, nil
}

// limits is what admission checks for transport: req's own, then the
// process's (base), then the transport's defaults — the archive's for
// archive, the live mount's otherwise (auto checks the archive's again
// if it falls back).
func (req ExportRequest) limits(base AdmissionLimits, transport string) AdmissionLimits {
	defaults := LiveLimits
	if transport == control.TransportArchive {
		defaults = ArchiveLimits
	}
	return req.Limits.over(base.over(defaults))
}
