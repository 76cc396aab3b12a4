// Package peercred admits to a unix socket only the processes of the user
// who serves it (and root, who could read its memory anyway): the kernel's
// word for who connected — SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS
// and FreeBSD — beside the socket file's mode, which a directory made
// readable by mistake, or a socket file copied with its mode lost, no
// longer protects.
package peercred

import (
	"errors"
	"net"
	"os"
)

// ErrOtherUser is a connection from another user's process.
var ErrOtherUser = errors.New("a process of another user connected")

// Admit reports whether the process at the other end of c may use it:
// this process's user, or root.
func Admit(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket")
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var uid uint32
	var uerr error
	if err := rc.Control(func(fd uintptr) { uid, uerr = peerUID(int(fd)) }); err != nil {
		return err
	}
	if uerr != nil {
		return uerr
	}
	if uid != 0 && int(uid) != os.Getuid() {
		return ErrOtherUser
	}
	return nil
}

// SameUser is ln, whose Accept closes at once every connection Admit
// refuses and goes on to the next.
func SameUser(ln net.Listener) net.Listener { return sameUser{ln} }

type sameUser struct{ net.Listener }

func (l sameUser) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if Admit(c) == nil {
			return c, nil
		}
		c.Close()
	}
}
