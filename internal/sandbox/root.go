//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A root of its own (Policy.Isolated). The helper, root in fresh mount,
// PID and IPC namespaces, builds the command's whole filesystem from the
// policy's grants: a tmpfs holding the system's directories bound
// read-only, the work and temporary directories and the grants bound as
// granted, a /dev of the few devices Devices names, a /proc of the PID
// namespace, and empty /tmp, /run, /var/tmp and /dev/shm. Nothing else of
// the host is reachable by any path — other delegations' mounts, the
// daemon's state, a Docker or D-Bus socket in /run — whatever Landlock
// does or does not mediate (connect(2) on a pathname socket, for one, it
// does not on the kernels this runs on).
//
// The way there is bubblewrap's (the technique, not its code): a scratch
// tmpfs mounted on /tmp becomes the root for a moment, so that the host's
// tree is at /oldroot — its /tmp uncovered — while the new root is built
// at /newroot; then the new root is pivoted to and the old one detached.

// mountEntry is one thing the new root holds at Path.
type mountEntry struct {
	Path   string // where, in the new root (and, as given, on the host)
	Source string // the host's real path, symlinks resolved; "" for a symlink
	Link   string // the symlink's target where the host has a symlink
	Dir    bool
	RW     bool
	Device bool
	// Idmap shows the files of the host's user that owns Source as the
	// command's user's (Policy.Yours); tree is the clone carrying that
	// mapping, made before the first pivot.
	Idmap bool
	tree  int
}

// plan resolves, on the host and before anything moves, what the new root
// binds: symlinks are followed here, because past the first pivot an
// absolute link would resolve against the scratch root. A top-level
// system path that is a link (/bin → usr/bin on a merged /usr) stays a
// link. Missing paths are left out.
func (p Policy) plan() []mountEntry {
	var out []mountEntry
	add := func(path string, rw, device bool) {
		path = filepath.Clean(path)
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 && slices.Contains(System, path) {
			if target, err := os.Readlink(path); err == nil {
				out = append(out, mountEntry{Path: path, Link: target})
			}
			return
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return
		}
		fi, err := os.Stat(real)
		if err != nil {
			return
		}
		out = append(out, mountEntry{Path: path, Source: real, Dir: fi.IsDir(), RW: rw, Device: device,
			Idmap: p.User != nil && slices.Contains(p.Yours, path)})
	}
	for _, path := range p.RO {
		add(path, false, false)
	}
	for _, path := range p.RW {
		add(path, true, false)
	}
	for _, path := range p.Devices {
		switch path {
		case "/dev/pts", "/dev/ptmx", "/dev/shm": // the new root's own (buildRoot)
		default:
			add(path, true, true)
		}
	}
	// A resolv.conf that links out of /etc (systemd-resolved's, in /run)
	// keeps its target, or names would not resolve.
	if slices.Contains(p.RO, "/etc") {
		if real, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !strings.HasPrefix(real, "/etc/") {
			out = append(out, mountEntry{Path: real, Source: real})
		}
	}
	// Parents before children: a grant inside a system directory is bound
	// over the system's read-only one, and a grant under /tmp over the
	// new root's empty /tmp.
	slices.SortStableFunc(out, func(a, b mountEntry) int { return strings.Compare(a.Path, b.Path) })
	// What a bind already shows with the same rights (a script under
	// /usr) needs none of its own.
	kept := out[:0]
	for _, e := range out {
		if !slices.ContainsFunc(kept, func(k mountEntry) bool { return k.covers(e) }) {
			kept = append(kept, e)
		}
	}
	return kept
}

// covers reports whether k, bound, already shows e as e asks.
func (k mountEntry) covers(e mountEntry) bool {
	return k.Dir && k.Link == "" && !e.Device && !k.Idmap && !e.Idmap && (k.RW || !e.RW) &&
		(e.Path == k.Path || strings.HasPrefix(e.Path, k.Path+"/")) &&
		(e.Source == k.Source || strings.HasPrefix(e.Source, k.Source+"/"))
}

// Where the helper builds: the scratch root, and in it the host's old
// root and the new one.
const (
	scratch = "/tmp"
	oldRoot = "/oldroot"
	newRoot = "/newroot"
)

