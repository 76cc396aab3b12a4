// Package control is what the two roles of AWCP share: the wire types of
// spec §4 in both dialects (the seed's and the reference's head), the
// error codes, the streaming JSON and SSE readers, and the interfaces of
// the transports. The roles themselves are control/delegator and
// control/executor; neither imports the other.
//
// # Wire format
//
// Every message is camelCase JSON with version "1". Timestamps stay strings on
// the wire (validated as RFC 3339) so that a message decodes and re-encodes
// byte for byte. [DecodeMessage] is the only way input from a peer becomes a
// typed message: it refuses wrong versions, unknown types, missing required
// fields and delegation ids that could not safely become a path.
package control

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"time"

	"github.com/awcp/awcp/lease"
)

// MaxMessageBytes bounds a message held in memory: an INVITE, an ERROR, or
// a START apart from its workspace (which goes to disk as it is read, and
// only from a client with a valid bearer token where tokens are set).
const MaxMessageBytes = 1 << 20

// Version is the only protocol version this implementation speaks.
const Version = "1"

// Message types of spec §4.1.
const (
	TypeInvite = "INVITE"
	TypeAccept = "ACCEPT"
	TypeStart  = "START"
	TypeDone   = "DONE"
	TypeError  = "ERROR"
	// TypeContinue and TypeClose are the reference's rounds (its
	// development line, SII-Holos/awcp 8d66b97): a head delegation's next
	// round on the still-lent workspace, and the end of its rounds.
	TypeContinue = "CONTINUE"
	TypeClose    = "CLOSE"
)

// Access modes.
const (
	AccessRO = "ro"
	AccessRW = "rw"
)

// Dialects of v1 a peer may speak (docs/interop.md). The seed
// specification's is the default; the reference implementation's later
// wire ("head", SII-Holos/awcp b10e261) carries the workspace as named
// resources of an environment and START's workDir as transportHandle.
const (
	DialectSeed = "seed"
	DialectHead = "head"
)

// ResourceWorkspace is the name of the one resource our delegator lends in
// the head dialect: the directory appears as workspace/ in the
// environment the executor sees.
const ResourceWorkspace = "workspace"

// HostKeyOption is the key of workDir.options that carried the
// delegator's host key before it had a field of its own
// (WorkDirInfo.HostKey); an executor still reads it from our earlier
// delegators. It is the only option an executor interprets.
const HostKeyOption = "hostKey"

// Transport names.
const (
	TransportSSHFS   = "sshfs"
	TransportArchive = "archive"
	// TransportGit is ours: the export view as a repository the executor
	// clones and pushes its result to, over the delegation's SSH
	// connection (control/delegator/lendgit).
	TransportGit = "git"
)

// Event types of spec §3.4.
const (
	EventStatus = "status"
	EventDone   = "done"
	EventError  = "error"
	// EventSnapshot is the head dialect's result: a ZIP of the
	// environment (a folder per resource), sent before done.
	EventSnapshot = "snapshot"
	// EventRoundDone is the end of a round of a head delegation that
	// takes rounds (Round, Summary, Highlights, the round's snapshot
	// named as done names it): the workspace stays lent, and the
	// delegator sends CONTINUE or CLOSE. done comes after CLOSE.
	EventRoundDone = "round_done"
	// EventPermission is an extension of v1: an ACP agent's permission
	// request, pending or decided. Delegators that do not know the type
	// ignore it, so the v1 wire stays compatible.
	EventPermission = "permission"
	// EventChannel is never on the wire: the delegator's own event, given
	// to its Progress callback, when the executor's channel changes
	// (lease.Channel*: Status is the state, Message the detail, Timestamp
	// since when).
	EventChannel = "channel"
)

// TurnEndedPrefix begins the progress message an executor sends when a
// session's agent answered a turn ("turn ended: end_turn"), after every
// progress line of that turn: a delegator that drives the session records
// the turn's end only once it has them all, so the turn's story is told
// in order (its last tool call and words, then its end). A delegator that
// does not know it shows it as any progress line.
const TurnEndedPrefix = "turn ended: "

// Outcomes of a permission event.
const (
	PermissionPending   = "pending"   // forwarded: waits for POST /awcp/tasks/{id}/permission
	PermissionSelected  = "selected"  // OptionID was chosen, by DecidedBy
	PermissionCancelled = "cancelled" // nobody chose: timeout, or the task ended
)

// Status values of a status event.
const (
	StatusRunning  = "running"
	StatusProgress = "progress"
)

// BaseMessage is the header every message carries.
type BaseMessage struct {
	Version      string `json:"version"`
	Type         string `json:"type"`
	DelegationID string `json:"delegationId"`
}

