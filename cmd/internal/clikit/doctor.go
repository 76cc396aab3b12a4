package clikit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// Checklist prints the lines of a doctor command: each check OK or FAIL
// with what was found, and for a failure the fix.
type Checklist struct {
	W      io.Writer
	Failed int
}

// OK is a check that passed.
func (l *Checklist) OK(what, detail string) {
	fmt.Fprintf(l.W, "OK    %-22s %s\n", what, detail)
}

// Fail is a check that did not, and how to put it right.
func (l *Checklist) Fail(what, detail, fix string) {
	l.Failed++
	fmt.Fprintf(l.W, "FAIL  %-22s %s\n", what, detail)
	if fix != "" {
		fmt.Fprintf(l.W, "      %-22s fix: %s\n", "", fix)
	}
}

// Info is a line that is neither (what the checks conclude).
func (l *Checklist) Info(what, detail string) {
	fmt.Fprintf(l.W, "      %-22s %s\n", what, detail)
}

// Result is the exit of a doctor command: 1 if anything failed.
func (l *Checklist) Result() error {
	if l.Failed > 0 {
		return Failed()
	}
	return nil
}

// CheckStateDir checks that dir is this user's alone (0700, owned by
// them), and so are the files in it that hold keys and leases.
func CheckStateDir(l *Checklist, dir string, private ...string) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.OK("state dir", dir+" (made at first use, 0700)")
		return
	case err != nil:
		l.Fail("state dir", err.Error(), "")
		return
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st != nil && int(st.Uid) != os.Geteuid() {
		l.Fail("state dir", fmt.Sprintf("%s is owned by uid %d, not you (%d)", dir, st.Uid, os.Geteuid()),
			"use a state dir of your own (--state-dir), or chown it")
		return
	}
	if fi.Mode().Perm()&0o077 != 0 {
		l.Fail("state dir", fmt.Sprintf("%s is %v: others may read keys and leases", dir, fi.Mode().Perm()), "chmod 700 "+dir)
		return
	}
	for _, name := range private {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o077 != 0 {
			l.Fail("state dir", fmt.Sprintf("%s is %v", p, fi.Mode().Perm()), "chmod 600 "+p)
			return
		}
	}
	l.OK("state dir", dir+" (0700, yours)")
}

// CheckPortFree checks that addr can be listened on; in use, running
// names who should hold it (if that is the daemon, the port being taken
// is fine).
func CheckPortFree(l *Checklist, what, addr string, running bool, fix string) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		l.OK(what, addr+" is free")
		return
	}
	if running && errors.Is(err, syscall.EADDRINUSE) {
		l.OK(what, addr+" is in use by the running daemon")
		return
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		err = errno
	}
	l.Fail(what, fmt.Sprintf("cannot listen on %s: %v", addr, err), fix)
}
