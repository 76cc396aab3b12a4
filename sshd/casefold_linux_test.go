package sshd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// foldNode is a case-insensitive view of a directory, as a Mac's APFS
// shows one (this kernel has neither ext4's nor tmpfs's casefold): a name
// is looked up as it is, else as any entry that differs from it in case
// alone. It serves what the SFTP server asks of an export — lookups,
// attributes, reads and writes, listings, creates, links, removes — each
// on the real path it found.
type foldNode struct {
	gofs.Inode
	real string
}

var (
	_ gofs.NodeLookuper   = (*foldNode)(nil)
	_ gofs.NodeGetattrer  = (*foldNode)(nil)
	_ gofs.NodeSetattrer  = (*foldNode)(nil)
	_ gofs.NodeOpener     = (*foldNode)(nil)
	_ gofs.NodeReaddirer  = (*foldNode)(nil)
	_ gofs.NodeReadlinker = (*foldNode)(nil)
	_ gofs.NodeCreater    = (*foldNode)(nil)
	_ gofs.NodeMkdirer    = (*foldNode)(nil)
	_ gofs.NodeUnlinker   = (*foldNode)(nil)
	_ gofs.NodeRmdirer    = (*foldNode)(nil)
	_ gofs.NodeSymlinker  = (*foldNode)(nil)
	_ gofs.NodeRenamer    = (*foldNode)(nil)
)

// find is the real name of name in n: itself, or an entry equal to it but
// for case.
func (n *foldNode) find(name string) string {
	if _, err := os.Lstat(filepath.Join(n.real, name)); err == nil {
		return name
	}
	ents, _ := os.ReadDir(n.real)
	for _, e := range ents {
		if strings.EqualFold(e.Name(), name) {
			return e.Name()
		}
	}
	return name
}

func (n *foldNode) child(ctx context.Context, p string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, gofs.ToErrno(err)
	}
	out.Attr.FromStat(&st)
	return n.NewInode(ctx, &foldNode{real: p}, gofs.StableAttr{Mode: st.Mode, Ino: st.Ino}), 0
}

func (n *foldNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.child(ctx, filepath.Join(n.real, n.find(name)), out)
}

