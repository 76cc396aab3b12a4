//go:build linux

package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Foreign code: what of an executor's work runs on the owner's machine
// (compare's check runs the tests an executor's agent may have rewritten)
// runs as an executor's agent runs — in a root of its own holding the
// system read-only and its own directory, with a /tmp, /dev/shm and /proc
// of its own, a network of its own (loopback only: no host port, no
// abstract socket), no capability, no set-id bit, and bounded memory.
// Where the owner is root it also runs as a user of its own; where not,
// the root is built in a user namespace of its own. Where neither can be
// had, it does not run: ForeignCode says why.

// ForeignUID is the uid foreign code runs as where the owner is root:
// below the uids an executor on this machine gives its agents
// (control/executor's AgentUIDBase and its probe's).
const ForeignUID = 1_999_999_998

// ForeignCode is the policy for the executor's code run by the owner in
// dir (its only writable place, which it owns after: chowned to
// ForeignUID where the owner is root), each process's data bounded by
// maxMemory (0 for none). It is tried before it is returned: an error
// says why such a sandbox cannot be had here, and the code must not run.
func ForeignCode(dir string, maxMemory uint64) (*Policy, error) {
	p := &Policy{RW: []string{dir}, RO: slices.Clone(System), Devices: Devices, Isolated: true, NoNet: true, MaxMemory: maxMemory}
	switch {
	case CanIsolate():
		p.User = &User{UID: ForeignUID, GID: ForeignUID, Home: dir}
		if err := filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, ForeignUID, ForeignUID)
		}); err != nil {
			return nil, fmt.Errorf("give the sandbox its directory: %w", err)
		}
	case os.Geteuid() == 0:
		return nil, errors.New("this process is root without the capabilities a sandbox takes (CAP_SYS_ADMIN, CAP_SETUID, …): the executor's code is not run with less")
	default:
		p.UserNS = true
	}
	if err := p.try(dir); err != nil {
		why := err.Error()
		if p.UserNS {
			why = "this user cannot make a user namespace of its own (" + why + "): run as root, or allow unprivileged user namespaces (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns)"
		}
		return nil, fmt.Errorf("no sandbox for the executor's code here: %s", why)
	}
	return p, nil
}

// try runs true under p in dir: what fails to build the sandbox fails
// here, with what the helper said, before the real command is trusted to it.
func (p Policy) try(dir string) error {
	cmd := exec.Command("/bin/true")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := p.Wrap(cmd); err != nil {
		return err
	}
	err := cmd.Run()
	if msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), "awcp sandbox: ")); msg != "" {
		return errors.New(msg)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fmt.Errorf("namespaces: %w", errno)
	}
	return err
}
