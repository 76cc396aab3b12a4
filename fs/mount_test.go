package fs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/internal/metrics"
	"github.com/awcp/awcp/internal/mountinfo"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/sshd"
)

// requireFUSE fails where FUSE cannot work (no /dev/fuse, not root and no
// fusermount3): these tests are the mount's, and CI has both, so they
// never pass by not running.
func requireFUSE(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("no usable /dev/fuse (the mount tests need FUSE; .ci/run installs fuse3): %v", err)
	}
	f.Close()
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Fatal("not root and no fusermount3: install fuse3 or run as root")
		}
	}
}

// mountID is the delegation a mountFixture lends to.
const mountID = "dlg_fstest"

// mountFixture serves a fresh directory over a real SSH server and mounts
// it through a real FUSE mount.
type mountFixture struct {
	dir, mnt string
	addr     string
	mount    *Mount
	auth     *sshd.Authority
	srv      *sshd.Server
	served   *metrics.Registry // what the server was asked
	ro       bool              // the grant's

	stopServer func() // closes the listener and every connection
	exp        sshd.Export
}

// asked is how many requests of operation op ("": all) the delegator's
// server answered. The server counts a request after its answer went out,
// so it first waits for none to be in hand: every answer the mount got by
// now is counted.
func (f *mountFixture) asked(t testing.TB, op string) float64 {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); f.served.Sum("awcp_sftp_requests_handling", nil) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the delegator's server is still handling a request after 5 s")
		}
	}
	var match map[string]string
	if op != "" {
		match = map[string]string{"op": op}
	}
	return f.served.Sum("awcp_sftp_request_seconds", match)
}

// serve runs f.srv on ln until stopServer.
func (f *mountFixture) serve(ln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); f.srv.Serve(ctx, ln) }()
	var once sync.Once
	f.stopServer = func() { once.Do(func() { cancel(); <-served }) }
}

