package control

// Decoding a peer's message and checking it field by field (spec §4),
// before anything acts on it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

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
func DecodeMessage(data []byte) (any, error) { return DecodeMessageSpooled(data, nil) }

// DecodeMessageSpooled is DecodeMessage of a message whose workspaceBase64, if it
// is a START, was diverted into a file as it was read.
func DecodeMessageSpooled(data []byte, workspace *Spooled) (any, error) {
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
	case TypeContinue:
		msg = new(Continue)
	case TypeClose:
		msg = new(Close)
	default:
		return nil, fieldErr("type", "unknown message type %q", base.Type)
	}
	if err := strictUnmarshal(data, msg); err != nil {
		return nil, err
	}
	if st, ok := msg.(*Start); ok && workspace != nil {
		st.WorkDir.WorkspaceFile, st.WorkDir.Received = workspace.File, workspace
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
		case "", TransportSSHFS, TransportArchive, TransportGit:
		default:
			return fieldErr("requirements.transport", "must be \"sshfs\", \"archive\" or \"git\", not %q", m.Requirements.Transport)
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
	case TransportGit:
		if w.RepoURL != "" { // the reference's: its remote
			switch {
			case w.BaseBranch == "":
				return fieldErr(at+".baseBranch", "is required with repoUrl")
			case w.Auth != nil && w.Auth.Type != "token" && w.Auth.Type != "ssh" && w.Auth.Type != "none":
				return fieldErr(at+".auth.type", "must be token, ssh or none")
			}
			return nil
		}
		fallthrough // awcp's: the same SSH endpoint and credential as the live mount
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
		return fieldErr(at+".transport", "must be \"sshfs\", \"archive\" or \"git\", not %q", w.Transport)
	}
	return nil
}

func (m *Continue) validate() error {
	if err := m.BaseMessage.validate(); err != nil {
		return err
	}
	if m.Round < 2 {
		return fieldErr("round", "must be 2 or more (round 1 is START's)")
	}
	if strings.TrimSpace(m.Task.Prompt) == "" && strings.TrimSpace(m.Task.Description) == "" {
		return fieldErr("task", "needs a prompt or a description")
	}
	if m.Lease != nil {
		if _, err := ParseTimestamp(m.Lease.ExpiresAt); err != nil {
			return fieldErr("lease.expiresAt", "must be an ISO 8601 time such as 2026-02-01T13:00:00.000Z")
		}
		if err := validAccess("lease.accessMode", m.Lease.AccessMode); err != nil {
			return err
		}
	}
	return nil
}

func (m *Close) validate() error { return m.BaseMessage.validate() }

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
	case EventRoundDone:
		if ev.Round < 1 {
			return nil, fieldErr("round", "must be 1 or more")
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
