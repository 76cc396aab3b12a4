package sshd

import (
	"time"
)

// Op is one operation of a delegation's SFTP sessions, as its audit log
// records it. Reads and writes are recorded once per handle, when it is
// closed, with their bytes; a stat, a readlink or a realpath is not
// recorded (a tree walk would drown the rest), a listing is.
type Op struct {
	At      time.Time `json:"at"`
	Kind    string    `json:"op"`                // one of the Op* kinds
	Path    string    `json:"path"`              // relative to the directory lent; "." is the directory
	To      string    `json:"to,omitempty"`      // a rename's or link's new name, a symlink's target
	Bytes   int64     `json:"bytes,omitempty"`   // read or written
	Err     string    `json:"error,omitempty"`   // why it failed or was refused; "" if it succeeded
	Refused bool      `json:"refused,omitempty"` // by the export's policy or its access mode
	// Replaced says a rename's new name held something it replaced (a
	// file rewritten as sed -i and editors do: modified, not added).
	Replaced bool `json:"replaced,omitempty"`
	// Ahead says a read sent the file with its directory's listing
	// (list-read@awcp), the mount fetching ahead of the agent: its
	// contents reached the executor, whether or not the agent opened it.
	Ahead bool `json:"ahead,omitempty"`
}

// Kinds of Op.
const (
	OpRead    = "read"
	OpWrite   = "write"
	OpCreate  = "create"
	OpOpen    = "open" // only recorded when it fails or is refused
	OpMkdir   = "mkdir"
	OpRemove  = "remove"
	OpRmdir   = "rmdir"
	OpRename  = "rename"
	OpLink    = "link"
	OpSymlink = "symlink"
	OpSetattr = "setattr" // of the size, mode or owner: times alone are not recorded
	OpList    = "list"
	OpLookup  = "lookup" // only recorded when refused: a stat or readlink of a hidden name
)

// Recorder takes a delegation's operations. Record is called on the
// request's path, once its answer is known: it must not block, and never
// on disk I/O.
type Recorder interface {
	Record(Op)
}

// record gives op to the session's recorder, if it has one. Its paths are
// the real ones: the directories above them resolved by the kernel, so an
// operation through a symlinked parent (x -> .aws) is recorded under
// .aws, not x.
func (s *sftpServer) record(op Op) {
	if s.audit == nil {
		return
	}
	op.Path = s.realName(op.Path)
	if op.Kind == OpRename || op.Kind == OpLink {
		op.To = s.realName(op.To)
	}
	s.recordReal(op)
}

// recordReal is record of an op whose path the kernel resolved already
// (opened, openDir): resolving it again would cost two more system calls
// and an open descriptor for the same answer.
func (s *sftpServer) recordReal(op Op) {
	if s.audit == nil {
		return
	}
	op.At = time.Now()
	s.audit.Record(op)
}

// done answers id with err's status and records op with that outcome.
func (s *sftpServer) done(id uint32, op Op, err error) {
	if s.audit != nil {
		if err != nil {
			op.Err, op.Refused = refusal(err)
		}
		s.record(op)
	}
	s.errStatus(id, err)
}

// refusal is err as the audit log says it, and whether the export refused
// it (rather than the file system failing it).
func refusal(err error) (string, bool) {
	_, msg := statusOf(err)
	return msg, isRefusal(err)
}

// closed records what was read and written through h, now closed.
func (s *sftpServer) closed(h *handle) {
	if s.audit == nil || h.dir {
		return
	}
	if n := h.readBytes.Load(); n > 0 {
		s.recordReal(Op{Kind: OpRead, Path: h.name, Bytes: n})
	}
	if n := h.writeBytes.Load(); n > 0 || h.truncated {
		s.recordReal(Op{Kind: OpWrite, Path: h.name, Bytes: n})
	}
}
