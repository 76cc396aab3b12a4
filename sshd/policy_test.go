package sshd

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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
// what was done. (A hidden name opened directly is refused too: the
// mount's test shows it.)
func TestPolicyRefusalsReachOpenSSHClient(t *testing.T) {
	need(t, "sftp", "ssh")
	f := newFixture(t)
	dir := t.TempDir()
	for name, content := range map[string]string{".env": "SECRET=1\n", "a.txt": "abc\n", "sub/server.pem": "KEY\n", "keep.txt": "keep\n"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "small"), []byte("12345"), 0o644)
	os.WriteFile(filepath.Join(local, "big"), []byte(strings.Repeat("x", 20)), 0o644)
	rec := &memRecorder{}
	cred := f.grant(t, "dlg_policy", Export{Dir: dir, Audit: rec,
		Policy: ExportPolicy{Hide: []string{".env", "*.pem"}, NoDelete: true, MaxWriteBytes: 10}})
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
	}, "\n")
	cmd := exec.Command("sftp", append(sshOptions(key, kh), "-P", port, "-b", "-", "dlg_policy@"+host)...)
	cmd.Stdin = strings.NewReader(batch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sftp: %v\n%s", err, out)
	}
	text := string(out)
	if strings.Contains(text, ".env") && strings.Contains(text, "\n.env\n") || strings.Contains(text, "server.pem\n") {
		t.Errorf("a hidden name is listed:\n%s", text)
	}
	if n := strings.Count(text, "ermission denied"); n != 3 {
		t.Errorf("%d refusals reached the client, want 3 (rm, rename, write past the limit):\n%s", n, text)
	}
	for _, name := range []string{"env", "pem"} {
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
	for _, want := range []string{"remove keep.txt", "rename a.txt", "write big.txt"} {
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
