package fs

import (
	"context"
	"os"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pkg/sftp"
)

// fileHandle is an open remote file. pkg/sftp pipelines a large ReadAt or
// WriteAt as concurrent requests, and its *File is safe for concurrent use.
// When the connection is re-dialled, the handle is opened again by path
// (a file unlinked meanwhile is lost: EIO).
//
// A read-only open of a file whose cached pages the kernel keeps is
// deferred: f stays nil until a call needs the remote file, so that reading
// a file again from the page cache costs no round trip at all.
type fileHandle struct {
	node  *node
	flags int // the open flags, for re-opening

	mu       sync.Mutex // guards f, gen and released
	f        *sftp.File // nil while the open is deferred
	gen      uint64     // the connection f belongs to
	released bool       // a deferred open that comes after Release is closed at once
}

var (
	_ fs.FileReader   = (*fileHandle)(nil)
	_ fs.FileWriter   = (*fileHandle)(nil)
	_ fs.FileFlusher  = (*fileHandle)(nil)
	_ fs.FileFsyncer  = (*fileHandle)(nil)
	_ fs.FileReleaser = (*fileHandle)(nil)
)

func (n *node) newHandle(f *sftp.File, flags int) *fileHandle {
	h := &fileHandle{node: n, f: f, flags: flags}
	h.gen = n.fsys.conn.generation()
	return h
}

// deferredHandle is a read-only handle whose remote open waits for the
// first call that needs it. The node keeps it until then: an unlink or a
// rename over the file opens it first, so the file stays readable.
func (n *node) deferredHandle(flags int) *fileHandle {
	h := &fileHandle{node: n, flags: flags}
	n.mu.Lock()
	if n.deferred == nil {
		n.deferred = map[*fileHandle]struct{}{}
	}
	n.deferred[h] = struct{}{}
	n.mu.Unlock()
	return h
}

// file returns the handle's remote file, opening it if the open was
// deferred. No lock is held across the round trip; a racing open loses.
func (h *fileHandle) file(ctx context.Context) (*sftp.File, uint64, error) {
	h.mu.Lock()
	f, gen := h.f, h.gen
	h.mu.Unlock()
	if f != nil {
		return f, gen, nil
	}
	client, gen, err := h.node.fsys.conn.get(ctx)
	if err != nil {
		return nil, 0, err
	}
	f, err = client.OpenFile(h.node.rpath(), h.flags&^(os.O_CREATE|os.O_EXCL|os.O_TRUNC|os.O_APPEND))
	if err != nil {
		return nil, gen, err // gen: the connection that failed, if it did
	}
	h.mu.Lock()
	if h.released { // an unlink's openDeferred lost the race with Release
		h.mu.Unlock()
		f.Close()
		return nil, gen, os.ErrClosed
	}
	if h.f != nil {
		h.mu.Unlock()
		f.Close()
		return h.file(ctx)
	}
	h.f, h.gen = f, gen
	h.mu.Unlock()
	h.node.mu.Lock()
	delete(h.node.deferred, h)
	h.node.mu.Unlock()
	return f, gen, nil
}

// openDeferred opens n's deferred handles now: the file is about to be
// unlinked or replaced, and its open handles must keep reading it.
func (n *node) openDeferred(ctx context.Context) {
	n.mu.Lock()
	hs := make([]*fileHandle, 0, len(n.deferred))
	for h := range n.deferred {
		hs = append(hs, h)
	}
	n.mu.Unlock()
	for _, h := range hs {
		if _, _, err := h.file(ctx); err != nil {
			n.fsys.log.Debug("open a deferred handle", "path", n.rpath(), "err", err)
		}
	}
}

// withFile runs op on the handle's file, re-opening it once on the next
// connection if the connection failed under it.
func (h *fileHandle) withFile(ctx context.Context, op func(*sftp.File) error) error {
	for attempt := 0; ; attempt++ {
		f, gen, err := h.file(ctx)
		if err != nil {
			if !connErr(err) || attempt == 1 {
				return err
			}
			h.node.fsys.conn.lost(gen)
			continue
		}
		err = op(f)
		if err == nil || !connErr(err) || attempt == 1 {
			return err
		}
		h.node.fsys.conn.lost(gen)
		if err := h.reopen(ctx, gen); err != nil {
			return err
		}
	}
}

func (h *fileHandle) reopen(ctx context.Context, stale uint64) error {
	client, gen, err := h.node.fsys.conn.get(ctx)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != stale { // another call re-opened it already
		return nil
	}
	// Neither create nor truncate again: the file is what it was.
	f, err := client.OpenFile(h.node.rpath(), h.flags&^(os.O_CREATE|os.O_EXCL|os.O_TRUNC|os.O_APPEND))
	if err != nil {
		return err
	}
	h.f, h.gen = f, gen
	return nil
}

func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	var n int
	err := h.withFile(ctx, func(f *sftp.File) (err error) {
		n, err = f.ReadAt(dest, off)
		if isEOF(err) {
			err = nil
		}
		return err
	})
	if err != nil && n == 0 {
		return nil, h.node.errno(ctx, "read", h.node.rpath(), err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	var n int
	err := h.withFile(ctx, func(f *sftp.File) (err error) {
		n, err = f.WriteAt(data, off)
		return err
	})
	if err != nil {
		return uint32(n), h.node.errno(ctx, "write", h.node.rpath(), err)
	}
	return uint32(n), 0
}

// Flush has nothing to do: every Write is acknowledged by the server before
// it returns, so write errors surface there. It may run several times.
func (h *fileHandle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if err := h.withFile(ctx, func(f *sftp.File) error { return f.Sync() }); err != nil {
		return h.node.errno(ctx, "fsync", h.node.rpath(), err)
	}
	return 0
}

// stat is FSTAT: it works for a file unlinked while open.
func (h *fileHandle) stat(ctx context.Context) (os.FileInfo, error) {
	var fi os.FileInfo
	err := h.withFile(ctx, func(f *sftp.File) (err error) {
		fi, err = f.Stat()
		return err
	})
	return fi, err
}

// Release frees the remote handle in the background: the kernel ignores
// what Release returns and nothing waits for it, so the round trip need not
// hold up the caller. Unmount waits for these closes.
func (h *fileHandle) Release(ctx context.Context) syscall.Errno {
	fsys := h.node.fsys
	h.mu.Lock()
	f := h.f
	h.released = true
	h.mu.Unlock()
	if f == nil { // never opened
		h.node.mu.Lock()
		delete(h.node.deferred, h)
		h.node.mu.Unlock()
		return 0
	}
	fsys.closing.Add(1)
	go func() {
		defer fsys.closing.Done()
		f.Close()
	}()
	return 0
}
