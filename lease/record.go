package lease

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Transition is one entry of a lease's history.
type Transition struct {
	From  State     `json:"from"`
	To    State     `json:"to"`
	Event Event     `json:"event"`
	At    time.Time `json:"at"`
	Note  string    `json:"note,omitempty"`
}

// CheckVerdict is how the owner's check command did on a result.
type CheckVerdict struct {
	Command string    `json:"command"`
	Passed  bool      `json:"passed"`
	Exit    int       `json:"exit"`
	Output  string    `json:"output,omitempty"` // its last lines
	At      time.Time `json:"at"`
}

// Failure is how a lease that ended badly ended: a spec error code with its
// message and hint.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
	// Reason and CallChain say more of a circular call's refusal
	// (control.ReasonCircularCall).
	Reason    string   `json:"reason,omitempty"`
	CallChain []string `json:"callChain,omitempty"`
}

// RefusedHere reports whether the lease was refused for the caller's own
// mistake (control.CodeUsage: an executor's key not trusted, say) before
// anything went to an executor: no delegation took place, so lists leave
// it out; asked for by its id, it says why.
func (l *Lease) RefusedHere() bool {
	return l.State == Error && l.Failure != nil && l.Failure.Code == UsageCode
}

// UsageCode is control.CodeUsage (control imports this package).
const UsageCode = "USAGE"

// Lease is the part both sides keep about a delegation.
type Lease struct {
	ID          string       `json:"id"`
	State       State        `json:"state"`
	AccessMode  string       `json:"accessMode"`
	Transport   string       `json:"transport"`
	TTLSeconds  int64        `json:"ttlSeconds"`
	CreatedAt   time.Time    `json:"createdAt"`
	ExpiresAt   time.Time    `json:"expiresAt"` // zero until a lease is granted
	EndedAt     time.Time    `json:"endedAt,omitzero"`
	Transitions []Transition `json:"transitions"`
	Failure     *Failure     `json:"failure,omitempty"`
	// Dialect is the AWCP dialect the peer speaks, "seed" or "head"
	// (empty in records of earlier releases: seed).
	Dialect string `json:"dialect,omitempty"`
}

func (l *Lease) lease() *Lease { return l }

// fire applies e at now, recording it in the history.
func (l *Lease) fire(e Event, note string, now time.Time) error {
	to, err := Next(l.State, e)
	if err != nil {
		return fmt.Errorf("delegation %s: %w", l.ID, err)
	}
	l.Transitions = append(l.Transitions, Transition{From: l.State, To: to, Event: e, At: now, Note: note})
	l.State = to
	if to.Terminal() {
		l.EndedAt = now
	}
	return nil
}

