package fs

import (
	"fmt"
	"os"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// CanMount mounts an empty file system at dir the way New mounts a
// workspace (mount(2) as root, else fusermount), checks that the kernel
// answers through it, and unmounts it: what `awcp-fs doctor` asks of the
// machine before a live mount needs it.
func CanMount(dir string) error {
	server, err := mountFUSE(dir, &fs.Inode{}, &fs.Options{MountOptions: fuse.MountOptions{FsName: "awcp-doctor", Name: "awcp"}}, nil, nil)
	if err != nil {
		return err
	}
	_, statErr := os.ReadDir(dir)
	if err := server.Unmount(); err != nil {
		return fmt.Errorf("unmount the test mount: %w", err)
	}
	server.Wait()
	if statErr != nil {
		return fmt.Errorf("the test mount does not answer: %w", statErr)
	}
	return nil
}
