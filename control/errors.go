package control

import (
	"errors"
	"fmt"

	"github.com/awcp/awcp/lease"
)

// The error codes of spec §4.6. They are the only codes put on the wire.
const (
	CodeDeclined          = "DECLINED"
	CodeDepMissing        = "DEP_MISSING"
	CodeWorkspaceTooLarge = "WORKSPACE_TOO_LARGE"
	CodeWorkspaceNotFound = "WORKSPACE_NOT_FOUND"
	CodeWorkspaceInvalid  = "WORKSPACE_INVALID"
	CodeWorkdirDenied     = "WORKDIR_DENIED"
	CodeStartExpired      = "START_EXPIRED"
	CodeExpired           = "EXPIRED"
	CodeAuthFailed        = "AUTH_FAILED"
	CodeSetupFailed       = "SETUP_FAILED"
	CodeTaskFailed        = "TASK_FAILED"
	CodeCancelled         = "CANCELLED"

	// CodeNotFound is not a wire code: the CLI's and MCP tools' answer to
	// a delegation id this delegator does not know.
	CodeNotFound = "NOT_FOUND"

	// CodeUsage is not a wire code either: the caller's own mistake — a
	// flag, a URL, a key not trusted, an answer, a delegation in the wrong
	// state for what was asked — found here, before anything went to an
	// executor. DECLINED would blame the executor. The CLI exits 2 for it,
	// as for bad flags; a delegation refused so is not listed.
	CodeUsage = lease.UsageCode

	// ReasonUnreachable is a SETUP_FAILED's reason (an extension) when the
	// executor did not answer at all: connection refused, no route, timed
	// out. DECLINED would say it refused.
	ReasonUnreachable = "executor_unreachable"
)

var knownCodes = map[string]bool{
	CodeDeclined: true, CodeDepMissing: true, CodeWorkspaceTooLarge: true,
	CodeWorkspaceNotFound: true, CodeWorkspaceInvalid: true, CodeWorkdirDenied: true,
	CodeStartExpired: true, CodeExpired: true, CodeAuthFailed: true,
	CodeSetupFailed: true, CodeTaskFailed: true, CodeCancelled: true,
}

// KnownCode reports whether code is one of the twelve v1 error codes.
func KnownCode(code string) bool { return knownCodes[code] }

// ProtocolError is a failure that carries a spec error code. It is how errors
// cross package boundaries inside awcp until they are turned into an ERROR
// message, an error event, or a CLI exit.
type ProtocolError struct {
	Code    string
	Message string
	Hint    string
	// Reason and CallChain are the extension fields of a circular call's
	// refusal (see CircularCall); empty otherwise.
	Reason    string
	CallChain []string
	Err       error // the cause, for logs; never put on the wire
}

func (e *ProtocolError) Error() string {
	if e.Hint != "" {
		return fmt.Sprintf("%s: %s (hint: %s)", e.Code, e.Message, e.Hint)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// Errorf builds a ProtocolError without a hint.
func Errorf(code, format string, args ...any) *ProtocolError {
	return &ProtocolError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithHint returns e with hint set.
func (e *ProtocolError) WithHint(hint string) *ProtocolError {
	c := *e
	c.Hint = hint
	return &c
}

// AsProtocolError finds the ProtocolError in err's chain, or describes err
// under fallback code.
func AsProtocolError(err error, fallback string) *ProtocolError {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return pe
	}
	return &ProtocolError{Code: fallback, Message: err.Error(), Err: err}
}

// ToMessage turns a ProtocolError into the ERROR message for delegation id.
func (e *ProtocolError) ToMessage(id string) *Error {
	m := NewError(id, e.Code, e.Message, e.Hint)
	m.Reason, m.CallChain = e.Reason, e.CallChain
	return m
}

// ProtocolError is the failure an ERROR message reports.
func (m *Error) ProtocolError() *ProtocolError {
	return &ProtocolError{Code: m.Code, Message: m.Message, Hint: m.Hint, Reason: m.Reason, CallChain: m.CallChain}
}
