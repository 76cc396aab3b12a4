package sshd

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// memRecorder keeps a session's operations in memory.
type memRecorder struct {
	mu  sync.Mutex
	ops []Op
}

func (m *memRecorder) Record(op Op) {
	m.mu.Lock()
	m.ops = append(m.ops, op)
	m.mu.Unlock()
}

// refused is the recorded refusals, as "kind path".
func (m *memRecorder) refused() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, op := range m.ops {
		if op.Refused {
			out = append(out, op.Kind+" "+op.Path)
		}
	}
	return out
}

func (m *memRecorder) find(kind, path string) (Op, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range m.ops {
		if op.Kind == kind && op.Path == path && !op.Refused {
			return op, true
		}
	}
	return Op{}, false
}

// grant lends exp to id for an hour and returns a credential.
func (f *fixture) grant(t testing.TB, id string, exp Export) *Credential {
	t.Helper()
	f.srv.Grant(id, exp, time.Now().Add(time.Hour))
	cred, err := f.auth.Issue(id, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// OpenSSH's sftp client against an export that hides secrets, refuses
// deletes and bounds writes: the hidden files are not listed and cannot
// be fetched (the client looks names up in listings: to it they are not
// there), each other refusal reaches it as "Permission denied", nothing
// refused happens on disk, and the audit log records each refusal and
// what was done. As an attacker would: a symlink the client makes to a
// hidden file, and one the owner had to a directory holding one, lead to
// refusals, and a second session cannot write past the bound the first
// one spent.
func TestPolicyRefusalsReachOpenSSHClient(t *testing.T) {
	need(t, "sftp", "ssh")
	f := newFixture(t)
	dir := t.TempDir()
	for name, content := range map[string]string{".env": "SECRET=1\n", "a.txt": "abc\n", "sub/server.pem": "KEY\n", "keep.txt": "keep\n"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	if err := os.Symlink("sub", filepath.Join(dir, "certs")); err != nil { // the owner's
		t.Fatal(err)
	}
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "small"), []byte("12345"), 0o644)
	os.WriteFile(filepath.Join(local, "big"), []byte(strings.Repeat("x", 2000)), 0o644)
	rec := &memRecorder{}
	cred := f.grant(t, "dlg_policy", Export{Dir: dir, Audit: rec,
		Policy: wire.ExportPolicy{Hide: []string{".env", "*.pem"}, NoDelete: true, MaxWriteBytes: 1100}})
	key, kh, host, port := openSSHFiles(t, f, cred)
	batch := strings.Join([]string{
		"ls -a1",
		"ls -1 sub",
		"-get .env " + filepath.Join(local, "env"),
		"-get sub/server.pem " + filepath.Join(local, "pem"),
		"get a.txt " + filepath.Join(local, "a"),
		"-rm keep.txt",
		"-rename a.txt keep.txt",
		"-put " + filepath.Join(local, "big") + " big.txt",
		"put " + filepath.Join(local, "small") + " small.txt",
		"ln -s .env peek",
		"-get peek " + filepath.Join(local, "peek"),
		"ls -1 certs",
		"-get certs/server.pem " + filepath.Join(local, "certs-pem"),
	}, "\n")
	sftp := func(batch string) string {
		t.Helper()
		cmd := exec.Command("sftp", append(sshOptions(key, kh), "-P", port, "-b", "-", "dlg_policy@"+host)...)
		cmd.Stdin = strings.NewReader(batch)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sftp: %v\n%s", err, out)
		}
		return string(out)
	}
	text := sftp(batch)
	for _, line := range strings.Split(text, "\n") {
		listed := !strings.HasPrefix(line, "sftp>") && !strings.Contains(line, "not found") && !strings.Contains(line, "denied")
		if listed && (strings.HasSuffix(line, ".env") || strings.HasSuffix(line, ".pem")) {
			t.Errorf("a hidden name is listed: %q", line)
		}
	}
	if n := strings.Count(text, "ermission denied"); n != 4 {
		t.Errorf("%d refusals reached the client, want 4 (rm, rename, write past the limit, the link to .env):\n%s", n, text)
	}
	// A second session shares the bound. Each new name costs its length
	// and inodeCost (256): the first session spent 263 (big.txt, whose
	// 2000 bytes were refused), 270 (small.txt) and 264 (the link), so
	// small2.txt (271) fits the 1100 and small3.txt does not.
	text = sftp("put " + filepath.Join(local, "small") + " small2.txt\n-put " + filepath.Join(local, "small") + " small3.txt")
	if !strings.Contains(text, "ermission denied") {
		t.Errorf("a second session wrote past the bound the first spent:\n%s", text)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "small2.txt")); string(b) != "12345" {
		t.Errorf("small2.txt holds %q: a write within the bound was refused", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "small3.txt")); len(b) != 0 {
		t.Errorf("small3.txt holds %d bytes past the bound", len(b))
	}
	for _, name := range []string{"env", "pem", "peek", "certs-pem"} {
		if _, err := os.Stat(filepath.Join(local, name)); err == nil {
			t.Errorf("a hidden file was read: %s", name)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep.txt")); string(b) != "keep\n" {
		t.Errorf("keep.txt holds %q: a delete or an overwriting rename went through", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "abc\n" {
		t.Errorf("a.txt holds %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "small.txt")); string(b) != "12345" {
		t.Errorf("small.txt holds %q: a write within the limit was refused", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "big.txt")); len(b) != 0 {
		t.Errorf("big.txt holds %d bytes past the limit", len(b))
	}

	refused := rec.refused()
	for _, want := range []string{"remove keep.txt", "rename a.txt", "write big.txt", "lookup .env", "create small3.txt"} {
		if !slices.Contains(refused, want) {
			t.Errorf("refusal %q not recorded; recorded %q", want, refused)
		}
	}
	if op, ok := rec.find(OpRead, "a.txt"); !ok || op.Bytes != 4 {
		t.Errorf("the read of a.txt is recorded as %+v (%v), want 4 bytes", op, ok)
	}
	if op, ok := rec.find(OpWrite, "small.txt"); !ok || op.Bytes != 5 {
		t.Errorf("the write of small.txt is recorded as %+v (%v), want 5 bytes", op, ok)
	}
	if _, ok := rec.find(OpList, "sub"); !ok {
		t.Errorf("the listing of sub is not recorded")
	}
}

// A rename over a file that was there (sed -i's and editors' way of
// rewriting one) is recorded as replacing it, so the change list says
// modified, not added; a rename to a new name is not.
func TestRenameOverRecordsTheReplaced(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "conf.ini"), []byte("a=1\n"), 0o644)
	rec := &memRecorder{}
	cred := f.grant(t, "dlg_rename", Export{Dir: dir, Audit: rec})
	c := f.sftp(t, "dlg_rename", cred)
	for name, content := range map[string]string{"sedXYZ": "a=2\n", "other": "x\n"} {
		w, err := c.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(content))
		w.Close()
	}
	if err := c.PosixRename("sedXYZ", "conf.ini"); err != nil {
		t.Fatal(err)
	}
	if err := c.PosixRename("other", "fresh.txt"); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	replaced := map[string]bool{}
	for _, op := range rec.ops {
		if op.Kind == OpRename {
			replaced[op.To] = op.Replaced
		}
	}
	if !replaced["conf.ini"] || replaced["fresh.txt"] {
		t.Errorf("renames recorded as replacing: %v", replaced)
	}
}

