//go:build !linux

// The sandbox is Linux's Landlock, namespaces and seccomp. Elsewhere (the
// delegator on macOS or FreeBSD) there is none, and what needs one is
// refused, with the reason, never run with less.

package sandbox

import (
	"errors"
	"os/exec"
	"runtime"
)

// ErrUnsupported is the refusal: no sandbox on this system.
var ErrUnsupported = errors.New("the sandbox that runs an executor's code here needs Linux (Landlock, namespaces, seccomp); " +
	runtime.GOOS + " has none: run this on Linux")

// Policy is a sandbox, which this system cannot make.
type Policy struct{}

// ForeignCode is refused here.
func ForeignCode(dir string, maxMemory uint64) (*Policy, error) { return nil, ErrUnsupported }

// Describe says there is none.
func Describe(p *Policy) string { return "no sandbox (" + runtime.GOOS + ")" }

// Wrap is refused here.
func (p Policy) Wrap(cmd *exec.Cmd) error { return ErrUnsupported }
