//go:build linux

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// No set-id file or directory of the command's making. A file it makes
// setuid in a directory the operator lent read-write would run as that
// directory's owner for whoever runs it later on the host — root, where
// the grant is root's and bound idmapped — and MOUNT_ATTR_NOSUID on the
// sandbox's own binds holds only inside the sandbox. So a seccomp filter
// refuses, with EPERM, every call that would set S_ISUID or S_ISGID by
// its mode argument: chmod and its kin, the creating opens, mkdir and
// mknod. openat2, whose mode sits in a struct the filter cannot read, and
// io_uring, whose operations it cannot see at all, answer ENOSYS: libc
// and the runtimes fall back to openat and read(2) when they do. Calls
// of another ABI than the helper's own (i386's int 0x80, x32 on x86-64),
// which would bypass the numbers below, are refused outright.

// setidBits are the mode bits no confined command may set.
const setidBits = unix.S_ISUID | unix.S_ISGID

// modeArg is a syscall that takes a mode, and which of its arguments
// the mode is.
type modeArg struct {
	nr  uint32
	arg uint32
}

// modeCalls are the calls that set a mode, on every architecture; the
// legacy ones (chmod, open, …) are in setid_$GOARCH.go.
var modeCalls = append([]modeArg{
	{unix.SYS_FCHMOD, 1},
	{unix.SYS_FCHMODAT, 2},
	{unix.SYS_FCHMODAT2, 2},
	{unix.SYS_OPENAT, 3},
	{unix.SYS_MKDIRAT, 2},
	{unix.SYS_MKNODAT, 2},
}, legacyModeCalls...)

// unseenCalls are the calls whose mode the filter cannot read.
var unseenCalls = []uint32{unix.SYS_OPENAT2, unix.SYS_IO_URING_SETUP}

// keyCalls are the kernel keyrings' calls, refused outright (as Docker's
// default profile refuses them): the keys the executor's process holds
// in its session keyring, and those a uid's user keyring keeps from one
// process of that uid to the next — one delegation's agent to another's,
// where both run as the same agent uid — are no confined command's to
// read, search or leave. The helper also joins a new, anonymous session
// keyring before the command starts (joinOwnKeyring).
var keyCalls = []uint32{unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_KEYCTL}

// seccomp_data's layout: nr, arch, instruction pointer, then the six
// arguments of 8 bytes each (their low word first on the little-endian
// architectures this builds for).
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// setidFilter is the BPF program: the native ABI only, and no set-id bit
// in the mode of a call that sets one.
func setidFilter() []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	allow := stmt(ret, unix.SECCOMP_RET_ALLOW)
	eperm := stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	enosys := stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))

	prog := []unix.SockFilter{
		stmt(ld, offArch),
		jump(jeq, auditArch, 1, 0),
		eperm,
		stmt(ld, offNr),
		jump(jge, x32Bit, 0, 1), // x32's numbers have this bit (zero elsewhere: never taken)
		eperm,
	}
	for _, nr := range unseenCalls {
		prog = append(prog, jump(jeq, nr, 0, 1), enosys)
	}
	for _, nr := range keyCalls {
		prog = append(prog, jump(jeq, nr, 0, 1), eperm)
	}
	// Each call that sets a mode: if it is this one, its mode argument's
	// low word is tested for a set-id bit (and the call answered either
	// way); if not, on to the next, nr still loaded.
	for _, c := range modeCalls {
		prog = append(prog,
			jump(jeq, c.nr, 0, 4),
			stmt(ld, offArgs+8*c.arg),
			jump(jset, setidBits, 0, 1),
			eperm,
			allow,
		)
	}
	return append(prog, allow)
}

// joinOwnKeyring makes this thread's session keyring a new, anonymous
// one, which the command inherits in place of the executor's: whatever
// the executor's session holds is not the command's by possession.
// Where the executor's own seccomp profile refuses keyctl(2) already (a
// container runtime's default), no process of it has a keyring to give.
func joinOwnKeyring() error {
	_, _, errno := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	if errno != 0 && errno != unix.ENOSYS && errno != unix.EPERM {
		return fmt.Errorf("a session keyring of its own: %w", errno)
	}
	return nil
}

// refuseSetid installs setidFilter on this thread, which starts the
// command: the command and all it starts inherit it, and cannot lift it.
func refuseSetid() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no new privileges: %w", err)
	}
	filter := setidFilter()
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("seccomp: the filter of set-id modes: %w", errno)
	}
	return nil
}