// restartServer takes the delegator's server away for down, then brings a
// new one up on the same address with the same keys.
func (f *mountFixture) restartServer(t *testing.T, down time.Duration) {
	t.Helper()
	f.stopServer()
	time.Sleep(down)
	srv, err := sshd.New(sshd.Options{Authority: f.auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Grant(mountID, f.exp, time.Time{})
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	f.serve(ln)
}

func newMount(t *testing.T, ro bool) *mountFixture {
	t.Helper()
	return newMountWith(t, ro, nil)
}

// newMountWith is newMount with the mount's options changed by tweak.
func newMountWith(t testing.TB, ro bool, tweak func(*Options)) *mountFixture {
	t.Helper()
	return newMountOf(t, sshd.Export{ReadOnly: ro}, tweak)
}

// newMountOf mounts the directory lent as exp says (a new one unless its
// Dir is set), with the mount's options changed by tweak.
func newMountOf(t testing.TB, exp sshd.Export, tweak func(*Options)) *mountFixture {
	t.Helper()
	ro := exp.ReadOnly
	requireFUSE(t)
	auth, err := sshd.LoadAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The mountpoint sits deeper than the export, so a relative link
	// leading out of the export names nothing on the executor's side.
	mnt := filepath.Join(t.TempDir(), "executor", "work")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f := &mountFixture{dir: exp.Dir, mnt: mnt, auth: auth, ro: ro}
	madeEmpty := f.dir == ""
	if madeEmpty {
		f.dir = t.TempDir()
	}
	const id = mountID
	log := slog.New(slog.DiscardHandler)
	f.served = metrics.New()
	f.srv, err = sshd.New(sshd.Options{Authority: auth, Logger: log, Metrics: f.served})
	if err != nil {
		t.Fatal(err)
	}
	exp.Dir = f.dir
	f.exp = exp
	f.srv.Grant(id, exp, time.Time{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.serve(ln)

	cred, err := auth.Issue(id, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := CertSigner(cred.PrivateKey, cred.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Addr: f.addr, User: id, Export: sshd.Locator(id), Signer: signer,
		HostKey: auth.HostKey().PublicKey(), ReadOnly: ro, Logger: log, Name: "awcp:" + id,
		ReconnectBound: 3 * time.Second, KeepAlive: 200 * time.Millisecond}
	if tweak != nil {
		tweak(&opts)
	}
	f.mount, err = New(f.mnt, opts)
	if err != nil {
		f.stopServer()
		t.Fatal(err)
	}
	if !opts.NoWatch {
		// The tree is fetched ahead at the start (warm.go): a test that
		// changes the owner's files while it is, sees its change only
		// once the watch reports it, some milliseconds on — as it would
		// any cached entry. The tests here change them at once.
		select {
		case <-f.mount.Warmed():
		case <-time.After(5 * time.Second):
		}
		if madeEmpty {
			// An empty directory's listing, fetched ahead, would answer
			// that the owner's files, made by the test right after,
			// are not there until the watch reports them (milliseconds:
			// warm_test.go tests that window). These tests make them and
			// look at once, as they did before the mount fetched ahead.
			f.mount.fsys.warm.drop()
		}
	}
	t.Cleanup(func() {
		if err := f.mount.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		f.stopServer()
		if mountinfo.IsMountpoint(f.mnt) {
			t.Error("mount left behind")
		}
	})
	return f
}

// TestPosix runs go-fuse's posixtest suite against the mount. The cases
// left out test what a network filesystem over SFTP v3 cannot carry.
func TestPosix(t *testing.T) {
	slow(t)
	excluded := map[string]string{
		"XAttr":               "SFTP v3 has no extended attributes",
		"XAttrLarge":          "SFTP v3 has no extended attributes",
		"FcntlFlockSetLk":     "SFTP v3 has no byte-range locks",
		"FcntlFlockLocksFile": "SFTP v3 has no byte-range locks",
		"LseekHoleSeeksToEOF": "SFTP v3 cannot report holes (SEEK_HOLE)",
		"LseekEnxioCheck":     "SFTP v3 cannot report holes (SEEK_DATA)",
		"Fallocate":           "SFTP v3 has no fallocate",
		"FallocateKeepSize":   "SFTP v3 has no fallocate",
		"NlinkZero":           "fstat after a rename replaced the open file is answered from the kernel's attribute cache (1s), as on any caching network filesystem",
		"SymlinkReadlink":     "makes a symlink to an absolute path, which the server refuses by design",
		"OpenSymlinkRace":     "makes symlinks to absolute paths, which the server refuses by design",
		"SetattrSymlink":      "sets times on a symlink itself: SFTP v3 SETSTAT follows links and pkg/sftp's client has no lsetstat",
	}
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := excluded[name]; ok {
				t.Skip(why)
			}
			f := newMount(t, false)
			posixtest.All[name](t, f.mnt)
		})
	}
}

func TestMountSeesBothSides(t *testing.T) {
	f := newMount(t, false)
	os.WriteFile(filepath.Join(f.dir, "from-delegator"), []byte("d"), 0o644)
	if b, err := os.ReadFile(filepath.Join(f.mnt, "from-delegator")); err != nil || string(b) != "d" {
		t.Fatalf("delegator's file in the mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(f.mnt, "from-executor"), []byte("e"), 0o755); err != nil {
		t.Fatal(err)
	}
	// close(2) does not wait for the file to land (landed).
	if fi := landedWith(t, filepath.Join(f.dir, "from-executor"), func(fi os.FileInfo) bool { return fi.Mode().Perm() == 0o755 }); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("executor's file on the delegator's side: %v", fi)
	}
	// errno mapping
	if err := os.Mkdir(filepath.Join(f.mnt, "from-executor"), 0o755); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("mkdir over a file: %v", err)
	}
	os.MkdirAll(filepath.Join(f.mnt, "d/e"), 0o755)
	if err := os.Remove(filepath.Join(f.mnt, "d")); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a non-empty dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.mnt, "nope")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat missing: %v", err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(f.mnt, "escape")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("symlink out of the tree: %v", err)
	}
	if err := os.Symlink("from-executor", filepath.Join(f.mnt, "ok-link")); err != nil {
		t.Errorf("in-tree symlink: %v", err)
	}
	// A link leading out of the export is resolved by the executor's
	// kernel, on the executor's side: it never reaches the delegator's file.
	os.WriteFile(filepath.Join(filepath.Dir(f.dir), "secret"), []byte("s"), 0o600)
	os.Symlink("../secret", filepath.Join(f.dir, "planted"))
	if b, err := os.ReadFile(filepath.Join(f.mnt, "planted")); err == nil && string(b) == "s" {
		t.Error("a link leading out reached the delegator's file")
	}
	// A readdir of many entries answers lookups from its listing.
	for i := range 50 {
		os.WriteFile(filepath.Join(f.dir, "many", "f"+string(rune('a'+i%26))+string(rune('a'+i/26))), nil, 0o644)
	}
	os.Mkdir(filepath.Join(f.dir, "many"), 0o755)
	for i := range 50 {
		os.WriteFile(filepath.Join(f.dir, "many", "f"+string(rune('a'+i%26))+string(rune('a'+i/26))), nil, 0o644)
	}
	out, err := exec.Command("ls", "-l", filepath.Join(f.mnt, "many")).CombinedOutput()
	if err != nil || strings.Count(string(out), "\n") != 51 {
		t.Fatalf("ls -l: %v\n%s", err, out)
	}
}

