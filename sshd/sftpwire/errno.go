package sftpwire

import (
	"strings"
	"syscall"
)

// SFTP v3 has seven status codes; a local file system has a hundred
// errnos, and tools act on which one they get (EIO reads as a failing
// disk, ENAMETOOLONG as a name to shorten). Our server puts the errno's
// text at the start of a FAILURE's or PERMISSION_DENIED's message,
// optionally followed by ": " and a detail; our client maps it back. To
// any other client the message is plain text, as before.

// ErrnoMessage is the message that carries errno, with detail after it
// if not empty.
func ErrnoMessage(errno syscall.Errno, detail string) string {
	if detail == "" {
		return errno.Error()
	}
	return errno.Error() + ": " + detail
}

// errnoByText maps each errno's text back to it.
var errnoByText = func() map[string]syscall.Errno {
	m := make(map[string]syscall.Errno)
	for e := syscall.Errno(1); e < 134; e++ {
		if text := e.Error(); !strings.HasPrefix(text, "errno ") {
			if _, dup := m[text]; !dup { // EAGAIN and EWOULDBLOCK share one
				m[text] = e
			}
		}
	}
	return m
}()

// ErrnoOf is the errno a status message starts with, if any.
func ErrnoOf(msg string) (syscall.Errno, bool) {
	text, _, _ := strings.Cut(msg, ": ")
	e, ok := errnoByText[text]
	return e, ok
}