func (n *foldNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(n.real, &st); err != nil {
		return gofs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

func (n *foldNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if m, ok := in.GetMode(); ok {
		if err := os.Chmod(n.real, os.FileMode(m&0o7777)); err != nil {
			return gofs.ToErrno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		if err := os.Truncate(n.real, int64(sz)); err != nil {
			return gofs.ToErrno(err)
		}
	}
	mt, okm := in.GetMTime()
	at, oka := in.GetATime()
	if okm || oka {
		if err := os.Chtimes(n.real, at, mt); err != nil {
			return gofs.ToErrno(err)
		}
	}
	return n.Getattr(ctx, fh, out)
}

func (n *foldNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fd, err := syscall.Open(n.real, int(flags)&^syscall.O_APPEND, 0)
	if err != nil {
		return nil, 0, gofs.ToErrno(err)
	}
	return gofs.NewLoopbackFile(fd), 0, 0
}

func (n *foldNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	ents, err := os.ReadDir(n.real)
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	out := make([]fuse.DirEntry, 0, len(ents))
	for _, e := range ents {
		out = append(out, fuse.DirEntry{Name: e.Name(), Mode: uint32(e.Type())})
	}
	return gofs.NewListDirStream(out), 0
}

func (n *foldNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, err := os.Readlink(n.real)
	return []byte(t), gofs.ToErrno(err)
}

func (n *foldNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	p := filepath.Join(n.real, n.find(name))
	fd, err := syscall.Open(p, int(flags)|syscall.O_CREAT, mode)
	if err != nil {
		return nil, nil, 0, gofs.ToErrno(err)
	}
	ch, errno := n.child(ctx, p, out)
	if errno != 0 {
		syscall.Close(fd)
		return nil, nil, 0, errno
	}
	return ch, gofs.NewLoopbackFile(fd), 0, 0
}

func (n *foldNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	p := filepath.Join(n.real, n.find(name))
	if err := os.Mkdir(p, os.FileMode(mode&0o777)); err != nil {
		return nil, gofs.ToErrno(err)
	}
	return n.child(ctx, p, out)
}

func (n *foldNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	p := filepath.Join(n.real, n.find(name))
	if err := os.Symlink(target, p); err != nil {
		return nil, gofs.ToErrno(err)
	}
	return n.child(ctx, p, out)
}

func (n *foldNode) Unlink(ctx context.Context, name string) syscall.Errno {
	return gofs.ToErrno(syscall.Unlink(filepath.Join(n.real, n.find(name))))
}

func (n *foldNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return gofs.ToErrno(syscall.Rmdir(filepath.Join(n.real, n.find(name))))
}

func (n *foldNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	to := newParent.EmbeddedInode().Operations().(*foldNode)
	return gofs.ToErrno(os.Rename(filepath.Join(n.real, n.find(name)), filepath.Join(to.real, to.find(newName))))
}

// mountFolded mounts the case-insensitive view of dir; it is unmounted
// when the test ends.
func mountFolded(t *testing.T, dir string) string {
	t.Helper()
	view := filepath.Join(t.TempDir(), "view")
	os.Mkdir(view, 0o755)
	zero := time.Duration(0)
	srv, err := gofs.Mount(view, &foldNode{real: dir}, &gofs.Options{EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{FsName: "casefold", Name: "casefold", DirectMount: true, DirectMountStrict: true}})
	if err != nil {
		t.Fatalf("mounting the case-insensitive view: %v", err)
	}
	t.Cleanup(func() { srv.Unmount() })
	return view
}

// TestHiddenOnACaseInsensitiveFileSystem: an export on a file system that
// folds case (a Mac's APFS by default; here a FUSE view that does) hides
// .aws/credentials from `.AWS/credentials`, `.Aws/CREDENTIALS` and a
// symlink to `.AwS` as from its own name, and under ProtectGit refuses a
// change to `.GIT/config` and `.Git/HOOKS/pre-commit` as to .git's —
// though the view itself opens each of them.
func TestHiddenOnACaseInsensitiveFileSystem(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{".aws/credentials": "aws-secret", ".git/config": "[core]\n", ".git/hooks/README": "hooks", "README.md": "hello"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600)
	}
	view := mountFolded(t, dir)
	if b, err := os.ReadFile(filepath.Join(view, ".AWS", "CREDENTIALS")); err != nil || string(b) != "aws-secret" {
		t.Fatalf("the view does not fold case: %q, %v", b, err)
	}

	f := newFixture(t)
	c := f.sftp(t, "dlg_fold", f.grant(t, "dlg_fold", Export{Dir: view, Policy: wire.ExportPolicy{Hide: wire.DefaultHide, ProtectGit: true}}))
	defer c.Close()
	// The server reaches through the view what it folds: README.md as
	// readme.MD.
	if fh, err := c.Open("readme.MD"); err != nil {
		t.Fatalf("reading readme.MD through the view: %v", err)
	} else {
		b := make([]byte, 16)
		n, _ := fh.Read(b)
		fh.Close()
		if string(b[:n]) != "hello" {
			t.Fatalf("readme.MD through the view: %q", b[:n])
		}
	}
	for _, p := range []string{".AWS/credentials", ".Aws/CREDENTIALS", ".aws/Credentials"} {
		if fh, err := c.Open(p); err == nil {
			fh.Close()
			t.Errorf("opened %s", p)
		}
		if _, err := c.Stat(p); err == nil {
			t.Errorf("stat'ed %s", p)
		}
		if err := c.Chmod(p, 0o666); err == nil {
			t.Errorf("chmod %s allowed", p)
		}
	}
	if ents, err := c.ReadDir(".AWS"); err == nil && len(ents) > 0 {
		t.Errorf("listed .AWS: %d entries", len(ents))
	}
	if err := c.Symlink(".AwS", "x"); err == nil {
		if fh, err := c.Open("x/credentials"); err == nil {
			fh.Close()
			t.Error("opened x/credentials, x a symlink to .AwS")
		}
	}
	if err := c.Rename(".AWS", "open"); err == nil {
		t.Error("renamed .AWS away")
	}
	for _, p := range []string{".GIT/config", ".Git/HOOKS/pre-commit", ".git/Hooks/post-checkout"} {
		if fh, err := c.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC); err == nil {
			fh.Close()
			t.Errorf("opened %s for writing", p)
		}
	}
	for name, want := range map[string]string{".aws/credentials": "aws-secret", ".git/config": "[core]\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s changed: %q, %v", name, b, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, ".aws", "credentials")); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf(".aws/credentials' mode changed")
	}
	for _, p := range []string{".git/hooks/pre-commit", ".git/hooks/post-checkout", "open"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s exists", p)
		}
	}
}
