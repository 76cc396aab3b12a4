package sshd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
	gossh "golang.org/x/crypto/ssh"
)

type fixture struct {
	auth *Authority
	srv  *Server
	addr string
}

func newFixture(t testing.TB) *fixture { return newFixtureWith(t, nil) }

// newFixtureWith is newFixture with the server's metrics going to m.
func newFixtureWith(t testing.TB, m Metrics) *fixture {
	t.Helper()
	return newFixtureOpts(t, func(o *Options) { o.Metrics = m })
}

// newFixtureOpts is newFixture with the server's options changed by set.
func newFixtureOpts(t testing.TB, set func(*Options)) *fixture {
	t.Helper()
	auth, err := LoadAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{auth: auth}
	opts := Options{Authority: auth, SweepInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	set(&opts)
	f.srv, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return f
}

// lend grants a new directory to id for an hour and returns a credential.
func (f *fixture) lend(t testing.TB, id string, ro bool) (string, *Credential) {
	t.Helper()
	dir := t.TempDir()
	f.srv.Grant(id, Export{Dir: dir, ReadOnly: ro}, time.Now().Add(time.Hour))
	cred, err := f.auth.Issue(id, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return dir, cred
}

func certSigner(t testing.TB, cred *Credential) gossh.Signer {
	t.Helper()
	key, err := gossh.ParsePrivateKey([]byte(cred.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(cred.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	s, err := gossh.NewCertSigner(pub.(*gossh.Certificate), key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fixture) dial(user string, signer gossh.Signer) (*gossh.Client, error) {
	return gossh.Dial("tcp", f.addr, &gossh.ClientConfig{
		User:            user,
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.FixedHostKey(f.auth.HostKey().PublicKey()),
		Timeout:         5 * time.Second,
	})
}

func (f *fixture) sftp(t testing.TB, user string, cred *Credential) *sftp.Client {
	t.Helper()
	c, err := f.dial(user, certSigner(t, cred))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sftp.NewClient(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close(); c.Close() })
	return sc
}

func TestCertificateChecks(t *testing.T) {
	f := newFixture(t)
	const id = "dlg_certs"
	_, cred := f.lend(t, id, false)

	other, _ := LoadAuthority(t.TempDir())
	otherCred, _ := other.Issue(id, time.Now().Add(time.Hour))
	expired, _ := f.auth.Issue(id, time.Now().Add(-time.Second))
	_, plain, _ := ed25519.GenerateKey(rand.Reader)
	plainSigner, _ := gossh.NewSignerFromKey(plain)
	hostCert := func() gossh.Signer {
		c, _ := f.auth.Issue(id, time.Now().Add(time.Hour))
		pub, _, _, _, _ := gossh.ParseAuthorizedKey([]byte(c.Certificate))
		cert := pub.(*gossh.Certificate)
		cert.CertType = gossh.HostCert
		cert.SignCert(rand.Reader, f.auth.ca)
		key, _ := gossh.ParsePrivateKey([]byte(c.PrivateKey))
		s, _ := gossh.NewCertSigner(cert, key)
		return s
	}()

	tests := []struct {
		name   string
		user   string
		signer gossh.Signer
		ok     bool
	}{
		{"issued certificate", id, certSigner(t, cred), true},
		{"principal is not the user", "dlg_other", certSigner(t, cred), false},
		{"another CA", id, certSigner(t, otherCred), false},
		{"expired", id, certSigner(t, expired), false},
		{"plain key", id, plainSigner, false},
		{"host certificate", id, hostCert, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := f.dial(tt.user, tt.signer)
			if (err == nil) != tt.ok {
				t.Fatalf("dial err = %v, want ok=%v", err, tt.ok)
			}
			if c != nil {
				c.Close()
			}
		})
	}

	t.Run("only sftp is served", func(t *testing.T) {
		c, err := f.dial(id, certSigner(t, cred))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, run := range []func(*gossh.Session) error{
			func(s *gossh.Session) error { return s.Run("id") },
			func(s *gossh.Session) error { return s.Shell() },
			func(s *gossh.Session) error { return s.RequestPty("xterm", 80, 24, nil) },
			func(s *gossh.Session) error { return s.RequestSubsystem("netconf") },
			func(s *gossh.Session) error { return s.Setenv("LD_PRELOAD", "/tmp/x.so") },
		} {
			sess, err := c.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			if err := run(sess); err == nil {
				t.Error("request was accepted")
			}
			sess.Close()
		}
		if _, err := c.Dial("tcp", f.addr); err == nil {
			t.Error("port forwarding was accepted")
		}
		if _, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
			t.Error("remote forwarding was accepted")
		}
		// The server survived all of it.
		if _, err := sftp.NewClient(c); err != nil {
			t.Fatalf("sftp after refusals: %v", err)
		}
	})

	t.Run("ended lease: refused and disconnected", func(t *testing.T) {
		sc := f.sftp(t, id, cred)
		if _, err := sc.Getwd(); err != nil {
			t.Fatal(err)
		}
		f.srv.Revoke(id)
		if _, err := sc.Stat("/"); err == nil {
			t.Fatal("connection still serves after revoke")
		}
		if _, err := f.dial(id, certSigner(t, cred)); err == nil {
			t.Fatal("certificate of an ended lease accepted")
		}
	})
}

// A grant's end closes its connections without a Revoke, and refuses
// new ones.
// TestCertificatesWaitForTheResumption: a restarted delegator's server is
// up before its delegations are granted again. Meanwhile a valid
// certificate without a grant waits rather than be told its lease is over;
// when the resumption ends, the one granted again gets in and the other is
// refused; after it, a certificate without a grant is refused at once.
func TestCertificatesWaitForTheResumption(t *testing.T) {
	resumed := make(chan struct{})
	f := newFixtureOpts(t, func(o *Options) { o.Resumed = resumed })
	issue := func(id string) gossh.Signer {
		cred, err := f.auth.Issue(id, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return certSigner(t, cred)
	}
	dialled := func(id string) chan error {
		c := make(chan error, 1)
		signer := issue(id)
		go func() {
			client, err := f.dial(id, signer)
			if err == nil {
				client.Close()
			}
			c <- err
		}()
		return c
	}
	back, gone := dialled("dlg_back"), dialled("dlg_gone")
	select {
	case err := <-back:
		t.Fatalf("a certificate was answered (%v) before the resumption ended", err)
	case err := <-gone:
		t.Fatalf("a certificate was answered (%v) before the resumption ended", err)
	case <-time.After(400 * time.Millisecond):
	}
	f.srv.Grant("dlg_back", Export{Dir: t.TempDir()}, time.Now().Add(time.Hour))
	close(resumed)
	if err := <-back; err != nil {
		t.Fatalf("the delegation granted again was refused: %v", err)
	}
	if err := <-gone; err == nil {
		t.Fatal("a certificate of no grant got in after the resumption")
	}
	start := time.Now()
	if err := <-dialled("dlg_later"); err == nil {
		t.Fatal("a certificate of no grant got in")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("after the resumption a certificate of no grant waited %s", took)
	}

	// A takeover on demand (an editor's new gateway at session/load):
	// the grant comes while the resumption is still open, and the
	// certificate gets in then, not at its end.
	open := newFixtureOpts(t, func(o *Options) { o.Resumed = make(chan struct{}) })
	f = open
	soon := dialled("dlg_soon")
	time.Sleep(200 * time.Millisecond)
	granted := time.Now()
	open.srv.Grant("dlg_soon", Export{Dir: t.TempDir()}, time.Now().Add(time.Hour))
	if err := <-soon; err != nil {
		t.Fatalf("a certificate whose grant came meanwhile was refused: %v", err)
	}
	if took := time.Since(granted); took > 2*time.Second {
		t.Fatalf("a certificate whose grant came meanwhile waited %s more", took)
	}
}

func TestGrantEndClosesConnections(t *testing.T) {
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_sweep", false)
	sc := f.sftp(t, "dlg_sweep", cred)
	f.srv.Grant("dlg_sweep", Export{Dir: dir}, time.Now().Add(300*time.Millisecond))
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := sc.Stat("/"); err != nil {
			if _, err := f.dial("dlg_sweep", certSigner(t, cred)); err == nil {
				t.Fatal("certificate of an ended grant accepted")
			}
			if ids := f.srv.Granted(); len(ids) != 0 {
				t.Fatalf("still granted: %v", ids)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("connection of an ended grant still open")
}

func TestSFTPConfinedAndComplete(t *testing.T) {
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_fs", false)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs-link"))
	os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(dir, "rel-link"))
	sc := f.sftp(t, "dlg_fs", cred)

	// Writes, reads, stat, rename, readdir.
	w, err := sc.OpenFile("/a.txt", os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("hello"))
	w.Close()
	if _, err := sc.OpenFile("/a.txt", os.O_WRONLY|os.O_CREATE|os.O_EXCL); err == nil {
		t.Fatal("O_EXCL on an existing file succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "hello" {
		t.Fatalf("on disk %q", b)
	}
	if err := sc.Mkdir("/sub"); err != nil {
		t.Fatal(err)
	}
	if err := sc.PosixRename("/a.txt", "/sub/b.txt"); err != nil {
		t.Fatal(err)
	}
	ents, err := sc.ReadDir("/sub")
	if err != nil || len(ents) != 1 || ents[0].Name() != "b.txt" || ents[0].Size() != 5 {
		t.Fatalf("readdir %v %v", ents, err)
	}
	if err := sc.RemoveDirectory("/sub"); err == nil {
		t.Fatal("rmdir of a non-empty dir succeeded")
	}
	if err := sc.Chmod("/sub/b.txt", 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub/b.txt")); fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if err := sc.Link("/sub/b.txt", "/hard"); err != nil {
		t.Fatal(err)
	}

	// Links are seen as links (LSTAT), and do not lead out.
	fi, err := sc.Lstat("/abs-link")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("lstat of a link: %v %v", fi, err)
	}
	// Links leading out cannot be followed; ".." is clamped at the root
	// (so this names a /etc/passwd inside it, which does not exist).
	for _, p := range []string{"/abs-link", "/rel-link", "/../../../../etc/passwd"} {
		if f, err := sc.Open(p); err == nil {
			f.Close()
			t.Fatalf("%s opened", p)
		}
	}
	for _, target := range []string{"/etc/passwd", "../../outside", "sub/../../x"} {
		if err := sc.Symlink(target, "/evil"); err == nil {
			t.Fatalf("symlink to %q accepted", target)
		}
	}
	if err := sc.Symlink("sub/b.txt", "/good"); err != nil {
		t.Fatalf("in-tree symlink refused: %v", err)
	}
	if target, err := sc.ReadLink("/good"); err != nil || target != "sub/b.txt" {
		t.Fatalf("readlink %q %v", target, err)
	}

	// An open, unlinked file stays usable through its handle.
	h, err := sc.OpenFile("/tmpfile", os.O_RDWR|os.O_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	h.Write([]byte("still here"))
	if err := sc.Remove("/tmpfile"); err != nil {
		t.Fatal(err)
	}
	if st, err := h.Stat(); err != nil || st.Size() != 10 {
		t.Fatalf("fstat of unlinked file: %v %v", st, err)
	}
	if err := h.Truncate(5); err != nil {
		t.Fatalf("ftruncate of unlinked file: %v", err)
	}
	if err := h.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	buf := make([]byte, 10)
	if n, _ := h.ReadAt(buf, 0); string(buf[:n]) != "still" {
		t.Fatalf("read after truncate %q", buf[:n])
	}
	h.Close()

	if st, err := sc.StatVFS("/"); err != nil || st.Bsize == 0 {
		t.Fatalf("statvfs %v %v", st, err)
	}
	// Errors never carry host paths.
	_, err = sc.Stat("/missing")
	if !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), dir) {
		t.Fatalf("stat missing: %v", err)
	}
}

func TestReadOnlyRefusesEveryMutation(t *testing.T) {
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_ro", true)
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	sc := f.sftp(t, "dlg_ro", cred)

	if b, err := sc.Open("/f"); err != nil {
		t.Fatalf("read refused: %v", err)
	} else {
		b.Close()
	}
	muts := map[string]func() error{
		"create":   func() error { _, err := sc.Create("/new"); return err },
		"write":    func() error { _, err := sc.OpenFile("/f", os.O_WRONLY); return err },
		"truncate": func() error { return sc.Truncate("/f", 0) },
		"chmod":    func() error { return sc.Chmod("/f", 0o777) },
		"chtimes":  func() error { return sc.Chtimes("/f", time.Now(), time.Now()) },
		"remove":   func() error { return sc.Remove("/f") },
		"mkdir":    func() error { return sc.Mkdir("/m") },
		"rmdir":    func() error { return sc.RemoveDirectory("/d") },
		"rename":   func() error { return sc.Rename("/f", "/g") },
		"posix":    func() error { return sc.PosixRename("/f", "/g") },
		"symlink":  func() error { return sc.Symlink("f", "/l") },
		"link":     func() error { return sc.Link("/f", "/h") },
	}
	for name, fn := range muts {
		// pkg/sftp turns SSH_FX_PERMISSION_DENIED into fs.ErrPermission.
		if err := fn(); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s: %v, want permission denied", name, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("directory changed: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "x" {
		t.Fatal("file changed")
	}
}

func TestKeysArePrivate(t *testing.T) {
	state := t.TempDir()
	a, err := LoadAuthority(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ca_ed25519", "host_ed25519"} {
		fi, err := os.Stat(filepath.Join(state, "ssh", name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", name, fi.Mode(), err)
		}
	}
	b, err := LoadAuthority(state)
	if err != nil || a.HostPublicKey() != b.HostPublicKey() {
		t.Fatal("keys not persistent")
	}
	cred, _ := a.Issue("dlg_k", time.Now().Add(time.Hour))
	pub, _, _, _, _ := gossh.ParseAuthorizedKey([]byte(cred.Certificate))
	cert := pub.(*gossh.Certificate)
	if cert.KeyId != "dlg_k" || len(cert.ValidPrincipals) != 1 || len(cert.Permissions.Extensions) != 0 || len(cert.Permissions.CriticalOptions) != 0 {
		t.Fatalf("certificate %+v", cert)
	}
	cred2, _ := a.Issue("dlg_k", time.Now().Add(time.Hour))
	if cred2.Serial == cred.Serial {
		t.Fatal("serials repeat")
	}
	os.Chmod(filepath.Join(state, "ssh", "ca_ed25519"), 0o644)
	if _, err := LoadAuthority(state); err == nil {
		t.Fatal("a world-readable CA key was used")
	}
}

// TestTunnelServesOnlyItsDelegation: a reverse connection opened for one
// delegation (ServeTunnel) carries that delegation's login, and refuses
// another's, even with a valid certificate of a live grant.
func TestTunnelServesOnlyItsDelegation(t *testing.T) {
	f := newFixture(t)
	const a, b = "tunnel-a", "tunnel-b"
	_, credA := f.lend(t, a, false)
	_, credB := f.lend(t, b, false)
	// A TCP pair, as a tunnel is (net.Pipe has no buffer: both ends'
	// greetings would wait for each other).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	login := func(user string, cred *Credential) error {
		ours, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() { defer close(served); f.srv.ServeTunnel(a, theirs) }()
		defer func() { ours.Close(); <-served }()
		c, chans, reqs, err := gossh.NewClientConn(ours, "tunnel", &gossh.ClientConfig{
			User: user, Auth: []gossh.AuthMethod{gossh.PublicKeys(certSigner(t, cred))},
			HostKeyCallback: gossh.FixedHostKey(f.auth.HostKey().PublicKey()),
		})
		if err != nil {
			return err
		}
		client := gossh.NewClient(c, chans, reqs)
		defer client.Close()
		sc, err := sftp.NewClient(client)
		if err != nil {
			return err
		}
		defer sc.Close()
		_, err = sc.Stat(".")
		return err
	}
	if err := login(a, credA); err != nil {
		t.Fatalf("a's login over a's tunnel: %v", err)
	}
	if err := login(b, credB); err == nil {
		t.Fatal("b logged in over a's tunnel")
	}
}