// Task is what the delegator asks for.
type Task struct {
	Description string `json:"description"`
	Prompt      string `json:"prompt"`
}

// InviteLease is the lease the delegator proposes.
type InviteLease struct {
	TTLSeconds int64  `json:"ttlSeconds"`
	AccessMode string `json:"accessMode"`
}

// Workspace names the export logically; it is never a real path.
type Workspace struct {
	ExportName string `json:"exportName"`
}

// Requirements are the delegator's wishes about the executor.
type Requirements struct {
	Transport string `json:"transport,omitempty"`
	// Connect is ours: "reverse" asks for the live mount's connection to
	// be opened by the delegator (tunnel.go). Absent: the executor dials.
	Connect string `json:"connect,omitempty"`
}

// Auth carries a credential for the executor. It is a secret: never log it.
type Auth struct {
	Type       string            `json:"type"`
	Credential string            `json:"credential"`
	Metadata   map[string]string `json:"metadata,omitempty"`
}

// Resource is one entry of a head-dialect environment: a directory lent
// under a name, which is a folder of that name in the environment root.
type Resource struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Mode string `json:"mode"`
}

// Environment is the head dialect's workspace: named resources.
type Environment struct {
	Resources []Resource `json:"resources"`
}

// Invite is spec §4.2. A seed INVITE names its workspace; a head one has
// an environment and a retention instead. Our delegator's "auto" INVITE
// carries both, and the form of the ACCEPT tells which the executor read.
type Invite struct {
	BaseMessage
	Task         Task          `json:"task"`
	Lease        InviteLease   `json:"lease"`
	Workspace    *Workspace    `json:"workspace,omitempty"`
	RetentionMs  *int64        `json:"retentionMs,omitempty"`
	Environment  *Environment  `json:"environment,omitempty"`
	Requirements *Requirements `json:"requirements,omitempty"`
	Auth         *Auth         `json:"auth,omitempty"`
	// CallChain is an extension: the agent ids this delegation passed
	// through, the delegator's last (see callchain.go).
	CallChain []string `json:"callChain,omitempty"`
	// Session is an extension: the delegation is an ACP session an editor
	// holds with the executor's agent through the delegator's gateway
	// (session.go).
	Session *SessionRequest `json:"session,omitempty"`
}

// Dialect is the dialect an executor answers this INVITE in: head only
// when it has no seed workspace to read.
func (m *Invite) Dialect() string {
	if m.Workspace == nil && m.Environment != nil {
		return DialectHead
	}
	return DialectSeed
}

// ExecutorWorkDir is where the executor will put the workspace.
type ExecutorWorkDir struct {
	Path string `json:"path"`
}

// SandboxProfile is the executor's declaration about itself (spec §7.2).
type SandboxProfile struct {
	CwdOnly      *bool `json:"cwdOnly,omitempty"`
	AllowNetwork *bool `json:"allowNetwork,omitempty"`
	AllowExec    *bool `json:"allowExec,omitempty"`
}

// ExecutorConstraints are what the executor actually grants.
type ExecutorConstraints struct {
	AcceptedAccessMode string          `json:"acceptedAccessMode,omitempty"`
	MaxTTLSeconds      int64           `json:"maxTtlSeconds,omitempty"`
	SandboxProfile     *SandboxProfile `json:"sandboxProfile,omitempty"`
	// Connect is ours: "reverse" when the executor agrees to take the
	// live mount's connection from the delegator (tunnel.go).
	Connect string `json:"connect,omitempty"`
	// Session is ours: the session protocol the executor grants
	// (SessionACP), when the INVITE asked for one.
	Session string `json:"session,omitempty"`
}

// Accept is spec §4.3. A head executor adds the retention it grants:
// its presence is how a delegator knows which dialect it speaks.
type Accept struct {
	BaseMessage
	RetentionMs         *int64               `json:"retentionMs,omitempty"`
	ExecutorWorkDir     ExecutorWorkDir      `json:"executorWorkDir"`
	ExecutorConstraints *ExecutorConstraints `json:"executorConstraints,omitempty"`
}

// StartLease is the lease as finally granted.
type StartLease struct {
	ExpiresAt  string `json:"expiresAt"`
	AccessMode string `json:"accessMode"`
}

// Endpoint is the SSH server of an sshfs WorkDirInfo.
type Endpoint struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	User string `json:"user"`
}

// Credential is the SSH key pair of an sshfs WorkDirInfo. Secret.
type Credential struct {
	PrivateKey  string `json:"privateKey"`
	Certificate string `json:"certificate"`
}

