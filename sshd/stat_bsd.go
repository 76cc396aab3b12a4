//go:build darwin || freebsd

package sshd

import (
	"syscall"
	"time"
)

// fileTimes are a Stat_t's times, which each system names its own way.
type fileTimes struct{ atime, mtime, ctime time.Time }

func statTimes(st *syscall.Stat_t) fileTimes {
	return fileTimes{time.Unix(st.Atimespec.Unix()), time.Unix(st.Mtimespec.Unix()), time.Unix(st.Ctimespec.Unix())}
}