// A delegation lent a write scope writes there and nowhere else, as an
// attacker tries: a file outside made, one changed, renamed, removed, set
// attributes of; the scope itself renamed away; a symlink made inside the
// scope to outside it, and written through; a directory of the scope
// moved out. Each is refused (and recorded as refused); work inside the
// scope goes, and reading outside it too.
func TestWriteScopeHolds(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"mine/a.txt": "mine\n", "other/b.txt": "other\n", "top.txt": "top\n"})
	before := treeSum(t, filepath.Join(dir, "other"))
	rec := &memRecorder{}
	cred := f.grant(t, "dlg_scope", Export{Dir: dir, Audit: rec, Policy: wire.ExportPolicy{WriteScope: "mine"}})
	c := f.sftp(t, "dlg_scope", cred)
	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s outside the scope went through", what)
		}
	}
	w, err := c.Create("mine/new.txt")
	if err != nil {
		t.Fatalf("a file made in the scope: %v", err)
	}
	w.Write([]byte("new\n"))
	w.Close()
	if r, err := c.Open("other/b.txt"); err != nil {
		t.Errorf("reading outside the scope: %v", err)
	} else if b, _ := io.ReadAll(r); string(b) != "other\n" {
		t.Errorf("reading outside the scope: %q", b)
	} else {
		r.Close()
	}
	_, err = c.Create("other/evil.txt")
	refused("a create", err)
	_, err = c.OpenFile("other/b.txt", os.O_WRONLY|os.O_TRUNC)
	refused("a write", err)
	refused("a rename out", c.PosixRename("mine/a.txt", "other/a.txt"))
	refused("a rename in over", c.PosixRename("top.txt", "mine/top.txt"))
	refused("a remove", c.Remove("top.txt"))
	refused("a chmod", c.Chmod("top.txt", 0o777))
	refused("renaming the scope away", c.PosixRename("mine", "gone"))
	if err := c.Symlink("../other", "mine/out"); err == nil {
		_, err = c.Create("mine/out/through.txt")
		refused("a write through a symlink", err)
	}
	if err := c.Mkdir("mine/sub"); err != nil {
		t.Fatal(err)
	}
	refused("moving a directory of the scope out", c.PosixRename("mine/sub", "other/sub"))
	if got := treeSum(t, filepath.Join(dir, "other")); !sameTree(got, before) {
		t.Errorf("outside the scope changed: %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "top.txt")); string(b) != "top\n" {
		t.Errorf("top.txt: %q", b)
	}
	if n := len(rec.refused()); n < 8 {
		t.Errorf("%d refusals recorded, want 8 or more: %v", n, rec.refused())
	}
}
