// Package cloexec keeps a process's descriptors from its children (Linux).
package cloexec

import (
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// All makes every descriptor above stderr close-on-exec: Linux 5.11's
// close_range in one call, else a walk of /proc/self/fd. Go opens its own
// descriptors close-on-exec, and what a child is meant to have is dup'ed
// into it at fork, so this takes from children only what they were never
// meant to inherit.
func All() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
