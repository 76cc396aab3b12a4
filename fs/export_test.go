package fs

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/awcp/awcp/sshd/sshdtest"
)

func anySigner(t *testing.T) gossh.Signer {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// Against a server that serves its whole file system, the mount shows
// exactly the directory exportLocator names — an absolute path, as the
// reference sends it — and nothing above it; writes land there.
func TestMountsExactlyTheExportOfAPlainServer(t *testing.T) {
	requireFUSE(t)
	addr, hostKey := sshdtest.OpenSSHSFTP(t)
	top := t.TempDir()
	ws := filepath.Join(top, "ws")
	os.MkdirAll(filepath.Join(ws, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hello\n"), 0o644)
	os.WriteFile(filepath.Join(top, "secret.txt"), []byte("not lent\n"), 0o600)
	mnt := filepath.Join(t.TempDir(), "mnt")
	os.MkdirAll(mnt, 0o700)
	m, err := New(mnt, Options{Addr: addr, User: "dlg", Export: ws, Signer: anySigner(t), HostKey: hostKey,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmount()
	if got := names(t, mnt); !slices.Equal(got, []string{"hello.txt", "sub"}) {
		t.Fatalf("the mount shows %v, want the export's hello.txt and sub", got)
	}
	for _, p := range []string{"secret.txt", "ws", "etc/passwd", "tmp"} {
		if _, err := os.Stat(filepath.Join(mnt, p)); err == nil {
			t.Errorf("%s is reachable through the mount", p)
		}
	}
	if err := os.WriteFile(filepath.Join(mnt, "sub", "new.txt"), []byte("made\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	landed(t, filepath.Join(ws, "sub", "new.txt"), "made\n")
}

// A locator that is empty, missing or not a directory is refused: the
// mount never falls back to the server's root.
func TestExportLocatorRefusals(t *testing.T) {
	requireFUSE(t)
	addr, hostKey := sshdtest.OpenSSHSFTP(t)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, export := range []string{"", "/no/such/dir", file} {
		mnt := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		done := make(chan error, 1)
		go func() {
			m, err := New(mnt, Options{Addr: addr, User: "dlg", Export: export, Signer: anySigner(t), HostKey: hostKey,
				Logger: slog.New(slog.DiscardHandler)})
			if err == nil {
				m.Unmount()
				err = errors.New("mounted")
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || err.Error() == "mounted" {
				t.Errorf("export %q: mounted, want a refusal", export)
			}
		case <-ctx.Done():
			t.Errorf("export %q: no answer in 10 s", export)
		}
		cancel()
	}
}