func TestReadOnlyMount(t *testing.T) {
	f := newMount(t, true)
	os.WriteFile(filepath.Join(f.dir, "f"), []byte("x"), 0o644)
	if b, err := os.ReadFile(filepath.Join(f.mnt, "f")); err != nil || string(b) != "x" {
		t.Fatalf("read: %q %v", b, err)
	}
	for name, op := range map[string]func() error{
		"create": func() error { return os.WriteFile(filepath.Join(f.mnt, "new"), nil, 0o644) },
		"write":  func() error { return os.WriteFile(filepath.Join(f.mnt, "f"), []byte("y"), 0o644) },
		"remove": func() error { return os.Remove(filepath.Join(f.mnt, "f")) },
		"mkdir":  func() error { return os.Mkdir(filepath.Join(f.mnt, "d"), 0o755) },
		"chmod":  func() error { return os.Chmod(filepath.Join(f.mnt, "f"), 0o777) },
		"rename": func() error { return os.Rename(filepath.Join(f.mnt, "f"), filepath.Join(f.mnt, "g")) },
	} {
		if err := op(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: %v, want EROFS", name, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, "f")); string(b) != "x" {
		t.Fatal("file changed")
	}
	if err := syscall.Access(filepath.Join(f.mnt, "f"), 2); !errors.Is(err, syscall.EROFS) {
		t.Errorf("access(W_OK): %v, want EROFS", err)
	}
	// Each refusal was the mount's own, and is counted: the kernel's "ro"
	// would have answered without asking it.
	if r := f.mount.Refused(); r.Count != 6 || len(r.Examples) != maxRefusalExamples {
		t.Errorf("the mount counted %d refusals (%q), want 6", r.Count, r.Examples)
	}
	// Named by path, as the user knows them — a node id says nothing.
	if err := os.WriteFile(filepath.Join(f.mnt, "f"), []byte("y"), 0o644); err == nil {
		t.Fatal("a write went through")
	}
	for _, e := range f.mount.Refused().Examples {
		if strings.Contains(e, "inode") {
			t.Errorf("a refusal named by inode: %q", e)
		}
	}
}

// A read-only mount names each refused write by its path, the first ones
// kept for the delegation's report.
func TestReadOnlyRefusalsNamePaths(t *testing.T) {
	f := newMount(t, true)
	os.MkdirAll(filepath.Join(f.dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(f.dir, "sub", "f"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(f.mnt, "sub", "f"), []byte("y"), 0o644)
	os.Chmod(filepath.Join(f.mnt, "sub", "f"), 0o777)
	got := strings.Join(f.mount.Refused().Examples, "\n")
	for _, want := range []string{"open for writing of sub/f", "setattr of sub/f"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q among the refusals:\n%s", want, got)
		}
	}
}

func TestRevokedLeaseFailsFast(t *testing.T) {
	f := newMount(t, false)
	os.WriteFile(filepath.Join(f.mnt, "before"), []byte("x"), 0o644)
	f.srv.Revoke(mountID)
	select {
	case <-f.mount.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed on revoke")
	}
	start := time.Now()
	_, err := os.ReadFile(filepath.Join(f.mnt, "after-revoke"))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("call after revoke: %v in %s", err, time.Since(start))
	}
}

// TestReconnect: the delegator's server goes away and comes back on the
// same address; calls made meanwhile stall instead of failing, and a file
// open across the outage keeps working.
func TestReconnect(t *testing.T) {
	slow(t)
	f := newMount(t, false)
	fd, err := os.OpenFile(filepath.Join(f.mnt, "kept-open"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	fd.Write([]byte("before "))

	f.restartServer(t, 800*time.Millisecond)

	// A new name (no cache can answer), during or right after the outage.
	if err := os.WriteFile(filepath.Join(f.mnt, "after"), []byte("x"), 0o644); err != nil {
		t.Fatalf("write after the outage: %v", err)
	}
	if _, err := fd.Write([]byte("after")); err != nil {
		t.Fatalf("write to a file open across the outage: %v", err)
	}
	// Writes are sent behind: they are on the delegator's disk once fsync
	// (or close) has returned.
	if err := fd.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, "kept-open")); string(b) != "before after" {
		t.Fatalf("kept-open = %q", b)
	}
}

// TestReconnectBound: when the delegator stays away, calls fail with EIO
// once the bound has passed, never hang.
func TestReconnectBound(t *testing.T) {
	slow(t)
	f := newMount(t, false)
	f.stopServer()
	start := time.Now()
	_, err := os.Stat(filepath.Join(f.mnt, "never-seen"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("stat while away: %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %s, bound is 3s", el)
	}
}

// A file read again unchanged is served from the page cache without
// opening it remotely; a file changed by the delegator between opens is
// read fresh; and a deferred open still reads a file unlinked or replaced
// after it was opened.
func TestReopenFromCache(t *testing.T) {
	f := newMount(t, false)
	path := filepath.Join(f.mnt, "cached.txt")
	if err := os.WriteFile(path, []byte("first version\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second open keeps the cache and defers its open
		if b, err := os.ReadFile(path); err != nil || string(b) != "first version\n" {
			t.Fatalf("read: %q %v", b, err)
		}
	}
	// Changed on the delegator's side: new size and mtime, so the next open
	// after the attribute timeout reads it fresh.
	// (By another process, as the owner would: this one is the server's,
	// whose changes to a file the mount has just written are the mount's.)
	owner(t, f.dir, fmt.Sprintf("printf 'second, longer version\\n' > cached.txt && touch -d @%d cached.txt",
		time.Now().Add(time.Hour).Unix()))
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && string(b) == "second, longer version\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delegator's change never showed: %q %v", b, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, remove := range []func() error{
		func() error { return os.Remove(path) },
		func() error {
			os.WriteFile(filepath.Join(f.mnt, "other"), []byte("other"), 0o644)
			return os.Rename(filepath.Join(f.mnt, "other"), path)
		},
	} {
		content := []byte(strings.Repeat("kept after unlink ", 1000))
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		// Read until an open finds the file as the last one left it: from
		// then on, opens are deferred.
		os.ReadFile(path)
		os.ReadFile(path)
		fd, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		// Drop the cached pages so the reads below must reach the file.
		unix.Fadvise(int(fd.Fd()), 0, 0, unix.FADV_DONTNEED)
		if err := remove(); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(fd)
		fd.Close()
		if err != nil || string(b) != string(content) {
			t.Fatalf("read after the file went: %d bytes, %v", len(b), err)
		}
	}
}

// In a directory the mount made or listed, names it does not hold are
// answered without asking the delegator, for an entry timeout: the mount's
// own changes are seen at once, the delegator's within two timeouts.
func TestKnownNames(t *testing.T) {
	f := newMount(t, false)
	d := filepath.Join(f.mnt, "made")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "probe")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("probe in a new dir: %v", err)
	}
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"create", func() error { return os.WriteFile(filepath.Join(d, "a"), []byte("a"), 0o644) }},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(d, "sub"), 0o755) }},
		{"symlink", func() error { return os.Symlink("a", filepath.Join(d, "link")) }},
		{"link", func() error { return os.Link(filepath.Join(d, "a"), filepath.Join(d, "hard")) }},
		{"rename", func() error { return os.Rename(filepath.Join(d, "hard"), filepath.Join(d, "moved")) }},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
	}
	for _, name := range []string{"a", "sub", "link", "moved"} {
		if _, err := os.Lstat(filepath.Join(d, name)); err != nil {
			t.Errorf("%s after the mount made it: %v", name, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(d, "hard")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("renamed-away name: %v", err)
	}
	os.WriteFile(filepath.Join(f.dir, "made", "from-delegator"), []byte("d"), 0o644)
	start := time.Now()
	for {
		if _, err := os.Stat(filepath.Join(d, "from-delegator")); err == nil {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the delegator's new file never showed in a dir the mount made")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A file made where the mount knows its name is free is created behind
// (its open travels with its writes): tar's open, write, futimens and close
// must leave on the delegator's side what they would anywhere. If the
// delegator took the name meanwhile, the create fails — at the close at
// the latest, never silently — its file is left alone, and the mount shows
// it within the entry timeout.
func TestCreateBehind(t *testing.T) {
	f := newMount(t, false)
	d := filepath.Join(f.mnt, "made")
	if err := os.Mkdir(d, 0o750); err != nil {
		t.Fatal(err)
	}
	stamp := time.Date(2022, 3, 4, 5, 6, 7, 0, time.UTC)
	for i := range 20 {
		name := fmt.Sprintf("f%d", i)
		fd, err := os.OpenFile(filepath.Join(d, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fd.Close() })
		if _, err := fd.Write([]byte("content " + name)); err != nil {
			t.Fatal(err)
		}
		tv := []unix.Timeval{unix.NsecToTimeval(stamp.UnixNano()), unix.NsecToTimeval(stamp.UnixNano())}
		if err := unix.Futimes(int(fd.Fd()), tv); err != nil {
			t.Fatalf("futimes %s: %v", name, err)
		}
		if err := fd.Close(); err != nil {
			t.Fatalf("close %s: %v", name, err)
		}
		on := filepath.Join(f.dir, "made", name)
		landed(t, on, "content "+name)
		want := landedWith(t, on, func(fi os.FileInfo) bool { return fi.ModTime().Equal(stamp) })
		got, err := os.Stat(filepath.Join(d, name))
		if err != nil {
			t.Fatal(err)
		}
		if want.Mode() != 0o640 || !want.ModTime().Equal(stamp) {
			t.Fatalf("%s on the delegator's side: mode %v, mtime %v", name, want.Mode(), want.ModTime())
		}
		ws, gs := want.Sys().(*syscall.Stat_t), got.Sys().(*syscall.Stat_t)
		if got.Mode() != want.Mode() || got.Size() != want.Size() || !got.ModTime().Equal(stamp) ||
			gs.Uid != ws.Uid || gs.Gid != ws.Gid {
			t.Fatalf("%s through the mount: %v %d %v uid %d gid %d; on the delegator's side %v %d %v uid %d gid %d",
				name, got.Mode(), got.Size(), got.ModTime(), gs.Uid, gs.Gid, want.Mode(), want.Size(), want.ModTime(), ws.Uid, ws.Gid)
		}
	}

	// The setgid bit, which the server never sets for an executor: the
	// mount must not claim the file has it.
	fd, err := syscall.Open(filepath.Join(d, "setgid"), syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o2750)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	on, err := os.Stat(filepath.Join(f.dir, "made", "setgid"))
	if err != nil || on.Mode() != 0o750 {
		t.Fatalf("on the delegator's side, a file created with mode 02750: %v, %v", on, err)
	}
	if got, err := os.Stat(filepath.Join(d, "setgid")); err != nil || got.Mode() != on.Mode() {
		t.Fatalf("through the mount, a file created with mode 02750: %v, %v; it is %v", got.Mode(), err, on.Mode())
	}

	for _, name := range []string{"written", "touched"} {
		race := filepath.Join(f.mnt, "race-"+name)
		if err := os.Mkdir(race, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(f.dir, "race-"+name, name), []byte("theirs"), 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := os.OpenFile(filepath.Join(race, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		switch {
		case err == nil:
			t.Cleanup(func() { fd.Close() })
			if name == "written" {
				fd.Write([]byte("mine!!"))
			}
			// close(2) does not wait for the create: fsync says.
			if err := errors.Join(fd.Sync(), fd.Close()); err == nil {
				t.Fatalf("%s: the delegator refused the create, and nothing said so", name)
			}
		case !errors.Is(err, syscall.EEXIST):
			t.Fatalf("%s: open of a name the delegator took: %v", name, err)
		}
		if b, _ := os.ReadFile(filepath.Join(f.dir, "race-"+name, name)); string(b) != "theirs" {
			t.Fatalf("%s: the delegator's file holds %q", name, b)
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			b, _ := os.ReadFile(filepath.Join(race, name))
			if string(b) == "theirs" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the mount still shows %q for the delegator's file", name, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// An open that creates only if missing (no O_EXCL, no O_TRUNC) is not
// made behind: were the delegator's file there after all, the kernel would
// have to know its size, or an append would write over its start.
func TestCreateAppendsToFileMadeMeanwhile(t *testing.T) {
	f := newMount(t, false)
	d := filepath.Join(f.mnt, "made")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "made", "log"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := os.OpenFile(filepath.Join(d, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fd.Close() })
	if _, err := fd.Write([]byte("+mine")); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	landed(t, filepath.Join(f.dir, "made", "log"), "theirs+mine")
}

// A create behind whose open the connection lost is made again on the
// next connection, with the writes sent behind it.
func TestCreateBehindAcrossReconnect(t *testing.T) {
	f := newMount(t, false)
	d := filepath.Join(f.mnt, "made")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	// The SFTP session ends under the mount, which has not noticed: the
	// open goes out on it and is lost, and so is the write behind it.
	f.mount.conn.live().Close()
	if err := os.WriteFile(filepath.Join(d, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatalf("write a new file across a lost session: %v", err)
	}
	landed(t, filepath.Join(f.dir, "made", "f"), "kept")
}

// A directory listed again within the entry timeout is not read from the
// delegator again (`ls -l` after `find`), unless the mount changed the tree
// since: then the next listing shows the mount's change and the
// delegator's. The delegator's own changes show within the timeout (here
// without its watch, which would show them at once:
// TestDelegatorChangesSeenAtOnce).
func TestListingReused(t *testing.T) {
	slow(t)
	f := newMountWith(t, false, func(o *Options) { o.NoWatch = true })
	if err := os.Mkdir(filepath.Join(f.dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(f.dir, "d", "a"), []byte("a"), 0o644)
	list := func() string {
		t.Helper()
		ents, err := os.ReadDir(filepath.Join(f.mnt, "d"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return strings.Join(names, " ")
	}
	listed := time.Now()
	if got := list(); got != "a" {
		t.Fatalf("first listing: %q", got)
	}
	os.WriteFile(filepath.Join(f.dir, "d", "delegator"), []byte("d"), 0o644)
	got := list()
	if since := time.Since(listed); since < time.Second/2 && got != "a" {
		t.Fatalf("listed again %v later: %q, want the listing of then, %q", since, got, "a")
	}
	if err := os.WriteFile(filepath.Join(f.mnt, "d", "b"), []byte("bb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := list(); got != "a b delegator" {
		t.Fatalf("after a create through the mount: %q, want %q", got, "a b delegator")
	}
	os.WriteFile(filepath.Join(f.dir, "d", "later"), nil, 0o644)
	for start := time.Now(); list() != "a b delegator later"; time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the delegator's new file never showed: %q", list())
		}
	}
}

// A lookup answered from a directory's listing (the kernel forgot the
// entry, the listing is within the entry timeout) shows what the mount
// itself changed since the listing, as a lookup asking the delegator would.
func TestListedAttributesFollowOwnChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make the kernel drop its entries (CI runs as root)")
	}
	f := newMount(t, false)
	d := filepath.Join(f.dir, "d")
	os.Mkdir(d, 0o755)
	for _, name := range []string{"grown", "moded", "cut", "moved", "linked"} {
		if err := os.WriteFile(filepath.Join(d, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := filepath.Join(f.mnt, "d")
	// Held open, the directory keeps its node, and the listing with it,
	// while the kernel drops the entries under it.
	pin, err := os.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	for round := range 3 { // a round must fit in the entry timeout
		if _, err := os.ReadDir(m); err != nil {
			t.Fatal(err)
		}
		var err error
		switch round {
		case 0:
			var fd *os.File
			if fd, err = os.OpenFile(filepath.Join(m, "grown"), os.O_WRONLY|os.O_APPEND, 0); err == nil {
				_, err = fd.Write([]byte("more"))
				err = errors.Join(err, fd.Close())
			}
			err = errors.Join(err, os.Chmod(filepath.Join(m, "moded"), 0o600), os.Truncate(filepath.Join(m, "cut"), 0))
		case 1:
			err = os.Rename(filepath.Join(m, "moved"), filepath.Join(m, "cut"))
		case 2:
			err = os.Link(filepath.Join(m, "linked"), filepath.Join(m, "second"))
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
			t.Fatal(err)
		}
		// The handle listed before the change is read again from its
		// start: its READDIRPLUS must not hand the kernel what changed.
		if _, err := pin.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		if _, err := pin.Readdirnames(-1); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			want, err1 := os.Lstat(filepath.Join(d, e.Name()))
			got, err2 := os.Lstat(filepath.Join(m, e.Name()))
			if err1 != nil || err2 != nil {
				t.Fatalf("round %d, %s: %v, %v", round, e.Name(), err1, err2)
			}
			ws, gs := want.Sys().(*syscall.Stat_t), got.Sys().(*syscall.Stat_t)
			if got.Size() != want.Size() || got.Mode() != want.Mode() || gs.Nlink != ws.Nlink {
				t.Fatalf("round %d, %s through the mount: size %d mode %v links %d; on the delegator's side %d %v %d",
					round, e.Name(), got.Size(), got.Mode(), gs.Nlink, want.Size(), want.Mode(), ws.Nlink)
			}
		}
	}
}

// Files opened for reading in their directory's order are read ahead, a
// batch in one round trip. What was read ahead is served only while the
// mount changed nothing and within the attribute timeout: a file written
// through the mount reads back new, and a change on the delegator's side
// shows as late as a cached attribute would, not later (here without the
// delegator's watch, which would show it at once).
func TestReadAheadInOrder(t *testing.T) {
	slow(t)
	f := newMountWith(t, false, func(o *Options) { o.NoWatch = true })
	dir := filepath.Join(f.dir, "src")
	os.Mkdir(dir, 0o755)
	for i := range 40 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.go", i)), []byte(fmt.Sprintf("package f%d\n", i)), 0o644)
	}
	d, err := os.Open(filepath.Join(f.mnt, "src"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := d.Readdirnames(-1) // the listing's order, which readers follow
	d.Close()
	if err != nil || len(names) != 40 {
		t.Fatalf("listing: %d names, %v", len(names), err)
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(f.mnt, "src", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	original := func(name string) string {
		var i int
		fmt.Sscanf(name, "f%02d.go", &i)
		return fmt.Sprintf("package f%d\n", i)
	}
	started := time.Now()
	read(names[0])
	read(names[1]) // in order: the next files are read ahead
	time.Sleep(100 * time.Millisecond)
	// Changed on the delegator after it was read ahead: the next open may
	// serve what was read, within the attribute timeout.
	os.WriteFile(filepath.Join(dir, names[3]), []byte("changed on the delegator\n"), 0o644)
	if got := read(names[2]); got != original(names[2]) {
		t.Fatalf("%s: %q", names[2], got)
	}
	// The read ahead was asked for after started and is served for an
	// attribute timeout (1 s): an open before then must get it.
	inTime := time.Since(started) < time.Second
	got := read(names[3])
	if inTime && got != original(names[3]) {
		t.Errorf("%s was not read ahead: the delegator's change of a moment ago shows (%q)", names[3], got)
	}
	if !inTime {
		t.Fatalf("the first opens took %s, past the attribute timeout: the read ahead cannot be told", time.Since(started))
	}
	// Changed through the mount: never served from what was read ahead.
	if err := os.WriteFile(filepath.Join(f.mnt, "src", names[6]), []byte("written here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(f.mnt, "src", names[8]), filepath.Join(f.mnt, "src", names[7])); err != nil {
		t.Fatal(err)
	}
	for _, name := range names[4:] {
		want := original(name)
		switch name {
		case names[6]:
			want = "written here\n"
		case names[7]:
			want = original(names[8])
		case names[8]:
			continue
		}
		if got := read(name); got != want {
			t.Fatalf("%s: %q, want %q", name, got, want)
		}
	}
	// Past the attribute timeout the delegator's change shows.
	time.Sleep(time.Second + 100*time.Millisecond)
	if got := read(names[3]); got != "changed on the delegator\n" {
		t.Fatalf("%s after the attribute timeout: %q", names[3], got)
	}
}

// A small file read whole is handed to the kernel's page cache with its
// open; a change on the delegator's side — same size, shorter, longer —
// still shows once the attribute timeout has passed, never the pages of
// before.
func TestReadWholeFileCached(t *testing.T) {
	slow(t)
	f := newMount(t, false)
	onDelegator, onMount := filepath.Join(f.dir, "small.go"), filepath.Join(f.mnt, "small.go")
	mtime := time.Now().Add(-time.Hour)
	for i, content := range []string{"package one\n", "package two\n", "package a\n", "package three // longer\n"} {
		if err := os.WriteFile(onDelegator, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		mtime = mtime.Add(time.Minute) // same-size contents differ in mtime
		os.Chtimes(onDelegator, mtime, mtime)
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // the attribute timeout
		}
		for range 2 { // cold, then from the page cache
			if got, err := os.ReadFile(onMount); err != nil || string(got) != content {
				t.Fatalf("version %d: %q, %v; want %q", i, got, err, content)
			}
		}
	}
}

// Large files read cold come back whole, however the kernel splits the
// reads: full-size SFTP reads once made answers longer than pkg/sftp's
// client accepts, which dropped the connection and failed the read (EIO).
func TestLargeColdRead(t *testing.T) {
	f := newMount(t, false)
	want := make([]byte, 3<<20+12345)
	rand.Read(want)
	if err := os.WriteFile(filepath.Join(f.dir, "big.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(f.mnt, "big.bin")
	// O_DIRECT: each read is one READ of that size, up to max_read (1 MiB).
	fd, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for off := 0; off < len(want); {
		n, err := fd.ReadAt(buf, int64(off))
		if n == 0 || (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(buf[:n], want[off:off+n]) {
			fd.Close()
			t.Fatalf("O_DIRECT read at %d: %d bytes, err %v", off, n, err)
		}
		off += n
	}
	fd.Close()
	for _, bufSize := range []int{4 << 10, 128 << 10, 1 << 20, 4 << 20} {
		fd, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		unix.Fadvise(int(fd.Fd()), 0, 0, unix.FADV_DONTNEED) // cold
		got, err := io.ReadAll(bufio.NewReaderSize(fd, bufSize))
		fd.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read with %d-byte reads: %d of %d bytes, equal %v, err %v", bufSize, len(got), len(want), bytes.Equal(got, want), err)
		}
	}
}

// A cold sequential read reaches the delegator as requests of up to 1 MiB,
// several in flight: the mount widens the kernel's read-ahead window from
// the 128 KiB it gives every FUSE mount.
func TestReadAheadWidened(t *testing.T) {
	f := newMount(t, false)
	var st unix.Stat_t
	if err := unix.Stat(f.mnt, &st); err != nil {
		t.Fatal(err)
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(kernelReadAhead >> 10); strings.TrimSpace(string(got)) != want {
		t.Fatalf("%s = %s, want %s", p, strings.TrimSpace(string(got)), want)
	}
}

// Writes are sent without waiting for their answers; every other request
// waits for them first. Setting the mtime by path while the file is still
// open must therefore land after the writes — the server runs a file's
// writes side by side, and a write landing after the SETSTAT would set the
// mtime to now. More than the 16 MiB kept in flight is written, so the
// writer also waits for the oldest half on the way.
func TestWriteBehindOrder(t *testing.T) {
	slow(t)
	f := newMount(t, false)
	for round := range 3 {
		name := fmt.Sprintf("behind%d.bin", round)
		data := make([]byte, 40<<20+round*4097)
		rand.Read(data)
		fd, err := os.OpenFile(filepath.Join(f.mnt, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(data); off += 300_000 { // unaligned pieces
			if _, err := fd.Write(data[off:min(off+300_000, len(data))]); err != nil {
				t.Fatal(err)
			}
		}
		past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		if err := os.Chtimes(filepath.Join(f.mnt, name), past, past); err != nil {
			t.Fatal(err)
		}
		if err := fd.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		// close(2) does not wait: the SETSTAT lands after the writes,
		// and the mtime, once it is past, stays so.
		fi := landedWith(t, filepath.Join(f.dir, name), func(fi os.FileInfo) bool { return fi.ModTime().Equal(past) })
		time.Sleep(50 * time.Millisecond)
		if fi, err := os.Stat(filepath.Join(f.dir, name)); err != nil || !fi.ModTime().Equal(past) {
			t.Fatalf("round %d: the delegator's mtime is %v (%v) after it was set, want %s: a write landed after the SETSTAT", round, fi, err, past)
		}
		if !fi.ModTime().Equal(past) {
			t.Fatalf("round %d: the delegator's mtime is %s, want %s: a write landed after the SETSTAT", round, fi.ModTime(), past)
		}
		if on, _ := os.ReadFile(filepath.Join(f.dir, name)); !bytes.Equal(on, data) {
			t.Fatalf("round %d: the delegator's file differs (%d bytes, want %d)", round, len(on), len(data))
		}
	}
}

// An open for reading brings the file's start along, and the first read
// is answered from it — unless the file was written through the mount in
// between, by another handle or a truncate: then the read must see that.
func TestOpenReadHead(t *testing.T) {
	f := newMount(t, false)
	for i, change := range []struct {
		name string
		do   func(p string) error
		want string
	}{
		{"nothing", func(string) error { return nil }, "delegator's\n"},
		{"write", func(p string) error { return os.WriteFile(p, []byte("new contents, longer\n"), 0o644) }, "new contents, longer\n"},
		{"truncate", func(p string) error { return os.Truncate(p, 3) }, "del"},
	} {
		name := fmt.Sprintf("head%d.txt", i)
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte("delegator's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(f.mnt, name)
		r, err := os.Open(p) // a first open: it brings "delegator's\n" along
		if err != nil {
			t.Fatal(err)
		}
		if err := change.do(p); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || string(got) != change.want {
			t.Fatalf("after %s through the mount, the handle opened before read %q (%v), want %q", change.name, got, err, change.want)
		}
	}
}

// slow marks a test that takes a second or more here: `make test-short`
// (go test -short), the loop while working, leaves it out; `make test`
// and CI run every test.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a second or more: make test runs it")
	}
}