// buildRoot makes the new root and moves this process into it, in the
// directory it was in (which must be in the new root).
func (p Policy) buildRoot() error {
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("the working directory: %w", err)
	}
	entries := p.plan()
	passwd, group := p.accounts()

	// Nothing done here reaches the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mounts: %w", err)
	}
	if slices.ContainsFunc(entries, func(e mountEntry) bool { return e.Idmap }) {
		// A /proc of this PID namespace, to find the namespaces by.
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("a /proc of its own: %w", err)
		}
		if err := p.idmapTrees(entries); err != nil {
			return err
		}
	}
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("the scratch root: %w", err)
	}
	for _, d := range []string{oldRoot, newRoot} {
		if err := os.Mkdir(scratch+d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.PivotRoot(scratch, scratch+oldRoot); err != nil {
		if errors.Is(err, unix.EPERM) {
			// Mounts were allowed just now: not the capability, a filter.
			return fmt.Errorf("pivot to the scratch root: %w (a seccomp profile refuses pivot_root(2), as a container runtime's default one does: the executor's container needs one that allows it)", err)
		}
		return fmt.Errorf("pivot to the scratch root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("the new root: %w", err)
	}
	if err := populate(entries); err != nil {
		return err
	}
	if passwd != nil {
		for name, content := range map[string][]byte{"passwd": passwd, "group": group} {
			if err := bindContent(name, content, newRoot+"/etc/"+name); err != nil {
				return err
			}
		}
	}
	// The new root read-only at its top (its own tmpfs mounts stay
	// writable), then pivoted to; the scratch root and the host's tree
	// with it are detached.
	if err := unix.Mount("", newRoot, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("the new root read-only: %w", err)
	}
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot to the new root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's tree: %w", err)
	}
	if err := os.Chdir(cwd); err != nil {
		return fmt.Errorf("the working directory %s is not in the sandbox: %w", cwd, err)
	}
	return nil
}

// populate mounts the new root's own filesystems and binds entries into
// it.
func populate(entries []mountEntry) error {
	own := []struct {
		path, fstype, data string
		flags              uintptr
	}{
		{"/proc", "proc", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"/dev", "tmpfs", "mode=0755", unix.MS_NOSUID | unix.MS_NOEXEC},
		{"/dev/pts", "devpts", "newinstance,ptmxmode=0666,mode=0620", unix.MS_NOSUID | unix.MS_NOEXEC},
		{"/dev/shm", "tmpfs", "mode=1777", unix.MS_NOSUID | unix.MS_NODEV},
		{"/tmp", "tmpfs", "mode=1777", unix.MS_NOSUID | unix.MS_NODEV},
		{"/var/tmp", "tmpfs", "mode=1777", unix.MS_NOSUID | unix.MS_NODEV},
		{"/run", "tmpfs", "mode=0755", unix.MS_NOSUID | unix.MS_NODEV},
	}
	for _, m := range own {
		dst := newRoot + m.path
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fstype, dst, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s at %s: %w", m.fstype, m.path, err)
		}
	}
	for name, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, newRoot+"/dev/"+name); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := bind(e); err != nil {
			return err
		}
	}
	return nil
}

