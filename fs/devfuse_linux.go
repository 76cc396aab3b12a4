package fs

import (
	"os"
	"syscall"

	"github.com/awcp/awcp/internal/cloexec"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// go-fuse's direct mount (as root) opens /dev/fuse without O_CLOEXEC, so
// every process the executor starts afterwards — each delegation's agent —
// would inherit the FUSE descriptor of every mount alive: it could read
// and answer another delegation's FUSE requests, and, holding it, keep a
// mount hanging after awcp-fs died instead of failing with ENOTCONN. The
// descriptor is made close-on-exec right after the mount, with
// syscall.ForkLock held across both — the lock os/exec takes to fork — so
// no process starts in between. (Through fusermount, go-fuse sets the flag
// itself; no lock can be held there, as fusermount is a fork.)

// mountFUSE is fs.Mount with the FUSE descriptor close-on-exec: as root
// by mount(2) itself (DirectMountStrict), else — or where mount(2) is
// refused, as in a container without CAP_SYS_ADMIN — through fusermount.
// opts' DirectMount settings are its own.
func mountFUSE(mountpoint string, root fs.InodeEmbedder, opts *fs.Options, m Metrics, wrap func(fuse.RawFileSystem) fuse.RawFileSystem) (*fuse.Server, error) {
	if os.Geteuid() == 0 {
		direct := *opts
		direct.MountOptions.DirectMountStrict = true
		syscall.ForkLock.Lock()
		server, err := mountCounted(mountpoint, root, &direct, m, wrap)
		if err == nil {
			// The new descriptor is the one not close-on-exec: all of
			// them are made so in one call (close_range).
			cloexec.All()
		}
		syscall.ForkLock.Unlock()
		if err == nil {
			return server, nil
		}
	}
	viaHelper := *opts
	viaHelper.MountOptions.DirectMount, viaHelper.MountOptions.DirectMountStrict = false, false
	return mountCounted(mountpoint, root, &viaHelper, m, wrap) // go-fuse sets close-on-exec on what fusermount hands back
}

// mountCounted is go-fuse's fs.Mount with its requests passed through
// wrap (if set) and counted into m (countingFS, if set).
func mountCounted(mountpoint string, root fs.InodeEmbedder, opts *fs.Options, m Metrics, wrap func(fuse.RawFileSystem) fuse.RawFileSystem) (*fuse.Server, error) {
	raw := fs.NewNodeFS(root, opts)
	if wrap != nil {
		raw = wrap(raw)
	}
	if m != nil {
		raw = countingFS{RawFileSystem: raw, m: m}
	}
	server, err := fuse.NewServer(raw, mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, err // as fs.Mount: the serve loop ends with the failed mount
	}
	return server, nil
}