// WorkDirInfo is the union of spec §4.4's two forms; Transport selects which
// fields are meaningful. Fields of the other form must be empty.
type WorkDirInfo struct {
	Transport string `json:"transport"`

	// sshfs
	Endpoint      *Endpoint   `json:"endpoint,omitempty"`
	ExportLocator string      `json:"exportLocator,omitempty"`
	Credential    *Credential `json:"credential,omitempty"`
	// HostKey is an extension of v1: the delegator's SSH host key, in
	// authorized_keys form, which the executor pins. It has a field of its
	// own because other executors turn options into sshfs -o flags.
	HostKey string            `json:"hostKey,omitempty"`
	Options map[string]string `json:"options,omitempty"`

	// git, the reference implementation's (its GitTransportHandle): a
	// remote of a third party the executor clones from and pushes a branch
	// to, with that remote's credential. awcp's own git transport sends
	// none of these (its repository is the delegator's, over SSH).
	RepoURL    string   `json:"repoUrl,omitempty"`
	BaseBranch string   `json:"baseBranch,omitempty"`
	BaseCommit string   `json:"baseCommit,omitempty"`
	Auth       *GitAuth `json:"auth,omitempty"`

	// archive
	WorkspaceBase64 string `json:"workspaceBase64,omitempty"`
	Checksum        string `json:"checksum,omitempty"`
	// WorkspaceFile is the workspace ZIP as a local file, in place of
	// WorkspaceBase64: the delegator streams it into the message as it
	// sends START, and the executor's reader streams workspaceBase64 into
	// it, so that neither holds the workspace in memory.
	WorkspaceFile string `json:"-"`
	// Received is workspaceBase64 as the executor's reader decoded it into
	// WorkspaceFile: its checksum, or why it is unusable.
	Received *Spooled `json:"-"`
}

// GitAuth is the reference's GitCredential: type token, ssh or none.
// Secret.
type GitAuth struct {
	Type       string `json:"type"`
	Token      string `json:"token,omitempty"`
	PrivateKey string `json:"privateKey,omitempty"`
}

// Start is spec §4.4. On the wire its WorkDir is the member workDir
// (seed) or transportHandle (head), as Dialect says.
type Start struct {
	BaseMessage
	Lease   StartLease  `json:"lease"`
	WorkDir WorkDirInfo `json:"-"`
	Dialect string      `json:"-"`
}

// startWire is Start as it is on the wire.
type startWire struct {
	BaseMessage
	Lease           StartLease   `json:"lease"`
	WorkDir         *WorkDirInfo `json:"workDir,omitempty"`
	TransportHandle *WorkDirInfo `json:"transportHandle,omitempty"`
}

// MarshalJSON writes WorkDir under the member of m's dialect.
func (m Start) MarshalJSON() ([]byte, error) {
	w := startWire{BaseMessage: m.BaseMessage, Lease: m.Lease}
	if m.Dialect == DialectHead {
		w.TransportHandle = &m.WorkDir
	} else {
		w.WorkDir = &m.WorkDir
	}
	return Marshal(w)
}

// UnmarshalJSON reads WorkDir from whichever member carries it.
func (m *Start) UnmarshalJSON(data []byte) error {
	var w startWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	m.BaseMessage, m.Lease, m.Dialect = w.BaseMessage, w.Lease, DialectSeed
	switch {
	case w.WorkDir != nil && w.TransportHandle != nil:
		return fieldErr("transportHandle", "and workDir are both present: send one")
	case w.WorkDir != nil:
		m.WorkDir = *w.WorkDir
	case w.TransportHandle != nil:
		m.WorkDir, m.Dialect = *w.TransportHandle, DialectHead
	}
	return nil
}

// workDirField is the wire name of m's WorkDir.
func (m *Start) workDirField() string {
	if m.Dialect == DialectHead {
		return "transportHandle"
	}
	return "workDir"
}

// Error is spec §4.6, sent as an HTTP body in either direction.
// Continue is the reference's CONTINUE: round Round of a head delegation
// that ended its last round, with its task. Lease, if given, is the
// lease from now on.
type Continue struct {
	BaseMessage
	Task  Task        `json:"task"`
	Round int         `json:"round"`
	Lease *StartLease `json:"lease,omitempty"`
}

// Close is the reference's CLOSE: a head delegation's rounds end, and so
// does the delegation (done follows on its stream).
type Close struct {
	BaseMessage
}

type Error struct {
	BaseMessage
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
	// Reason and CallChain are extensions: a refusal of a circular call
	// says ReasonCircularCall and the chain it found itself in.
	Reason    string   `json:"reason,omitempty"`
	CallChain []string `json:"callChain,omitempty"`
}

// StartResponse is the executor's answer to a successful START.
type StartResponse struct {
	OK bool `json:"ok"`
}

