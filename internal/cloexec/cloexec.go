// Package cloexec keeps a process's descriptors from its children.
package cloexec

import (
	"os"
	"strconv"
	"syscall"
)

// All makes every descriptor above stderr close-on-exec. Go opens its own
// descriptors close-on-exec, and what a child is meant to have is dup'ed
// into it at fork, so this takes from children only what they were never
// meant to inherit.
func All() {
	if closeRange() {
		return
	}
	walk(fdDir)
}

// walk marks close-on-exec each descriptor listed in dir (/proc/self/fd,
// /dev/fd): the portable way, where the system has no call for it.
func walk(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
