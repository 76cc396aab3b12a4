//go:build linux

package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	x32Bit    = 0x40000000 // __X32_SYSCALL_BIT
)

var legacyModeCalls = []modeArg{
	{unix.SYS_CHMOD, 1},
	{unix.SYS_OPEN, 2},
	{unix.SYS_CREAT, 1},
	{unix.SYS_MKDIR, 1},
	{unix.SYS_MKNOD, 1},
}
