package e2e

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// noUserNSEnv has this binary, re-run, execute the program its arguments
// name where no user namespace can be made — as on a distribution that
// forbids unprivileged ones (a sysctl, AppArmor): a seccomp filter
// answers clone and unshare with CLONE_NEWUSER EPERM, and clone3 ENOSYS
// (its flags are out of a filter's reach; the runtime falls back to
// clone). The kernel's own switch is not this test's to turn: root here
// has no CAP_SYS_RESOURCE.
const noUserNSEnv = "AWCP_E2E_NO_USERNS"

func execWithoutUserNS() int {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 126
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	allow := unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW}
	prog := []unix.SockFilter{
		{Code: ld, K: 0}, // nr
		{Code: jeq, K: unix.SYS_CLONE3, Jt: 0, Jf: 1},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: jeq, K: unix.SYS_CLONE, Jt: 1, Jf: 0},
		{Code: jeq, K: unix.SYS_UNSHARE, Jt: 0, Jf: 3},
		{Code: ld, K: 16}, // arg0's low word: the flags
		{Code: jset, K: unix.CLONE_NEWUSER, Jt: 0, Jf: 1},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		allow,
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		fmt.Fprintln(os.Stderr, "seccomp:", errno)
		return 126
	}
	var env []string
	for _, e := range os.Environ() {
		if len(e) < len(noUserNSEnv) || e[:len(noUserNSEnv)] != noUserNSEnv {
			env = append(env, e)
		}
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], env)
	fmt.Fprintln(os.Stderr, "exec:", err)
	return 127
}
