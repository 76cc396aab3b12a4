package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"log/slog"
	"os"
	"syscall"

	"github.com/awcp/awcp/fs/sftpc"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// toErrno is the one place client errors become errnos. Unknown errors
// are logged and become EIO; a cancelled call is EINTR.
func toErrno(ctx context.Context, log *slog.Logger, op, p string, err error) syscall.Errno {
	var (
		errno syscall.Errno
		st    *sftpc.StatusError
	)
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil:
		return syscall.EINTR
	case errors.As(err, &errno):
		return errno
	case errors.As(err, &st):
		return statusErrno(st)
	case errors.Is(err, iofs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, iofs.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, iofs.ErrExist):
		return syscall.EEXIST
	case connErr(err), errors.Is(err, errGone), errors.Is(err, errUnreachable), errors.Is(err, os.ErrClosed):
		log.Debug("fs: no connection to the delegator", "op", op, "path", p, "err", err)
		return syscall.EIO
	}
	log.Warn("fs: remote error", "op", op, "path", p, "err", err)
	return syscall.EIO
}

// statusErrno is the errno of a server's status: the one its message
// names (our server's, sftpwire.ErrnoMessage), else what sshfs gives for
// the code. EIO is kept for a lost connection: tools take it for a
// failing disk.
func statusErrno(st *sftpc.StatusError) syscall.Errno {
	if errno, ok := wire.ErrnoOf(st.Msg); ok && (st.Code == sftpc.StatusFailure || st.Code == sftpc.StatusPermissionDenied) {
		return errno
	}
	switch st.Code {
	case sftpc.StatusNoSuchFile:
		return syscall.ENOENT
	case sftpc.StatusPermissionDenied:
		return syscall.EACCES
	case sftpc.StatusOpUnsupported:
		return syscall.ENOTSUP
	case sftpc.StatusBadMessage:
		return syscall.EBADMSG
	}
	return syscall.EPERM
}

// isFailure reports SSH_FX_FAILURE, which SFTP v3 uses for EEXIST,
// ENOTEMPTY and more; callers probe to tell which.
func isFailure(err error) bool {
	var st *sftpc.StatusError
	return errors.As(err, &st) && st.Code == sftpc.StatusFailure
}
