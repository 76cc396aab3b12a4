//go:build linux

package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	x32Bit    = 0xffffffff // no x32 here: the jump is never taken
)

var legacyModeCalls []modeArg // arm64 has only the *at calls
