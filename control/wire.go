// Package control holds the AWCP v1 control plane: the wire types of spec §4,
// the executor's HTTP service, the delegator's client and orchestration, and
// admission control.
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
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/awcp/awcp/lease"
)

// Version is the only protocol version this implementation speaks.
const Version = "1"

// Message types of spec §4.1.
const (
	TypeInvite = "INVITE"
	TypeAccept = "ACCEPT"
	TypeStart  = "START"
	TypeDone   = "DONE"
	TypeError  = "ERROR"
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
)

// Event types of spec §3.4.
const (
	EventStatus = "status"
	EventDone   = "done"
	EventError  = "error"
	// EventSnapshot is the head dialect's result: a ZIP of the
	// environment (a folder per resource), sent before done.
	EventSnapshot = "snapshot"
	// EventPermission is an extension of v1: an ACP agent's permission
	// request, pending or decided. Delegators that do not know the type
	// ignore it, so the v1 wire stays compatible.
	EventPermission = "permission"
)

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

	// archive
	WorkspaceBase64 string `json:"workspaceBase64,omitempty"`
	Checksum        string `json:"checksum,omitempty"`
	// WorkspaceFile is the workspace ZIP as a local file, in place of
	// WorkspaceBase64: the delegator streams it into the message as it
	// sends START, and the executor's reader streams workspaceBase64 into
	// it, so that neither holds the workspace in memory.
	WorkspaceFile string `json:"-"`
	// received is workspaceBase64 as the executor's reader decoded it into
	// WorkspaceFile: its checksum, or why it is unusable.
	received *spooled
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
type Error struct {
	BaseMessage
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
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
	resultSum  string // ResultFile's SHA-256 (hex), taken as it was decoded
	resultErr  error  // why ResultFile is unusable (not base64)

	// permission (an extension of v1; Message is the tool call's title)
	RequestID string             `json:"requestId,omitempty"`
	ToolCall  json.RawMessage    `json:"toolCall,omitempty"`
	Options   []PermissionOption `json:"options,omitempty"`
	Outcome   string             `json:"outcome,omitempty"`
	OptionID  string             `json:"optionId,omitempty"`
	DecidedBy string             `json:"decidedBy,omitempty"`
}

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

var (
	uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	dlgPattern  = regexp.MustCompile(`^dlg_[A-Za-z0-9_-]{1,120}$`)
)

// ValidDelegationID reports whether id is a UUID or dlg_ followed by letters,
// digits, '_' and '-'. Such an id is safe as a single path element.
func ValidDelegationID(id string) bool {
	return uuidPattern.MatchString(id) || dlgPattern.MatchString(id)
}

// FieldError is a decoding failure that names the offending field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// DecodeMessage parses one message posted to /awcp and validates it. The
// result is *Invite, *Accept, *Start or *Error. A failure is a *FieldError
// when a field is at fault, so the caller can answer with an ERROR naming it.
func DecodeMessage(data []byte) (any, error) { return decodeMessage(data, nil) }

// decodeMessage is DecodeMessage of a message whose workspaceBase64, if it
// is a START, was diverted into a file as it was read.
func decodeMessage(data []byte, workspace *spooled) (any, error) {
	var base BaseMessage
	if err := json.Unmarshal(data, &base); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, fieldErr(typeErr.Field, "must be a %s", typeErr.Type)
		}
		return nil, fieldErr("body", "not a JSON object: %v", err)
	}
	switch {
	case base.Version == "":
		return nil, fieldErr("version", "is required")
	case base.Version != Version:
		return nil, fieldErr("version", "unsupported version %q (this executor speaks %q)", base.Version, Version)
	case base.Type == "":
		return nil, fieldErr("type", "is required")
	}
	var msg interface{ validate() error }
	switch base.Type {
	case TypeInvite:
		msg = new(Invite)
	case TypeAccept:
		msg = new(Accept)
	case TypeStart:
		msg = new(Start)
	case TypeError:
		msg = new(Error)
	default:
		return nil, fieldErr("type", "unknown message type %q", base.Type)
	}
	if err := strictUnmarshal(data, msg); err != nil {
		return nil, err
	}
	if st, ok := msg.(*Start); ok && workspace != nil {
		st.WorkDir.WorkspaceFile, st.WorkDir.received = workspace.file, workspace
	}
	if err := msg.validate(); err != nil {
		return nil, err
	}
	return msg, nil
}

