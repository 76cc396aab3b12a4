//go:build linux

// Package sandbox confines an executor's agent and everything it starts
// with Landlock (Linux 5.13+; scoping needs ABI 6, Linux 6.12+): the
// agent writes beneath its own work directory and temporary directory
// only, reads and executes the system's directories, and reaches nothing
// else — not the executor's state, not the other delegations' work
// directories, not the home directories — unless the operator grants it.
// Landlock's scoping keeps it from signalling processes outside its
// sandbox (the daemon, other agents).
//
// Where the executor runs as root, the agent also gets a root of its own
// (root.go) and a user of its own: fresh mount, PID and IPC namespaces
// whose filesystem holds the system read-only, its grants, a /dev of a
// few devices, its own /proc, and empty /tmp, /run, /var/tmp and
// /dev/shm — nothing of the daemon's state, of other delegations' mounts
// or of the host's sockets — and it runs as an unprivileged uid of its
// own, so that what root may read (/etc/shadow, the daemon's 0600
// configuration) it may not. Without root none of that is available:
// /proc shows the daemon and the other agents (Landlock's ptrace rule did
// not keep a confined process from reading another's /proc/PID/environ
// on the kernels tested, 6.18), and the agent is the daemon's uid.
//
// # How
//
// A Go process cannot confine a child between fork and exec, and
// confining itself would confine the daemon. So Wrap has the command run
// the executor's own binary (/proc/self/exe) with the policy in its
// environment; this package's init, in that new process, sees it before
// main runs: it builds the root of its own where asked, drops every
// capability from what it will start, restricts itself,
// starts the real command as its child (as the agent's user, where one is
// given), passes signals on, reaps what is
// orphaned in its namespace, and exits as the command did. Every binary
// that links this package — awcp-fs, and the tests that start agents —
// is such a helper.
package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// envKey carries the policy to the helper; it is removed before the
// command starts.
const envKey = "_AWCP_SANDBOX"

// Policy is what a confined command may reach.
type Policy struct {
	// RW are directories the command may read, write, create and remove
	// in, and execute from: its work directory and temporary directory.
	RW []string `json:"rw"`
	// RO are directories (or files) it may read and execute: the system.
	// Missing ones are skipped.
	RO []string `json:"ro"`
	// Devices are device files it may read and write (/dev/null, ttys).
	Devices []string `json:"devices"`
	// ConnectPorts, if Net, are the only TCP ports it may connect to; it
	// may then bind none. Without Net the network is not restricted.
	Net          bool     `json:"net,omitempty"`
	ConnectPorts []uint16 `json:"connectPorts,omitempty"`
	// Strict refuses to run the command unconfined (a kernel without
	// Landlock, or one older than ABI 6's scoping); otherwise it runs
	// with what the kernel has.
	Strict bool `json:"strict,omitempty"`
	// Isolated gives the command a root of its own (root.go) in mount,
	// PID and IPC namespaces of its own. It needs CAP_SYS_ADMIN (the
	// executor running as root).
	Isolated bool `json:"isolated,omitempty"`
	// UserNS builds that root without privilege: in a user namespace of
	// the command's own, where it is root over nothing of the host's (its
	// uid 0 is the caller's uid, its capabilities end at the namespace).
	// For a caller that is not root; with Isolated, and without User.
	UserNS bool `json:"userns,omitempty"`
	// NoNet gives the command a network namespace of its own: a loopback
	// and nothing else — no route out, no host port, no abstract socket
	// of the host's. It needs Isolated.
	NoNet bool `json:"noNet,omitempty"`
	// MaxMemory, if not 0, bounds each process's data (RLIMIT_DATA: its
	// heap and writable mappings), in bytes.
	MaxMemory uint64 `json:"maxMemory,omitempty"`
	// User, if set, is who the command runs as; it needs root.
	User *User `json:"user,omitempty"`
	// Yours are those of RO and RW (the operator's grants) that the
	// command, running as User, sees as its own: their owner's files show
	// as User's, and what it makes there is written as their owner's (an
	// idmapped mount). So a grant of the daemon's ~/.claude works for an
	// agent of another uid.
	Yours []string `json:"yours,omitempty"`
	// Path is the command's program, set by Wrap.
	Path string `json:"path"`
}

