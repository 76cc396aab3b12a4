//go:build linux

package sandbox

import (
	"fmt"
	"io/fs"

	"path/filepath"
	"strings"
	"syscall"
)

// A set-id program already in a read-write grant is the agent's to
// rewrite: the kernel clears S_ISUID and S_ISGID when a file is written
// by write(2) and its kin, but not when it is changed through a shared
// mapping (mmap, then stores), so an agent can put its own bytes in a
// setuid-root program of the grant and keep the bit, and whoever runs it
// on the host later runs the agent's code as root. The seccomp filter
// that keeps the agent from making set-id files cannot see a store to
// memory. So a read-write grant holding one is refused where the policy
// is built (SetidInGrant), and awcp-fs doctor says the same.

// maxSetidShown is how many set-id files an error names.
const maxSetidShown = 5

// SetidInGrant is an error naming the set-id files (regular files with
// S_ISUID, or S_ISGID and a group execute bit) in the read-write grant
// dir, nil if it holds none. Links are not followed and the walk keeps to
// dir's own filesystem, as the grant shows it to the agent.
func SetidInGrant(dir string) error {
	var root syscall.Stat_t
	if err := syscall.Stat(dir, &root); err != nil {
		return fmt.Errorf("read-write grant %s: %w", dir, err)
	}
	var found []string
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // unreadable to the daemon: not shown to an agent either
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil // a link, a device, a socket: no stat needed
		}
		info, err := d.Info() // the walk's own lstat, not a second one
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		switch {
		case !ok:
			return nil
		case d.IsDir() && st.Dev != root.Dev:
			return filepath.SkipDir // a mount beneath the grant: not in it
		case d.IsDir() || !setid(st.Mode):
			return nil
		}
		n++
		if len(found) < maxSetidShown {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read-write grant %s: %w", dir, err)
	}
	if n == 0 {
		return nil
	}
	more := ""
	if n > len(found) {
		more = fmt.Sprintf(" and %d more", n-len(found))
	}
	return &SetidError{Grant: dir, Files: found, Count: n,
		msg: fmt.Sprintf("read-write grant %s holds set-id programs (%s%s): an agent can rewrite one through a shared mapping and keep its set-id bit (the kernel clears it on write(2), not on a store to mmap'd memory)",
			dir, strings.Join(found, ", "), more)}
}

// SetidError is SetidInGrant's refusal.
type SetidError struct {
	Grant string
	Files []string // the first few
	Count int
	msg   string
}

func (e *SetidError) Error() string { return e.msg }

// Hint says what the operator may do instead.
func (e *SetidError) Hint() string {
	return "grant it read-only (" + e.Grant + ":ro), or clear the bits if nothing needs them (chmod u-s,g-s FILE)"
}

// setid reports whether a file of mode m runs as its owner or group.
func setid(m uint32) bool {
	return m&syscall.S_ISUID != 0 || (m&syscall.S_ISGID != 0 && m&0o010 != 0)
}