// strictUnmarshal decodes data into v, naming the field of a type mismatch.
// Unknown fields are tolerated: later minor revisions may add them.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var fe *FieldError
		if errors.As(err, &fe) {
			return fe
		}
		if errors.As(err, &typeErr) {
			return fieldErr(typeErr.Field, "must be a %s", typeErr.Type)
		}
		return fieldErr("body", "invalid JSON: %v", err)
	}
	return nil
}

func (b *BaseMessage) validate() error {
	if b.DelegationID == "" {
		return fieldErr("delegationId", "is required")
	}
	if !ValidDelegationID(b.DelegationID) {
		return fieldErr("delegationId", "must be a UUID or dlg_ followed by letters, digits, '_' or '-'")
	}
	return nil
}

func validAccess(field, mode string) error {
	switch mode {
	case "":
		return fieldErr(field, "is required")
	case AccessRO, AccessRW:
		return nil
	}
	return fieldErr(field, "must be \"ro\" or \"rw\", not %q", mode)
}

func (m *Invite) validate() error {
	if err := m.BaseMessage.validate(); err != nil {
		return err
	}
	switch {
	case m.Task.Description == "":
		return fieldErr("task.description", "is required")
	case m.Task.Prompt == "":
		return fieldErr("task.prompt", "is required")
	case m.Lease.TTLSeconds <= 0:
		return fieldErr("lease.ttlSeconds", "is required and must be a positive number of seconds")
	case m.Workspace == nil && m.Environment == nil:
		return fieldErr("workspace.exportName", "is required (or environment.resources, in the head dialect)")
	case m.Workspace != nil && m.Workspace.ExportName == "":
		return fieldErr("workspace.exportName", "is required")
	case m.RetentionMs != nil && *m.RetentionMs < 0:
		return fieldErr("retentionMs", "must not be negative")
	}
	if err := validAccess("lease.accessMode", m.Lease.AccessMode); err != nil {
		return err
	}
	if m.Environment != nil {
		if err := m.Environment.validate(); err != nil {
			return err
		}
	}
	if m.Requirements != nil {
		switch m.Requirements.Transport {
		case "", TransportSSHFS, TransportArchive:
		default:
			return fieldErr("requirements.transport", "must be \"sshfs\" or \"archive\", not %q", m.Requirements.Transport)
		}
	}
	if m.Auth != nil {
		switch m.Auth.Type {
		case "api_key", "bearer", "oauth2", "custom":
		default:
			return fieldErr("auth.type", "must be one of api_key, bearer, oauth2, custom")
		}
		if m.Auth.Credential == "" {
			return fieldErr("auth.credential", "is required")
		}
	}
	return nil
}

