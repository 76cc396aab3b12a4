// Command loopmount mounts a directory at a mountpoint through go-fuse's
// loopback file system, until it is interrupted: make bench's measure of
// what FUSE alone costs, with no network and no SFTP.
//
//	loopmount MOUNTPOINT DIR
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: loopmount MOUNTPOINT DIR")
		os.Exit(2)
	}
	root, err := fs.NewLoopbackRoot(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "loopmount:", err)
		os.Exit(1)
	}
	// Entries and attributes kept 1 s, as the awcp mount keeps them by
	// default; mount(2) directly as root.
	second := time.Second
	server, err := fs.Mount(os.Args[1], root, &fs.Options{EntryTimeout: &second, AttrTimeout: &second,
		MountOptions: fuse.MountOptions{FsName: os.Args[2], Name: "loopmount", DirectMount: true}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "loopmount:", err)
		os.Exit(1)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-stop; server.Unmount() }()
	server.Wait()
}
