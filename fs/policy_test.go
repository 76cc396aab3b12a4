package fs

import (
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	wire "github.com/awcp/awcp/sshd/sftpwire"

	"github.com/awcp/awcp/sshd"
)

// opLog keeps the operations the server records, as "kind path" for the
// refused ones.
type opLog struct {
	mu      sync.Mutex
	refused []string
}

func (l *opLog) Record(op sshd.Op) {
	if op.Refused {
		l.mu.Lock()
		l.refused = append(l.refused, op.Kind+" "+op.Path)
		l.mu.Unlock()
	}
}

func (l *opLog) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.refused, s)
}

// The export's policy reaches the agent on the mount: every refused call
// fails itself with EACCES — a hidden name looked up, created or listed, a
// remove or a rename of the owner's file, an open that would empty it — and
// a write past the bound fails itself (EDQUOT). The agent's own file, just
// created, goes when it removes it (the mount waits for the answer under
// --no-delete). Nothing refused happens in the directory, and the server
// records each refusal.
func TestPolicyRefusalsReachTheAgent(t *testing.T) {
	log := &opLog{}
	dir := t.TempDir() // the owner's files, there before it is lent
	for name, content := range map[string]string{".env": "SECRET=1\n", "a.txt": "a\n", "keep.txt": "keep\n", "k.pem": "KEY\n", "secrets/x": "x\n"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := newMountOf(t, sshd.Export{Dir: dir, Audit: log, Policy: wire.ExportPolicy{
		Hide: []string{".env", "*.pem", "secrets"}, NoDelete: true, MaxWriteBytes: 1 << 20}}, nil)
	mnt := f.mnt
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, iofs.ErrPermission) {
			t.Errorf("%s: %v, want EACCES", what, err)
		}
	}

	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"a.txt", "keep.txt"}) {
		t.Errorf("the mount lists %v, want a.txt and keep.txt only", names)
	}
	_, err = os.ReadFile(filepath.Join(mnt, ".env"))
	denied("read .env", err)
	_, err = os.Stat(filepath.Join(mnt, "secrets", "x"))
	denied("stat secrets/x", err)
	denied("create new.pem", os.WriteFile(filepath.Join(mnt, "new.pem"), []byte("k"), 0o600))
	// The agent's own link to a hidden file leads to the same refusal.
	if err := os.Symlink(".env", filepath.Join(mnt, "peek")); err != nil {
		t.Fatal(err)
	}
	_, err = os.ReadFile(filepath.Join(mnt, "peek"))
	denied("read .env through a link the agent made", err)
	denied("remove keep.txt", os.Remove(filepath.Join(mnt, "keep.txt")))
	if err := os.WriteFile(filepath.Join(mnt, "tmp.txt"), []byte("t"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "tmp.txt")); err != nil {
		t.Errorf("the agent's own file, removed right after its create: %v", err)
	}
	denied("rename a.txt over keep.txt", os.Rename(filepath.Join(mnt, "a.txt"), filepath.Join(mnt, "keep.txt")))
	denied("rename a.txt to a new name", os.Rename(filepath.Join(mnt, "a.txt"), filepath.Join(mnt, "b.txt")))
	denied("empty keep.txt", os.WriteFile(filepath.Join(mnt, "keep.txt"), nil, 0o644))

	big, err := os.Create(filepath.Join(mnt, "big"))
	if err != nil {
		t.Fatal(err)
	}
	// The write itself is refused (room.go), as a local file system's
	// quota refuses it.
	written, werr := big.Write(make([]byte, 2<<20))
	big.Close()
	if !errors.Is(werr, syscall.EDQUOT) {
		t.Errorf("2 MiB written past a 1 MiB bound: %d written, %v, want EDQUOT (a quota, as a local file system says)", written, werr)
	}

	for name, want := range map[string]string{".env": "SECRET=1\n", "keep.txt": "keep\n", "a.txt": "a\n", "k.pem": "KEY\n"} {
		if b, err := os.ReadFile(filepath.Join(f.dir, name)); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", name, b, err, want)
		}
	}
	for _, name := range []string{"new.pem", "tmp.txt", "b.txt"} {
		if _, err := os.Stat(filepath.Join(f.dir, name)); err == nil {
			t.Errorf("%s exists", name)
		}
	}
	if fi, err := os.Stat(filepath.Join(f.dir, "big")); err != nil || fi.Size() > 1<<20 || fi.Size() != int64(written) {
		t.Errorf("big: %v, %v: more than the bound, or other than the %d bytes the writer was told, was written", err, fi, written)
	}
	for _, want := range []string{"lookup .env", "lookup new.pem", "remove keep.txt", "setattr keep.txt", "rename a.txt", "write big"} {
		if !log.has(want) {
			t.Errorf("refusal %q not recorded; recorded %s", want, strings.Join(log.refused, ", "))
		}
	}
}
