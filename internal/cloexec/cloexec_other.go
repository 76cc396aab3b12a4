//go:build !linux

package cloexec

// fdDir lists the process's descriptors on macOS and FreeBSD (fdescfs).
const fdDir = "/dev/fd"

// closeRange: none used here; FreeBSD's close_range has no CLOEXEC flag
// before 15, macOS has none.
func closeRange() bool { return false }
