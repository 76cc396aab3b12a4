package sshd

import (
	"syscall"
	"time"
)

// fileTimes are a Stat_t's times, which each system names its own way.
type fileTimes struct{ atime, mtime, ctime time.Time }

func statTimes(st *syscall.Stat_t) fileTimes {
	return fileTimes{time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix()), time.Unix(st.Ctim.Unix())}
}