// bind puts e into the new root.
func bind(e mountEntry) error {
	dst := newRoot + e.Path
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("%s: %w", e.Path, err)
	}
	if e.Link != "" {
		return os.Symlink(e.Link, dst)
	}
	if e.tree > 0 {
		defer unix.Close(e.tree)
	}
	// The mount point: made in the new root's tmpfs, or already there
	// inside a bind (read-only, where nothing can be made).
	if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		if e.Dir {
			err = os.Mkdir(dst, 0o755)
		} else {
			var f *os.File
			if f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	if e.tree > 0 {
		if err := unix.MoveMount(e.tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("bind %s: %w", e.Path, err)
		}
	} else {
		flags := uintptr(unix.MS_BIND | unix.MS_REC)
		if e.Idmap {
			flags = unix.MS_BIND // a grant: its own filesystem only, as idmapTrees
		}
		if err := unix.Mount(oldRoot+e.Source, dst, "", flags, ""); err != nil {
			return fmt.Errorf("bind %s: %w", e.Path, err)
		}
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if !e.Device {
		attr.Attr_set |= unix.MOUNT_ATTR_NODEV
	}
	if !e.RW {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("%s's mount flags: %w", e.Path, err)
	}
	return nil
}

// idmapTrees clones the trees of the entries to idmap, each with its
// owner's files shown as the command's user's and what that user makes
// written as the owner's (an idmapped mount, Linux 5.12+, on filesystems
// that support it: ext4, xfs, btrfs, tmpfs since 6.3, …). A tree that
// cannot be idmapped is bound as it is, and said on stderr: the agent
// then reaches in it what its mode bits give anyone.
func (p Policy) idmapTrees(entries []mountEntry) error {
	userns := map[uint32]int{} // by the owner they map
	defer func() {
		for _, fd := range userns {
			unix.Close(fd)
		}
	}()
	for i := range entries {
		e := &entries[i]
		if !e.Idmap {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(e.Source, &st); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
		ns, ok := userns[st.Uid]
		if !ok {
			var err error
			if ns, err = mappingNamespace(st.Uid, st.Gid, p.User); err != nil {
				return err
			}
			userns[st.Uid] = ns
		}
		// Its own filesystem only, not what is mounted beneath it: a grant
		// that holds the work root would show other delegations' mounts.
		tree, err := unix.OpenTree(unix.AT_FDCWD, e.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("clone %s: %w", e.Path, err)
		}
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns)}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
			unix.Close(tree)
			fmt.Fprintf(os.Stderr, "awcp sandbox: %s is lent as it is (uid %d's, not the agent's): its filesystem cannot be idmapped: %v\n", e.Path, st.Uid, err)
			continue
		}
		e.tree = tree
	}
	return nil
}

// holdEnv has this package's init hold a user namespace open
// (mappingNamespace) instead of running a command.
const holdEnv = "_AWCP_SANDBOX_HOLD"

// mappingNamespace is a user namespace whose mapping, as an idmapped
// mount's, shows uid and gid's files as u's: a process of this binary is
// started in it, its namespace opened, and the process ended.
func mappingNamespace(uid, gid uint32, u *User) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return -1, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	defer w.Close()
	proc, err := os.StartProcess(self, []string{self}, &os.ProcAttr{
		Env:   []string{holdEnv + "=1"},
		Files: []*os.File{r, nil, os.Stderr},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: int(u.UID), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: int(u.GID), Size: 1}},
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	r.Close()
	if err != nil {
		return -1, fmt.Errorf("a user namespace to idmap with: %w", err)
	}
	defer func() {
		w.Close()
		proc.Wait()
	}()
	// /proc here is the PID namespace's own (buildRoot mounted it).
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", proc.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		proc.Kill()
		return -1, fmt.Errorf("a user namespace to idmap with: %w", err)
	}
	return fd, nil
}

// bindContent binds a file holding content over dst, which exists (a
// file of the read-only /etc): the file is written in the scratch root,
// which the new root never shows.
func bindContent(name string, content []byte, dst string) error {
	if _, err := os.Stat(dst); err != nil {
		return nil // no /etc lent: nothing to stand in for
	}
	src := "/" + name
	if err := os.WriteFile(src, content, 0o644); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind /etc/%s: %w", name, err)
	}
	return unix.MountSetattr(unix.AT_FDCWD, dst, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV})
}

// AgentUser is the name the command's uid has in its /etc/passwd.
const AgentUser = "awcp-agent"

// accounts are the host's /etc/passwd and /etc/group with the command's
// user and group added, so that tools that look the user up (whoami,
// ssh, git's default identity) find it; nil where the command keeps the
// helper's uid.
func (p Policy) accounts() (passwd, group []byte) {
	if p.User == nil {
		return nil, nil
	}
	u := p.User
	passwd, _ = os.ReadFile("/etc/passwd")
	group, _ = os.ReadFile("/etc/group")
	line := func(b []byte, s string) []byte {
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		return append(b, s...)
	}
	home := u.Home
	if home == "" {
		home = "/"
	}
	passwd = line(passwd, fmt.Sprintf("%s:x:%d:%d:awcp agent:%s:/bin/sh\n", AgentUser, u.UID, u.GID, home))
	group = line(group, fmt.Sprintf("%s:x:%d:\n", AgentUser, u.GID))
	return passwd, group
}

// credential has what this process starts run as u, with no supplementary
// group: the helper stays root, to reap and pass signals on.
func (u *User) credential() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}}
}

// loopbackUp brings up the loopback of this process's new network
// namespace: the command's own 127.0.0.1, which nothing outside reaches.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}