// User is the unprivileged user a command runs as, and its home.
type User struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Home string `json:"home,omitempty"`
}

// System is what every agent reads and executes: the system's programs,
// libraries and configuration.
var System = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys"}

// Devices are the device files every agent may use.
var Devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm"}

// ABI is the kernel's Landlock ABI version; 0 without Landlock.
func ABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// MinABI is the ABI this package confines fully at: scoping of signals
// and abstract sockets came with 6.
const MinABI = 6

// CanIsolate reports whether a command may get a root and a user of its
// own here: the executor runs as root with the capabilities that takes —
// CAP_SYS_ADMIN (the mounts), CAP_SETUID and CAP_SETGID (the agent's
// user), CAP_CHOWN (its work dir), CAP_DAC_OVERRIDE and CAP_FOWNER (its
// files read and removed after it). A systemd unit that bounds them away
// gets Landlock alone.
func CanIsolate() bool {
	if os.Geteuid() != 0 {
		return false
	}
	var data [2]unix.CapUserData
	if err := unix.Capget(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0]); err != nil {
		return false
	}
	for _, c := range []uint{unix.CAP_SYS_ADMIN, unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER} {
		if data[c/32].Effective&(1<<(c%32)) == 0 {
			return false
		}
	}
	return true
}

// Describe is how a policy confines, for a delegation's notes and doctor:
// "landlock ABI 7, private /proc".
func Describe(p *Policy) string {
	if p == nil {
		return "none (--sandbox off)"
	}
	abi := ABI()
	if abi == 0 {
		return "none: this kernel has no Landlock"
	}
	s := fmt.Sprintf("landlock ABI %d", abi)
	if abi < MinABI {
		s += " (no scoping of signals: ABI 6 needed)"
	}
	if p.Isolated {
		s += ", a root of its own"
	}
	if p.UserNS {
		s += " (in a user namespace)"
	}
	if p.NoNet {
		s += ", no network"
	}
	if p.User != nil {
		s += fmt.Sprintf(", uid %d", p.User.UID)
	}
	if p.Net {
		s += fmt.Sprintf(", TCP connect to ports %v only", p.ConnectPorts)
	}
	return s
}

// Wrap makes cmd, not yet started, run confined by p: the executor's own
// binary runs first as the helper (package comment). cmd.Path and Args
// stay the command's as far as the helper is concerned.
func (p Policy) Wrap(cmd *exec.Cmd) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("sandbox: the executor's own binary: %w", err)
	}
	p.Path = cmd.Path
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, envKey+"="+string(raw))
	cmd.Path = self
	if p.Isolated {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		sys := cmd.SysProcAttr
		sys.Cloneflags |= syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC
		if p.NoNet {
			sys.Cloneflags |= syscall.CLONE_NEWNET
		}
		if p.UserNS {
			// The caller's ids as the namespace's root: the helper may
			// then mount and pivot there, and nowhere else.
			sys.Cloneflags |= syscall.CLONE_NEWUSER
			sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
			sys.GidMappingsEnableSetgroups = false
		}
	}
	return nil
}

func init() {
	if _, ok := os.LookupEnv(holdEnv); ok {
		io.Copy(io.Discard, os.Stdin) // until the pipe's other end closes
		os.Exit(0)
	}
	raw, ok := os.LookupEnv(envKey)
	if !ok {
		return
	}
	os.Unsetenv(envKey)
	code, err := helper(raw)
	if err != nil {
		fmt.Fprintf(os.Stderr, "awcp sandbox: %v\n", err)
		os.Exit(126)
	}
	os.Exit(code)
}