// resourceName is what a resource may be called: one path element, not
// hidden (the reference keeps .awcp/ in its environment root).
var resourceName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$`)

func (env *Environment) validate() error {
	if len(env.Resources) == 0 {
		return fieldErr("environment.resources", "must name at least one resource")
	}
	seen := map[string]bool{}
	for i, r := range env.Resources {
		field := fmt.Sprintf("environment.resources[%d]", i)
		switch {
		case !resourceName.MatchString(r.Name):
			return fieldErr(field+".name", "must be 1-64 letters, digits, '.', '_' or '-', not starting with '.'")
		case seen[r.Name]:
			return fieldErr(field+".name", "%q is named twice", r.Name)
		case r.Type != "fs":
			return fieldErr(field+".type", "must be \"fs\", not %q", r.Type)
		}
		if err := validAccess(field+".mode", r.Mode); err != nil {
			return err
		}
		seen[r.Name] = true
	}
	return nil
}

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

func (m *Accept) validate() error {
	if err := m.BaseMessage.validate(); err != nil {
		return err
	}
	if m.ExecutorWorkDir.Path == "" {
		return fieldErr("executorWorkDir.path", "is required")
	}
	if c := m.ExecutorConstraints; c != nil && c.AcceptedAccessMode != "" {
		if err := validAccess("executorConstraints.acceptedAccessMode", c.AcceptedAccessMode); err != nil {
			return err
		}
	}
	return nil
}

func (m *Start) validate() error {
	if err := m.BaseMessage.validate(); err != nil {
		return err
	}
	if m.Lease.ExpiresAt == "" {
		return fieldErr("lease.expiresAt", "is required")
	}
	if _, err := ParseTimestamp(m.Lease.ExpiresAt); err != nil {
		return fieldErr("lease.expiresAt", "must be an ISO 8601 time such as 2026-02-01T13:00:00.000Z")
	}
	if err := validAccess("lease.accessMode", m.Lease.AccessMode); err != nil {
		return err
	}
	return m.WorkDir.validate(m.workDirField())
}

// ValidateWorkDir checks a workDir on its own, as `awcp-fs mount` reads one.
func ValidateWorkDir(w *WorkDirInfo) error { return w.validate("workDir") }

// validate checks w, which is START's member at.
func (w *WorkDirInfo) validate(at string) error {
	switch w.Transport {
	case "":
		return fieldErr(at+".transport", "is required (START has no workDir or transportHandle)")
	case TransportArchive:
		if w.WorkspaceBase64 == "" && w.WorkspaceFile == "" {
			return fieldErr(at+".workspaceBase64", "is required")
		}
		if w.Checksum == "" {
			return fieldErr(at+".checksum", "is required")
		}
	case TransportSSHFS:
		switch {
		case w.Endpoint == nil:
			return fieldErr(at+".endpoint", "is required")
		case w.Endpoint.Host == "":
			return fieldErr(at+".endpoint.host", "is required")
		case w.Endpoint.Port <= 0 || w.Endpoint.Port > 65535:
			return fieldErr(at+".endpoint.port", "must be a TCP port")
		case w.Endpoint.User == "":
			return fieldErr(at+".endpoint.user", "is required")
		case w.ExportLocator == "":
			return fieldErr(at+".exportLocator", "is required")
		case w.Credential == nil:
			return fieldErr(at+".credential", "is required")
		case w.Credential.PrivateKey == "":
			return fieldErr(at+".credential.privateKey", "is required")
		case w.Credential.Certificate == "":
			return fieldErr(at+".credential.certificate", "is required")
		}
	default:
		return fieldErr(at+".transport", "must be \"sshfs\" or \"archive\", not %q", w.Transport)
	}
	return nil
}

func (m *Error) validate() error {
	// An ERROR may concern a message whose id was unusable, so only a
	// present id is checked.
	if m.DelegationID != "" && !ValidDelegationID(m.DelegationID) {
		return fieldErr("delegationId", "must be a UUID or dlg_ followed by letters, digits, '_' or '-'")
	}
	if m.Code == "" {
		return fieldErr("code", "is required")
	}
	if !KnownCode(m.Code) {
		return fieldErr("code", "unknown error code %q", m.Code)
	}
	if m.Message == "" {
		return fieldErr("message", "is required")
	}
	return nil
}

// DecodeEvent parses one SSE data payload.
func DecodeEvent(data []byte) (*Event, error) {
	var ev Event
	if err := strictUnmarshal(data, &ev); err != nil {
		return nil, err
	}
	switch {
	case ev.DelegationID == "":
		return nil, fieldErr("delegationId", "is required")
	case !ValidDelegationID(ev.DelegationID):
		return nil, fieldErr("delegationId", "is not a valid delegation id")
	case ev.Timestamp == "":
		return nil, fieldErr("timestamp", "is required")
	}
	switch ev.Type {
	case EventStatus:
		if ev.Status != StatusRunning && ev.Status != StatusProgress {
			return nil, fieldErr("status", "must be \"running\" or \"progress\"")
		}
	case EventDone:
		if ev.Summary == "" {
			return nil, fieldErr("summary", "is required")
		}
	case EventError:
		if ev.Code == "" {
			return nil, fieldErr("code", "is required")
		}
		if ev.Message == "" {
			return nil, fieldErr("message", "is required")
		}
	case EventSnapshot:
		if ev.SnapshotID == "" {
			return nil, fieldErr("snapshotId", "is required")
		}
	case EventPermission:
		if ev.RequestID == "" {
			return nil, fieldErr("requestId", "is required")
		}
		if ev.Outcome == "" {
			return nil, fieldErr("outcome", "is required")
		}
	case "":
		return nil, fieldErr("type", "is required")
	}
	// An event type this delegator does not know (a later extension) is
	// returned as it is, for the caller to ignore: the stream goes on.
	return &ev, nil
}

func header(typ, id string) BaseMessage {
	return BaseMessage{Version: Version, Type: typ, DelegationID: id}
}

// NewError builds an ERROR message.
func NewError(id, code, message, hint string) *Error {
	return &Error{BaseMessage: header(TypeError, id), Code: code, Message: message, Hint: hint}
}
