package sshd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// The attacker holds the delegation's certificate and speaks SFTP. The
// export hides .aws, .ssh and .docker/config.json (the defaults) and
// config/prod.json. Through a parent it renamed, or a symlink to a hidden
// directory it made, it tries to read, link, move, stat, chmod, truncate
// and remove the owner's secrets. Each is refused, the secrets are as they
// were, and the audit log names the real paths.
func TestHiddenThroughRenamedOrSymlinkedParents(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	secrets := map[string]string{
		".aws/credentials":    "aws-secret",
		".ssh/id_work":        "ssh-key",
		".docker/config.json": "docker-auth",
		"config/prod.json":    "prod-password",
	}
	for name, content := range secrets {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "config", "dev.json"), []byte("dev"), 0o644)
	rec := &memRecorder{}
	policy := wire.ExportPolicy{Hide: append(slices.Clone(wire.DefaultHide), "config/prod.json")}
	for _, noDelete := range []bool{false, true} {
		policy.NoDelete = noDelete
		cred := f.grant(t, "dlg_attack", Export{Dir: dir, Policy: policy, Audit: rec})
		c := f.sftp(t, "dlg_attack", cred)

		read := func(p string) string {
			fh, err := c.Open(p)
			if err != nil {
				return ""
			}
			defer fh.Close()
			b := make([]byte, 64)
			n, _ := fh.Read(b)
			return string(b[:n])
		}
		// 5: rename a parent, then read the file under its new path.
		for _, mv := range [][2]string{{".docker", "dock"}, {"config", "cfg"}} {
			if err := c.Rename(mv[0], mv[1]); err == nil {
				t.Errorf("renaming %s to %s was allowed", mv[0], mv[1])
			}
			if err := c.PosixRename(mv[0], mv[1]); err == nil {
				t.Errorf("posix-renaming %s to %s was allowed", mv[0], mv[1])
			}
		}
		for _, p := range []string{"dock/config.json", "cfg/prod.json"} {
			if got := read(p); got != "" {
				t.Errorf("read %s: %q", p, got)
			}
		}
		// 6: a symlink to a hidden directory, then every request through it.
		c.Symlink(".aws", "x")
		c.Symlink(".ssh", "y")
		c.Symlink(".docker", "z")
		through := map[string]func() error{
			"read x/credentials":     func() error { _, err := c.Open("x/credentials"); return err },
			"link x/credentials":     func() error { return c.Link("x/credentials", "stolen") },
			"rename y/id_work":       func() error { return c.Rename("y/id_work", "moved") },
			"posix-rename y/id_work": func() error { return c.PosixRename("y/id_work", "moved") },
			"rename into y":          func() error { return c.Rename("config/dev.json", "y/authorized_keys") },
			"stat x/credentials":     func() error { _, err := c.Stat("x/credentials"); return err },
			"lstat x/credentials":    func() error { _, err := c.Lstat("x/credentials"); return err },
			"chmod x/credentials":    func() error { return c.Chmod("x/credentials", 0o666) },
			"truncate x/credentials": func() error { return c.Truncate("x/credentials", 0) },
			"remove x/credentials":   func() error { return c.Remove("x/credentials") },
			"read z/config.json":     func() error { _, err := c.Open("z/config.json"); return err },
		}
		for what, op := range through {
			if err := op(); err == nil {
				t.Errorf("%s (no-delete %v): allowed", what, noDelete)
			}
		}
		if ents, err := c.ReadDir("z"); err == nil {
			for _, e := range ents {
				if e.Name() == "config.json" {
					t.Errorf("a listing through z names config.json")
				}
			}
		}
		for name, content := range secrets {
			fi, err := os.Stat(filepath.Join(dir, name))
			b, _ := os.ReadFile(filepath.Join(dir, name))
			if err != nil || string(b) != content || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s was changed: %q, %v", name, b, err)
			}
		}
		for _, p := range []string{"stolen", "moved", ".ssh/authorized_keys"} {
			if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
				t.Errorf("%s exists", p)
			}
		}
		for _, l := range []string{"x", "y", "z"} {
			c.Remove(l)
		}
		c.Close()
	}
	// 10: the log names the real paths, never only the links.
	var inAws, inSsh bool
	for _, r := range rec.refused() {
		if strings.Contains(r, ".aws/credentials") {
			inAws = true
		}
		if strings.Contains(r, ".ssh/id_work") {
			inSsh = true
		}
		if strings.Contains(r, " x/") || strings.Contains(r, " y/") {
			t.Errorf("a refusal is recorded under the link's path: %q", r)
		}
	}
	if !inAws || !inSsh {
		t.Errorf("refusals through links not recorded under .aws and .ssh: %q", rec.refused())
	}
}

// TestHiddenThroughASwappedParent: the attacker flips a symlink x between
// a directory of its own and .aws while it truncates and chmods
// x/credentials, so that the check of the request's path and the call
// that acts may see two different x; and reads a symlink in .aws the same
// way. Each acts on the very file checked: the owner's credentials keep
// their bytes, mode and times, and the hidden link's target is never read.
func TestHiddenThroughASwappedParent(t *testing.T) {
	slow(t)
	f := newFixture(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, ".aws"), 0o755)
	os.WriteFile(filepath.Join(dir, ".aws", "credentials"), []byte("aws-secret"), 0o600)
	os.MkdirAll(filepath.Join(dir, "mine"), 0o755)
	os.WriteFile(filepath.Join(dir, "mine", "credentials"), []byte("decoy"), 0o600)
	os.Symlink("profile-secret-name", filepath.Join(dir, ".aws", "link"))
	os.Symlink("decoy", filepath.Join(dir, "mine", "link"))
	cred := f.grant(t, "dlg_swap", Export{Dir: dir, Policy: wire.ExportPolicy{Hide: wire.DefaultHide}})
	c := f.sftp(t, "dlg_swap", cred)
	defer c.Close()

	stop := make(chan struct{})
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			target := map[bool]string{true: "mine", false: ".aws"}[i%2 == 0]
			tmp := filepath.Join(dir, "x.next")
			os.Remove(tmp)
			os.Symlink(target, tmp)
			os.Rename(tmp, filepath.Join(dir, "x"))
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		c.Truncate("x/credentials", 0)
		c.Chmod("x/credentials", 0o666)
		c.Chtimes("x/credentials", time.Unix(1, 0), time.Unix(1, 0))
		if target, err := c.ReadLink("x/link"); err == nil && target != "decoy" {
			t.Errorf("read a hidden symlink through the swapped parent: %q", target)
		}
	}
	close(stop)
	<-flipped
	fi, err := os.Stat(filepath.Join(dir, ".aws", "credentials"))
	b, _ := os.ReadFile(filepath.Join(dir, ".aws", "credentials"))
	if err != nil || string(b) != "aws-secret" || fi.Mode().Perm() != 0o600 || fi.ModTime().Unix() == 1 {
		t.Fatalf("the owner's credentials were changed through the swapped parent: %q, mode %v, mtime %v, %v",
			b, fi.Mode().Perm(), fi.ModTime(), err)
	}
}