// Delegation is the delegator's record of a lease it gave out.
type Delegation struct {
	Lease
	Peer          string `json:"peer"`
	LocalDir      string `json:"localDir"` // physical path, symlinks resolved
	ExportName    string `json:"exportName"`
	AutoTransport bool   `json:"autoTransport,omitempty"` // chosen by --transport auto: may fall back
	// Connect is "reverse" when the live mount's connections are opened
	// by the delegator (behind NAT); empty when the executor dials.
	Connect         string `json:"connect,omitempty"`
	Description     string `json:"description"`
	Prompt          string `json:"prompt"`
	ExecutorWorkDir string `json:"executorWorkDir,omitempty"`
	LastEventID     uint64 `json:"lastEventId"`
	OwnerPID        int    `json:"ownerPid,omitempty"` // process following the delegation
	// OwnerPIDNS is OwnerPID's PID namespace (its inode): a process in
	// another cannot tell whether OwnerPID runs.
	OwnerPIDNS uint64 `json:"ownerPidNs,omitempty"`
	// OwnerDaemon says OwnerPID is the daemon's (`awcp-ctl serve`), whose
	// delegations wait for it to restart; a command's are ended once it
	// is gone.
	OwnerDaemon bool `json:"ownerDaemon,omitempty"`
	// OwnerMCP says OwnerPID is an MCP server's, whose delegations wait a
	// while for its restart's delegate_recover.
	OwnerMCP bool `json:"ownerMcp,omitempty"`
	// OrphanSince is when a session's holder was first found gone: its
	// session waits SessionTakeOverGrace for a new gateway to take it
	// over before it is ended.
	OrphanSince time.Time `json:"orphanSince,omitzero"`
	Token       string    `json:"token,omitempty"` // secret for the peer; never log
	Summary     string    `json:"summary,omitempty"`
	Highlights  []string  `json:"highlights,omitempty"`
	Changes     []string  `json:"changes,omitempty"`   // "A added", "M modified", "D deleted"; a directory ends in /
	Conflicts   []string  `json:"conflicts,omitempty"` // local versions kept
	Notes       []string  `json:"notes,omitempty"`     // what the user should know, e.g. a transport fallback
	// Permissions are the agent's permission requests, pending or decided,
	// in the order asked.
	Permissions []Permission `json:"permissions,omitempty"`
	// Policy is what the export refused beyond its access mode.
	Policy ExportPolicy `json:"policy,omitzero"`
	// Audit is what the executor did with the directory, once the
	// delegation ended (the live mount's audit log, or the archive's diff).
	Audit *AuditSummary `json:"audit,omitempty"`
	// CallChain is what the INVITE carried: the agents the delegation
	// passed through, this one last.
	CallChain []string `json:"callChain,omitempty"`
	// PeerAgentID and PeerName are the executor's, when discovery found
	// it.
	PeerAgentID string `json:"peerAgentId,omitempty"`
	// PeerKey is the identity key trusted for PeerAgentID (the peer book's
	// pin): the executor proves it holds it before anything secret is
	// sent (control/identity.go).
	PeerKey string `json:"peerKey,omitempty"`
	// PlainHTTP says the delegator speaks plain HTTP to the executor
	// (--plain-http: the reference implementation's dialect); otherwise
	// TLS, pinned to PeerKey.
	PlainHTTP bool   `json:"plainHttp,omitempty"`
	PeerName  string `json:"peerName,omitempty"`
	// PeerFallbacks are the executors auto chose next (--peer auto or
	// dns:DOMAIN), invited in turn while the one invited declines for want
	// of a free slot; each is trusted as the first was.
	PeerFallbacks []PeerRef `json:"peerFallbacks,omitempty"`
	// PeerProtocol is what the peer speaks: "" for AWCP, PeerA2A for an
	// A2A agent (--peer a2a:URL), which takes the workspace as a ZIP in a
	// message and gives its result as artifacts.
	PeerProtocol string `json:"peerProtocol,omitempty"`
	// PeerTaskID and PeerContextID are an A2A peer's ids for the
	// delegation's task: its handle, kept beside the delegation's own.
	PeerTaskID    string `json:"peerTaskId,omitempty"`
	PeerContextID string `json:"peerContextId,omitempty"`
	// GitHistory is how many commits of the directory's branch the git
	// transport lends under the export view (--git-history); 0: none.
	GitHistory int `json:"gitHistory,omitempty"`
	// Channel is how the executor's side stands as this delegator last
	// saw it (channel.go); nil before START. It means nothing once the
	// lease has ended, and is not shown then.
	Channel *Channel `json:"channel,omitempty"`
	// ChannelLog is the channel's changes, the last MaxChannelLog.
	ChannelLog []ChannelChange `json:"channelLog,omitempty"`
	// Limits are the export's own admission limits (zero: the
	// transport's defaults), kept for a fall back to archive, which
	// checks the archive's again.
	Limits [3]int64 `json:"limits,omitzero"` // total bytes, files, bytes of one file
	// Session is "acp" for a session delegation with an ACP agent, or
	// "rounds" for one of a task agent's rounds (control/session.go);
	// SessionKey the key its channel or renewals present. Secret.
	Session    string `json:"session,omitempty"`
	SessionKey string `json:"sessionKey,omitempty"`
	// SessionDriven says the session's turns come from the record
	// (Turns, turns.go), not from an editor; SessionClose asks the
	// process that drives it to close it.
	SessionDriven bool `json:"sessionDriven,omitempty"`
	SessionClose  bool `json:"sessionClose,omitempty"`
	// TurnEndsSeen counts the executor's word that a turn ended
	// (control.TurnEndedPrefix), once every progress line before it is
	// stored: a turn's end is recorded after them.
	TurnEndsSeen int    `json:"turnEndsSeen,omitempty"`
	Turns        []Turn `json:"turns,omitempty"`
	// Check is the last verdict of the owner's check command on this
	// attempt's result (compare --check), kept for compare and the page.
	Check *CheckVerdict `json:"check,omitempty"`
	// SessionFailure, set by a driven session's driver, is why its
	// session failed — the agent's session did not open, or a turn ended
	// in the agent's error — and makes its end a failure, not a
	// completion, whatever the executor's done says.
	SessionFailure *Failure `json:"sessionFailure,omitempty"`
	// SessionChannel and SessionEvents are the session's channel and what
	// became of it (seed 002), as the gateway saw them.
	SessionChannel *SessionChannel `json:"sessionChannel,omitempty"`
	SessionEvents  []SessionEvent  `json:"sessionEvents,omitempty"`
	// AgentStderr is the end of what the agent wrote to stderr, and
	// MountRefused what the executor's read-only mount refused it, as the
	// executor's last event said (extensions of v1).
	AgentStderr  string        `json:"agentStderr,omitempty"`
	MountRefused *MountRefused `json:"mountRefused,omitempty"`
	// Progress is the agent's last progress lines (MaxProgress), and
	// ProgressDropped how many earlier ones are no longer kept.
	Progress        []ProgressLine `json:"progress,omitempty"`
	ProgressDropped uint64         `json:"progressDropped,omitempty"`
	// Gaps are the events the executor could not replay when its stream
	// was followed again.
	Gaps []EventGap `json:"gaps,omitempty"`
	// SnapshotMode is what becomes of the result (SnapshotAuto if ""),
	// and Staged the result kept for review in staged mode.
	SnapshotMode string  `json:"snapshotMode,omitempty"`
	Staged       *Staged `json:"staged,omitempty"`
	// Group names the attempts it is one of: one task lent to several
	// executors at once, each staged, compared and one applied.
	Group string `json:"group,omitempty"`
}

