package control

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/sshd"
	"github.com/awcp/awcp/sshd/sshdtest"
)

// The executor pins the host key START carries, in its own field or, from
// our earlier delegators, in options; a START without one (another
// implementation's) is refused unless the operator gave a known_hosts
// file that knows the key, or chose to accept any.
func TestExecutorHostKeyChecks(t *testing.T) {
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		t.Fatalf("no usable /dev/fuse (.ci/run installs fuse3): %v", err)
	} else {
		f.Close()
	}
	const id = "dlg_hostkey"
	auth, err := sshd.LoadAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
	srv, err := sshd.New(sshd.Options{Authority: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Grant(id, dir, false, time.Time{})
	addr := sshdtest.Serve(t, srv)
	cred, err := auth.Issue(id, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	info := func() *WorkDirInfo {
		return &WorkDirInfo{Transport: TransportSSHFS, Endpoint: &Endpoint{Host: "127.0.0.1", Port: addr.Port, User: id},
			ExportLocator: sshd.Locator(id), Credential: &Credential{PrivateKey: cred.PrivateKey, Certificate: cred.Certificate}}
	}
	writeKnownHosts := func(key string) string {
		p := filepath.Join(t.TempDir(), "known_hosts")
		os.WriteFile(p, []byte("[127.0.0.1]:"+strconv.Itoa(addr.Port)+" "+key+"\n"), 0o600)
		return p
	}
	other, err := sshd.LoadAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		tr    *SSHFSExecutor
		start func(*WorkDirInfo)
		ok    bool
		says  string
	}{
		{name: "hostKey field", tr: &SSHFSExecutor{}, start: func(w *WorkDirInfo) { w.HostKey = auth.HostPublicKey() }, ok: true},
		{name: "options.hostKey of earlier releases", tr: &SSHFSExecutor{},
			start: func(w *WorkDirInfo) { w.Options = map[string]string{HostKeyOption: auth.HostPublicKey()} }, ok: true},
		{name: "a wrong key sent", tr: &SSHFSExecutor{InsecureAcceptHostKey: true},
			start: func(w *WorkDirInfo) { w.HostKey = other.HostPublicKey() }, says: "handshake"},
		{name: "none sent", tr: &SSHFSExecutor{}, says: "--known-hosts"},
		{name: "none sent, known_hosts knows it", tr: &SSHFSExecutor{KnownHosts: writeKnownHosts(auth.HostPublicKey())}, ok: true},
		{name: "none sent, known_hosts knows another", tr: &SSHFSExecutor{KnownHosts: writeKnownHosts(other.HostPublicKey())}, says: "key"},
		{name: "none sent, accepted on request", tr: &SSHFSExecutor{InsecureAcceptHostKey: true}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := info()
			if tt.start != nil {
				tt.start(w)
			}
			mnt := t.TempDir()
			tt.tr.Logger = slog.New(slog.DiscardHandler)
			m, err := tt.tr.Mount(SetupParams{ID: id, Info: w, WorkDir: mnt, AccessMode: AccessRW}, false)
			if err == nil {
				defer m.Unmount()
				if b, rerr := os.ReadFile(filepath.Join(mnt, "a.txt")); rerr != nil || string(b) != "a\n" {
					t.Fatalf("mounted, but a.txt: %q %v", b, rerr)
				}
			}
			if tt.ok != (err == nil) {
				t.Fatalf("Mount: %v, want ok %v", err, tt.ok)
			}
			var pe *ProtocolError
			if err != nil && (!errors.As(err, &pe) || pe.Code != CodeSetupFailed ||
				!strings.Contains(pe.Message+" "+pe.Hint, tt.says)) {
				t.Fatalf("Mount: %v (%+v), want SETUP_FAILED saying %q", err, pe, tt.says)
			}
		})
	}
}

// The delegator sends its host key in workDir.hostKey and nothing in
// options, which other executors pass to sshfs as -o flags.
func TestDelegatorSendsHostKeyInItsOwnField(t *testing.T) {
	auth, err := sshd.LoadAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.New(sshd.Options{Authority: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &SSHFSDelegator{Issuer: auth, Server: srv, Host: "127.0.0.1", Port: 2222}
	info, err := tr.Prepare(t.Context(), Lent{ID: "dlg_x", ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if info.HostKey != auth.HostPublicKey() || len(info.Options) != 0 {
		t.Fatalf("hostKey %q, options %v", info.HostKey, info.Options)
	}
}