// helper confines this process as raw says, runs the command as its
// child and returns its exit code.
func helper(raw string) (int, error) {
	var p Policy
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return 0, fmt.Errorf("bad policy: %w", err)
	}
	if p.User != nil && !p.Isolated {
		return 0, errors.New("a user of its own needs a root of its own")
	}
	if (p.NoNet || p.UserNS) && !p.Isolated {
		return 0, errors.New("a network or user namespace of its own needs a root of its own")
	}
	if p.UserNS && p.User != nil {
		return 0, errors.New("a user namespace of its own has no other user to run as")
	}
	if p.NoNet {
		if err := loopbackUp(); err != nil {
			return 0, fmt.Errorf("a network of its own: %w", err)
		}
	}
	if p.Isolated {
		if err := p.buildRoot(); err != nil {
			return 0, fmt.Errorf("a root of its own: %w", err)
		}
	}
	if err := joinOwnKeyring(); err != nil {
		return 0, err
	}
	if err := dropCapabilities(p.User != nil && p.User.UID != 0); err != nil {
		return 0, err
	}
	if err := p.restrict(); err != nil {
		return 0, err
	}
	if err := refuseSetid(); err != nil {
		return 0, err
	}
	// What the command leaves behind is this process's to end: orphans
	// (a daemonized child, one that left the process group with setsid)
	// are reparented here, not to init, and are killed once the command
	// ends (endDescendants). In a root of its own the PID namespace ends
	// them all anyway.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("subreaper: %w", err)
	}
	// Signals for the command: the executor signals the whole group, but
	// as PID 1 of a namespace this process gets only those it handles.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	attr := &os.ProcAttr{Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}}
	if p.User != nil {
		attr.Sys = p.User.credential()
	}
	path, argv := p.Path, os.Args
	if p.MaxMemory > 0 {
		// The bound is the command's, not this process's: a Go runtime's
		// own reservations count in RLIMIT_DATA (a 64 MiB heap arena, a
		// race detector's shadow), and this process set to it could not
		// go on. The system's shell sets it, hard and soft, then becomes
		// the command.
		path = "/bin/sh"
		argv = append([]string{path, "-c", fmt.Sprintf(`ulimit -d %d && exec "$0" "$@"`, p.MaxMemory>>10), p.Path}, os.Args[1:]...)
	}
	proc, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return 127, fmt.Errorf("start %s: %w", p.Path, err)
	}
	go func() {
		for s := range sigs {
			proc.Signal(s)
		}
	}()
	// Reap every child — the command, and what is orphaned to PID 1 —
	// until the command has ended.
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 126, fmt.Errorf("wait: %w", err)
		}
		if pid != proc.Pid {
			continue
		}
		code := 0
		switch {
		case ws.Exited():
			code = ws.ExitStatus()
		case ws.Signaled():
			code = 128 + int(ws.Signal())
		default:
			continue
		}
		endDescendants()
		return code, nil
	}
}