// WriteArea is the directory d may change: the one lent, or its write
// scope within it.
func (d *Delegation) WriteArea() string {
	if d.Policy.WriteScope == "" {
		return d.LocalDir
	}
	return filepath.Join(d.LocalDir, filepath.FromSlash(d.Policy.WriteScope))
}

// WritesInPlace reports whether d writes the directory lent as it runs:
// read-write, its result not staged or discarded. Two such delegations of
// one directory may not run at once; staged ones (attempts) may.
func (d *Delegation) WritesInPlace() bool {
	return d.AccessMode == "rw" && d.SnapshotMode != SnapshotStaged && d.SnapshotMode != SnapshotDiscard
}

// ExportPolicy is what a delegation's export refuses beyond its access
// mode (the SFTP server enforces it; the archive transport leaves hidden
// names out).
type ExportPolicy struct {
	Hide          []string `json:"hide,omitempty"`
	NoDelete      bool     `json:"noDelete,omitempty"`
	MaxWriteBytes int64    `json:"maxWriteBytes,omitempty"`
	// ProtectGit keeps what git executes or obeys (.git/config, hooks,
	// …) read-only to the executor.
	ProtectGit bool `json:"protectGit,omitempty"`
	// WriteScope, if set, is the one directory (relative to the one lent)
	// the executor may change: a scope of a task split among executors.
	WriteScope string `json:"writeScope,omitempty"`
}

// Permission is a permission request of the executor's agent and what
// became of it.
type Permission struct {
	RequestID string             `json:"requestId"`
	Title     string             `json:"title"`
	Options   []PermissionOption `json:"options"`
	Outcome   string             `json:"outcome"`             // pending, selected or cancelled
	OptionID  string             `json:"optionId,omitempty"`  // when selected
	DecidedBy string             `json:"decidedBy,omitempty"` // as the executor said it
	At        time.Time          `json:"at"`                  // of the last change
	// Where the request came from and what it is for: the executor (its
	// name or URL) and the agent's tool call, as the executor sent it.
	AskedBy  string          `json:"askedBy,omitempty"`
	ToolCall json.RawMessage `json:"toolCall,omitempty"`
	AskedAt  time.Time       `json:"askedAt,omitzero"`
	// How it was decided — user, policy, timeout or task-end — and, for
	// an answer sent from here, by whom (Answerer: "awcp-ctl permit by
	// USER", "MCP client NAME").
	How       string    `json:"how,omitempty"`
	Answerer  string    `json:"answerer,omitempty"`
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	// Holds is how far a selected answer goes (HoldsFor): this request
	// only, or the agent's session — across its channels, never beyond.
	Holds string `json:"holds,omitempty"`
}

