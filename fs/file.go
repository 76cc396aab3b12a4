package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pkg/sftp"
)

// fileHandle is an open remote file. pkg/sftp pipelines a large ReadAt or
// WriteAt as concurrent requests, and its *File is safe for concurrent use.
type fileHandle struct {
	f    *sftp.File
	node *node
}

var (
	_ fs.FileReader   = (*fileHandle)(nil)
	_ fs.FileWriter   = (*fileHandle)(nil)
	_ fs.FileFlusher  = (*fileHandle)(nil)
	_ fs.FileFsyncer  = (*fileHandle)(nil)
	_ fs.FileReleaser = (*fileHandle)(nil)
)

func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.f.ReadAt(dest, off)
	if err != nil && n == 0 && !isEOF(err) {
		return nil, h.node.errno(ctx, "read", h.node.rpath(), err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.f.WriteAt(data, off)
	if err != nil {
		return uint32(n), h.node.errno(ctx, "write", h.node.rpath(), err)
	}
	return uint32(n), 0
}

// Flush has nothing to do: every Write is acknowledged by the server before
// it returns, so write errors surface there. It may run several times.
func (h *fileHandle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if err := h.f.Sync(); err != nil {
		return h.node.errno(ctx, "fsync", h.node.rpath(), err)
	}
	return 0
}

// Release frees the remote handle in the background: the kernel ignores
// what Release returns and nothing waits for it, so the round trip need not
// hold up the caller. Unmount waits for these closes.
func (h *fileHandle) Release(ctx context.Context) syscall.Errno {
	fsys := h.node.fsys
	fsys.closing.Add(1)
	go func() {
		defer fsys.closing.Done()
		h.f.Close()
	}()
	return 0
}