// endDescendants kills every process still descended from this one and
// reaps it: as a subreaper, each orphan of the command's became its
// child. It goes on until none is left alive, so that one forking
// meanwhile is caught, for a second at most (one stuck in the kernel is
// left to die, and to init to reap).
func endDescendants() {
	self := os.Getpid()
	for range 100 {
		left := descendants(self)
		if len(left) == 0 {
			return
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
		for {
			if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}

// descendants are the processes below pid, as /proc says now.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		rest := string(stat)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		var state string
		var ppid int
		if _, err := fmt.Sscan(rest, &state, &ppid); err == nil && state != "Z" { // a zombie is dead already
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// dropCapabilities empties the capability bounding set, so that the
// command has no capability even where it runs as root: what Landlock
// does not fence (loading a kernel module, reconfiguring the network,
// raw devices) is not the agent's either. The bounding set is a thread's:
// this runs in init, on the main thread, which starts the command.
//
// Emptying it takes CAP_SETPCAP, which a root bounded to what the
// sandbox needs lacks (the systemd unit's bounding set, a Kubernetes
// pod's capabilities). A command that runs as a user of its own (notRoot)
// needs no emptied set: every capability ends at its setuid away from
// root, and no_new_privs (set before it starts, refuseSetid) keeps an exec
// from gaining any. A command run as root does, and is refused.
func dropCapabilities(notRoot bool) error {
	const prCapbsetDrop = 24 // PR_CAPBSET_DROP
	for c := uintptr(0); c < 64; c++ {
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetDrop, c, 0); errno != 0 {
			if errno == syscall.EINVAL {
				break // past the kernel's last capability
			}
			if errno == syscall.EPERM && (os.Geteuid() != 0 || notRoot) {
				return nil // no CAP_SETPCAP, and none to keep from the command
			}
			if errno == syscall.EPERM {
				return fmt.Errorf("drop capability %d: %w (the command would run as root with this process's capabilities: emptying its bounding set needs CAP_SETPCAP)", c, errno)
			}
			return fmt.Errorf("drop capability %d: %w", c, errno)
		}
	}
	return nil
}

// restrict confines this process and what it will start.
func (p Policy) restrict() error {
	cfg := landlock.V7
	if !p.Net {
		cfg.HandledAccessNet = 0
	}
	if !p.Strict {
		cfg = cfg.BestEffort()
	} else if abi := ABI(); abi < MinABI {
		return fmt.Errorf("--sandbox strict: this kernel's Landlock ABI is %d, and %d is needed", abi, MinABI)
	}
	rules := []landlock.Rule{
		landlock.RODirs(existing(p.RO, true)...),
		landlock.ROFiles(existing(p.RO, false)...),
		landlock.RWDirs(existing(p.RW, true)...).WithRefer(),
		landlock.RWFiles(existing(p.RW, false)...),
		landlock.RWFiles(existing(p.Devices, false)...).WithIoctlDev(),
		landlock.RWDirs(existing(p.Devices, true)...).WithIoctlDev(),
	}
	// /proc is read: tools need /proc/self. In a root of its own it shows
	// the sandbox's processes only; without one, the others' too.
	rules = append(rules, landlock.RODirs("/proc"))
	if p.Isolated {
		// The root's own empty /tmp, /var/tmp and /run are the command's:
		// no other process sees them. (What is bound beneath them
		// read-only stays so: the mount says so, whatever Landlock allows.)
		rules = append(rules, landlock.RWDirs("/tmp", "/var/tmp", "/run").WithRefer())
	}
	for _, port := range p.ConnectPorts {
		rules = append(rules, landlock.ConnectTCP(port))
	}
	if err := cfg.Restrict(rules...); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}

// existing is those of paths that exist and are directories (dirs) or
// not (files): Landlock takes a directory's rights on directories only.
func existing(paths []string, dirs bool) []string {
	var out []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() != dirs {
			continue
		}
		out = append(out, filepath.Clean(p))
	}
	return out
}

// ParseAllow reads an --sandbox-allow value: PATH, PATH:ro or PATH:rw;
// PATH is absolute, or starts with ~/ (the daemon's home).
func ParseAllow(v string) (path string, rw bool, err error) {
	path = v
	if i := strings.LastIndexByte(v, ':'); i > 0 {
		switch v[i+1:] {
		case "ro":
			path = v[:i]
		case "rw":
			path, rw = v[:i], true
		}
	}
	if rest, ok := strings.CutPrefix(path, "~/"); ok { // as a config file gives it
		home, err := os.UserHomeDir()
		if err != nil {
			return "", false, fmt.Errorf("--sandbox-allow %q: %w", v, err)
		}
		path = filepath.Join(home, rest)
	}
	if !filepath.IsAbs(path) {
		return "", false, fmt.Errorf("--sandbox-allow %q: the path must be absolute", v)
	}
	return filepath.Clean(path), rw, nil
}

// Check builds p's sandbox around a command that does nothing, so that a
// daemon on a machine where it cannot be built — a container whose
// seccomp profile refuses pivot_root(2), a root bounded without what a
// command run as root needs — says so when it starts, not at each task.
func Check(p Policy) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "exit 0")
	cmd.Dir = "/"
	if err := p.Wrap(cmd); err != nil {
		return err
	}
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	if why := strings.TrimSpace(strings.TrimPrefix(string(out), "awcp sandbox: ")); why != "" {
		if len(why) > 1024 {
			why = why[:1024]
		}
		return errors.New(why)
	}
	return err
}