// HoldsFor is how far choosing optionID of opts goes: "this request"
// (allow_once, reject_once) or "the session" (allow_always,
// reject_always: the agent may apply it to the session's later requests,
// whichever channel they come through; no other session or delegation);
// "" for an option it does not know.
func HoldsFor(opts []PermissionOption, optionID string) string {
	for _, o := range opts {
		if o.OptionID != optionID {
			continue
		}
		switch o.Kind {
		case "allow_once", "reject_once":
			return "this request"
		case "allow_always", "reject_always":
			return "the session"
		}
	}
	return ""
}

// PermissionOption is one choice of a permission request (ACP's
// PermissionOption): the same on the executor's worker, on the wire and in
// the delegator's record.
type PermissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"` // allow_once, allow_always, reject_once, reject_always
}

// Choices shows options as people and models read them: "allow
// (allow_once), reject (reject_once)".
func Choices(opts []PermissionOption) string {
	s := make([]string, len(opts))
	for i, o := range opts {
		s[i] = o.OptionID + " (" + o.Kind + ")"
	}
	return strings.Join(s, ", ")
}

// Assignment is the executor's record of a lease it accepted.
type Assignment struct {
	Lease
	WorkDir     string `json:"workDir"`
	Description string `json:"description"`
	Prompt      string `json:"prompt"`
	Peer        string `json:"peer"` // remote address of the INVITE
	// DelegatorKey is the identity key of the delegator whose INVITE made
	// it, as its TLS certificate showed it; "" over plain HTTP. Every
	// later request about the delegation must come with that key: no
	// other delegator — nor an agent on this machine — holding the token
	// may watch, steer or end it.
	DelegatorKey string `json:"delegatorKey,omitempty"`
	// DelegatorToken is, where the INVITE showed no key, the SHA-256 (hex)
	// of the bearer token that admitted it: then every later request
	// about the delegation must carry that token, so that one holder of a
	// token from the executor's token file cannot watch, steer or end
	// another's. "" where nothing admitted it (an executor open to all).
	DelegatorToken string    `json:"delegatorToken,omitempty"`
	AcceptedAt     time.Time `json:"acceptedAt"`
	StartBy        time.Time `json:"startBy"` // START must arrive before this
	AgentPID       int       `json:"agentPid,omitempty"`
	// Session is the session protocol of a session delegation ("acp"),
	// and SessionKey the key its channel must present. Secret.
	Session    string `json:"session,omitempty"`
	SessionKey string `json:"sessionKey,omitempty"`
	// Resources are a head INVITE's environment: one folder each in
	// WorkDir, which is then the environment's root.
	Resources []Resource `json:"resources,omitempty"`
	// Retention is how long the ended assignment's events are kept, when
	// the delegator asked for less than the executor's default.
	Retention time.Duration `json:"retention,omitempty"`
	// CallChain is the INVITE's: the agents the delegation passed
	// through before this executor.
	CallChain []string `json:"callChain,omitempty"`
}

// Resource is one named directory of a head-dialect environment.
type Resource struct {
	Name string `json:"name"`
	Mode string `json:"mode"` // ro or rw
}

// Active reports whether the assignment holds one of the executor's slots.
func (a *Assignment) Active() bool { return !a.State.Terminal() }

// PeerRef is an executor discovery found: where it answers, its agent id
// and name, and the identity key trusted for it.
type PeerRef struct {
	URL     string `json:"url"`
	AgentID string `json:"agentId"`
	Name    string `json:"name,omitempty"`
	Key     string `json:"key"`
}

// Failed is why d failed, once it has ended other than completed; nil
// while it runs or if it completed (a Failure may have been recorded on
// the way and overcome: a fallback, a retried peer).
func (d *Delegation) Failed() *Failure {
	if d.Failure == nil || d.State == Completed {
		return nil
	}
	return d.Failure
}

// PeerA2A is Delegation.PeerProtocol for an A2A agent.
const PeerA2A = "a2a"
