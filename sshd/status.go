package sshd

import (
	"errors"
	"io"
	"io/fs"
	"strings"
	"syscall"

	"github.com/awcp/awcp/internal/confine"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// The status an error is answered with: the errno text only, never a host
// path, and each of the export's refusals with its own message after the
// errno a local file system would give (sftpwire.ErrnoMessage).

func (s *sftpServer) status(id uint32, code uint32, msg string) {
	if code != wire.OK && code != wire.EOF {
		s.metrics.SFTPError(statusName(code))
	}
	b := newBuf()
	b.Byte(wire.Status)
	b.U32(id)
	b.U32(code)
	b.Str(msg)
	b.Str("")
	s.send(b)
}

// errStatus answers id with the status err maps to. Messages carry only
// the errno text: never a host path.
func (s *sftpServer) errStatus(id uint32, err error) {
	code, msg := statusOf(err)
	s.status(id, code, msg)
}

func statusOf(err error) (uint32, string) {
	var errno syscall.Errno
	switch {
	case err == nil:
		return wire.OK, "OK"
	case errors.Is(err, io.EOF):
		return wire.EOF, "EOF"
	case errors.Is(err, errReadOnly):
		return wire.PermissionDenied, wire.ErrnoMessage(syscall.EROFS, "read-only delegation")
	case errors.Is(err, errWriteLimit):
		return wire.PermissionDenied, wire.ErrnoMessage(syscall.EDQUOT, err.Error())
	case errors.Is(err, errHidden), errors.Is(err, errNoDelete), errors.Is(err, errGitControl), errors.Is(err, errOutOfScope):
		return wire.PermissionDenied, wire.ErrnoMessage(syscall.EACCES, err.Error())
	case errors.Is(err, errBadMessage):
		return wire.BadMessage, "bad message"
	case errors.Is(err, errUnsupported):
		return wire.OpUnsupported, "operation unsupported"
	case errors.Is(err, fs.ErrNotExist):
		return wire.NoSuchFile, "no such file"
	case errors.Is(err, fs.ErrPermission):
		return wire.PermissionDenied, "permission denied"
	case errors.Is(err, confine.ErrEscape):
		return wire.PermissionDenied, confine.ErrEscape.Error()
	case errors.Is(err, errEscape), isEscape(err):
		return wire.PermissionDenied, "path leaves the delegated directory"
	case errors.As(err, &errno):
		return wire.Failure, errno.Error()
	}
	return wire.Failure, "failure"
}

var (
	errReadOnly    = errors.New("read-only")
	errUnsupported = errors.New("unsupported")
)

// isEscape reports os.Root's refusal of a path that leads out.
func isEscape(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes")
}