// Event is a task event of spec §3.4/§4.5 as carried in an SSE data line.
// Type selects which fields are meaningful.
type Event struct {
	DelegationID string `json:"delegationId"`
	Type         string `json:"type"`
	Timestamp    string `json:"timestamp"`

	// status; error (Message is shared; the order is the peers')
	Status   string   `json:"status,omitempty"`
	Code     string   `json:"code,omitempty"`
	Message  string   `json:"message,omitempty"`
	Hint     string   `json:"hint,omitempty"`
	Progress *float64 `json:"progress,omitempty"`

	// round_done: which round ended (the first is 1)
	Round int `json:"round,omitempty"`

	// snapshot (head); done
	SnapshotID string   `json:"snapshotId,omitempty"`
	Summary    string   `json:"summary,omitempty"`
	Highlights []string `json:"highlights,omitempty"`
	// SnapshotBase64 is a snapshot event's ZIP of the environment. Like
	// resultBase64 it is decoded into ResultFile as it is read.
	SnapshotBase64 string          `json:"snapshotBase64,omitempty"`
	Recommended    *bool           `json:"recommended,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	ResultBase64   string          `json:"resultBase64,omitempty"`
	// SnapshotIDs and RecommendedSnapshotID are what a head done says in
	// place of resultBase64: the result is the snapshot so named.
	SnapshotIDs           []string `json:"snapshotIds,omitempty"`
	RecommendedSnapshotID string   `json:"recommendedSnapshotId,omitempty"`
	// ResultChecksum is an extension of v1: the SHA-256 (hex) of the ZIP
	// resultBase64 carries, as START's checksum is of the workspace. Our
	// executor sends it; a delegator that gets it checks it, and one that
	// does not (the reference's) ignores it.
	ResultChecksum string `json:"resultChecksum,omitempty"`
	// ResultFile is the result ZIP as a local file, in place of
	// ResultBase64 or SnapshotBase64 (see WorkDirInfo.WorkspaceFile): on
	// the executor, the one appended when the event is sent; on the
	// delegator, the one the reader streamed it into.
	ResultFile string `json:"-"`
	ResultSum  string `json:"-"` // ResultFile's SHA-256 (hex), taken as it was decoded
	ResultErr  error  `json:"-"` // why ResultFile is unusable (not base64)

	// permission (an extension of v1; Message is the tool call's title)
	RequestID string             `json:"requestId,omitempty"`
	ToolCall  json.RawMessage    `json:"toolCall,omitempty"`
	Options   []PermissionOption `json:"options,omitempty"`
	Outcome   string             `json:"outcome,omitempty"`
	OptionID  string             `json:"optionId,omitempty"`
	DecidedBy string             `json:"decidedBy,omitempty"`

	// done and error: extensions of v1 that other peers skip. AgentStderr
	// is the end of what the agent wrote to stderr (a failure's message
	// holds it already; a success would lose it); MountRefused is what a
	// read-only live mount refused the agent.
	AgentStderr  string        `json:"agentStderr,omitempty"`
	MountRefused *MountRefused `json:"mountRefused,omitempty"`
}

// MountRefused is what a read-only live mount refused: how many writes,
// and the first few (operation and name).
type MountRefused = lease.MountRefused

// PermissionOption is one choice of a permission event (ACP's
// PermissionOption), as the worker reports it.
type PermissionOption = lease.PermissionOption

// PermissionAnswer is the body of POST /awcp/tasks/{id}/permission: the
// delegator's choice for a pending request.
type PermissionAnswer struct {
	RequestID string `json:"requestId"`
	OptionID  string `json:"optionId"`
}

// Terminal reports whether no event follows this one.
func (e *Event) Terminal() bool { return e.Type == EventDone || e.Type == EventError }

// Marshal encodes a message or event as it goes on the wire: compact, and
// without the HTML escaping of encoding/json ("250MB > 100MB" stays as is).
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Timestamp formats t the way the spec's examples do.
func Timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// ParseTimestamp reads an ISO 8601 timestamp as the spec uses them.
func ParseTimestamp(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// PrimaryResource is the resource a head executor runs its agent in, as
// the reference does: the first rw one, else the only one, else none (the
// environment root).
func (env *Environment) PrimaryResource() string {
	for _, r := range env.Resources {
		if r.Mode == AccessRW {
			return r.Name
		}
	}
	if len(env.Resources) == 1 {
		return env.Resources[0].Name
	}
	return ""
}

func Header(typ, id string) BaseMessage {
	return BaseMessage{Version: Version, Type: typ, DelegationID: id}
}

// NewError builds an ERROR message.
func NewError(id, code, message, hint string) *Error {
	return &Error{BaseMessage: Header(TypeError, id), Code: code, Message: message, Hint: hint}
}

// NewDelegationID returns a random (v4) UUID.
func NewDelegationID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
