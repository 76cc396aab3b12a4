// Command loopmount mounts a directory at a mountpoint through go-fuse's
// loopback file system, until it is interrupted: make bench's measure of
// what FUSE alone costs, with no network and no SFTP.
//
//	loopmount [-passthrough] MOUNTPOINT DIR
//
// By default every read and write goes through this process, as through
// any FUSE server that serves data from elsewhere. With -passthrough, the
// kernel reads and writes the backing files itself (FUSE passthrough,
// Linux 6.9+, as root), which go-fuse's loopback does wherever it can: a
// local file system's speed, not FUSE's, and no baseline for a mount whose
// data is on another machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	passthrough := flag.Bool("passthrough", false, "let the kernel read and write the backing files (FUSE passthrough)")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: loopmount [-passthrough] MOUNTPOINT DIR")
		os.Exit(2)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(flag.Arg(1), &st); err != nil {
		fmt.Fprintln(os.Stderr, "loopmount:", err)
		os.Exit(1)
	}
	root := &fs.LoopbackRoot{Path: flag.Arg(1), Dev: uint64(st.Dev)}
	var rootNode fs.InodeEmbedder = &fs.LoopbackNode{RootData: root}
	if !*passthrough {
		root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
			return &userNode{fs.LoopbackNode{RootData: r}}
		}
		rootNode = root.NewNode(root, nil, "", &st)
	}
	root.RootNode = rootNode
	// Entries and attributes kept 1 s, as the awcp mount keeps them by
	// default; mount(2) directly as root.
	second := time.Second
	server, err := fs.Mount(flag.Arg(0), rootNode, &fs.Options{EntryTimeout: &second, AttrTimeout: &second,
		MountOptions: fuse.MountOptions{FsName: flag.Arg(1), Name: "loopmount", DirectMount: true}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "loopmount:", err)
		os.Exit(1)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-stop; server.Unmount() }()
	server.Wait()
}

// userNode is a loopback node whose files are served by this process.
type userNode struct{ fs.LoopbackNode }

var (
	_ fs.NodeOpener  = (*userNode)(nil)
	_ fs.NodeCreater = (*userNode)(nil)
)

func (n *userNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if lf, ok := f.(*fs.LoopbackFile); ok {
		f = &userFile{lf}
	}
	return f, fl, errno
}

func (n *userNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, f, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if lf, ok := f.(*fs.LoopbackFile); ok {
		f = &userFile{lf}
	}
	return ch, f, fl, errno
}

// userFile is a loopback file that declines passthrough.
type userFile struct{ *fs.LoopbackFile }

func (*userFile) PassthroughFd() (int, bool) { return -1, false }
