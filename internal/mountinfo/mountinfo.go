// Package mountinfo reads this process's mount table
// (/proc/self/mountinfo, Linux). It needs no FUSE library, so that a
// program that only checks mounts (the executor's clean-up) does not link
// one.
package mountinfo

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// IsMountpoint reports whether something is mounted at p, from the mount
// table: a stat would go to a FUSE server, and fail with EIO when the
// server's peer is gone. A work dir that still is a mountpoint must never
// be deleted recursively.
func IsMountpoint(p string) bool {
	abs, err := filepath.Abs(p)
	if err != nil {
		return false
	}
	mps, err := Points("")
	if err != nil {
		return false
	}
	for _, mp := range mps {
		if mp == abs {
			return true
		}
	}
	return false
}

// Under lists the mountpoints at dir or below it, deepest first (the order
// they unmount in). None also when the table cannot be read.
func Under(dir string) []string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	mps, err := Points("")
	if err != nil {
		return nil
	}
	var out []string
	for _, mp := range mps {
		if mp == abs || strings.HasPrefix(mp, abs+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// Points lists the mountpoints of one file system type or ("") all.
func Points(fstype string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(line)
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		if fstype == "" || fields[sep+1] == fstype {
			// mountinfo escapes space, tab, newline and backslash as \ooo.
			out = append(out, unescapeOctal(fields[4]))
		}
	}
	return out, nil
}

func unescapeOctal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
