//go:build linux

package delegator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/awcp/awcp/control/delegator/lendarchive"
	"github.com/awcp/awcp/control/delegator/lendlive"
	awcpfs "github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/internal/mountinfo"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
	"github.com/awcp/awcp/sshd/sshdtest"
)

// recordingTransport keeps what Prepare handed out, so the test can try
// the credential after the lease.
type recordingTransport struct {
	*lendlive.Transport
	mu   sync.Mutex
	last *control.WorkDirInfo
}

func (r *recordingTransport) Prepare(ctx context.Context, d control.Lent) (*control.WorkDirInfo, error) {
	info, err := r.Transport.Prepare(ctx, d)
	r.mu.Lock()
	r.last = info
	r.mu.Unlock()
	return info, err
}

type liveFixture struct {
	exec  *executortest.Fixture
	dlg   *delegator.Delegator
	store *lease.Store // the delegator's
	rec   *recordingTransport
	srv   *sshd.Server
	dir   string
	mount *executor.SSHFSExecutor // the executor's live mount
	auth  *sshd.Authority
}

func newLiveFixture(t *testing.T, agentCmd string) *liveFixture {
	t.Helper()
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		t.Fatalf("no usable /dev/fuse (the live-mount tests need FUSE; .ci/run installs fuse3): %v", err)
	} else {
		f.Close()
	}
	log := slog.New(slog.DiscardHandler)
	mount := &executor.SSHFSExecutor{Logger: log}
	x := executortest.New(t, agentCmd, func(o *executor.Options) {
		o.Transports = []control.ExecutorTransport{mount, &executor.ArchiveExecutor{}}
	})
	state := t.TempDir()
	store, err := lease.Open(filepath.Join(state, "delegator.db"), lease.Options{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := sshd.LoadAuthority(state)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.New(sshd.Options{Authority: auth, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	addr := sshdtest.Serve(t, srv)
	audit := &delegator.AuditLog{Store: store, Logger: log}
	ctx, stop := context.WithCancel(context.Background())
	audited := make(chan struct{})
	go func() { defer close(audited); audit.Run(ctx) }()
	t.Cleanup(func() { stop(); <-audited })
	rec := &recordingTransport{Transport: &lendlive.Transport{Issuer: auth, Server: srv, Host: "127.0.0.1", Port: addr.Port,
		Audit: audit, Logger: log, Tunnels: delegator.Tunnels{}}}
	dlg, err := delegator.New(delegator.Options{Store: store, Logger: log, Transports: map[string]control.DelegatorTransport{
		control.TransportArchive: &lendarchive.Transport{Blobs: store, StagingDir: filepath.Join(state, "staging"), ResultDir: filepath.Join(state, "results")},
		control.TransportSSHFS:   rec,
	}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
	return &liveFixture{exec: x, dlg: dlg, store: store, rec: rec, srv: srv, dir: dir, mount: mount, auth: auth}
}

// waitRunning waits (10 s at most) until delegation id is running.
func (f *liveFixture) waitRunning(t *testing.T, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if cur, _ := f.store.Delegation(id); cur.State == lease.Running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("never running")
		}
	}
}

// credentialRefused fails unless the last issued credential is refused.
func (f *liveFixture) credentialRefused(t *testing.T) {
	t.Helper()
	f.rec.mu.Lock()
	info := f.rec.last
	f.rec.mu.Unlock()
	signer, err := awcpfs.CertSigner(info.Credential.PrivateKey, info.Credential.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, _, _, _, err := gossh.ParseAuthorizedKey([]byte(info.HostKey))
	if err != nil {
		t.Fatal(err)
	}
	conn, client, err := awcpfs.Dial(awcpfs.Options{Addr: net.JoinHostPort(info.Endpoint.Host, strconv.Itoa(info.Endpoint.Port)),
		User: info.Endpoint.User, Export: info.ExportLocator, Signer: signer, HostKey: hostKey, DialTimeout: 5 * time.Second})
	if err == nil {
		client.Close()
		conn.Close()
		t.Fatal("the certificate of an ended lease was accepted")
	}
}

func TestLiveDelegationCompletesAndRevokes(t *testing.T) {
	f := newLiveFixture(t, `echo edited >> a.txt; echo ok`)
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "edit"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Transport != control.TransportSSHFS {
		t.Fatalf("transport %s", d.Transport)
	}
	end, err := f.dlg.Run(context.Background(), d.ID)
	if err != nil || end.State != lease.Completed {
		t.Fatalf("%+v %v", end, err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, "a.txt")); string(b) != "a\nedited\n" {
		t.Fatalf("a.txt = %q", b)
	}
	if len(end.Highlights) != 1 || end.Highlights[0] != "a.txt" {
		t.Fatalf("highlights %v", end.Highlights)
	}
	f.credentialRefused(t)
	if mps := f.mountsLeft(); len(mps) != 0 {
		t.Fatalf("mounts left: %v", mps)
	}
}

// The highlights of a live mount's task come from what the mount logged,
// not from a walk of the tree before and after: they name each kind of
// change the agent made, the files of a directory it renamed, and nothing
// the owner changed meanwhile, nor the files of a directory it only
// chmodded and touched, nor a path that would reach a file only through a
// symlink the agent put where a directory was.
func TestLiveHighlightsAreWhatTheAgentChanged(t *testing.T) {
	f := newLiveFixture(t, `set -e
while [ ! -e ready ]; do sleep 0.02; done
echo new > new.txt
echo more >> a.txt
chmod 600 mode.txt
touch -d 2001-01-01 touch.txt
mv old moved
echo t > tmp.txt; rm tmp.txt
ln -s a.txt link
ln keep.txt hard
mkdir sub other; echo x > sub/f; echo y > other/f
rm -r sub; ln -s other sub
chmod 700 same; touch same
echo ok`)
	for name, body := range map[string]string{"keep.txt": "k", "mode.txt": "m", "touch.txt": "t", "owner.txt": "o", "old/x.txt": "x", "old/y.txt": "y", "same/z.txt": "z"} {
		os.MkdirAll(filepath.Dir(filepath.Join(f.dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "change things"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := f.dlg.Run(context.Background(), d.ID); done <- end }()
	f.waitRunning(t, d.ID)
	// The owner's own work while the agent runs: not the agent's.
	if err := os.WriteFile(filepath.Join(f.dir, "owner.txt"), []byte("owner's edit"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var end *lease.Delegation
	select {
	case end = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the task never ended")
	}
	if end == nil || end.State != lease.Completed {
		t.Fatalf("%+v", end)
	}
	want := []string{"a.txt", "hard", "link", "mode.txt", "moved/x.txt", "moved/y.txt", "new.txt", "other/f", "sub", "touch.txt"}
	if !slices.Equal(end.Highlights, want) {
		t.Fatalf("highlights %q, want %q", end.Highlights, want)
	}
}

func TestLiveDelegationCancelRevokes(t *testing.T) {
	f := newLiveFixture(t, `while :; do cat a.txt >/dev/null; sleep 0.05; done`)
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "loop"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := f.dlg.Run(context.Background(), d.ID); done <- end }()
	f.waitRunning(t, d.ID)
	if _, err := f.dlg.Cancel(context.Background(), d.ID); err != nil {
		t.Fatal(err)
	}
	end := <-done
	if end.State != lease.Cancelled {
		t.Fatalf("state %s", end.State)
	}
	f.credentialRefused(t)
	for i := 0; ; i++ {
		mps := f.mountsLeft()
		if len(mps) == 0 {
			break
		}
		if i > 100 {
			t.Fatalf("mounts left: %v", mps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A lease that ended in another process sharing the store — no Cleanup
// ran here — loses its grant within delegator.WatchGrants' interval: its
// connections close and its certificate is refused.
func TestGrantOfLeaseEndedElsewhereIsRevoked(t *testing.T) {
	f := newLiveFixture(t, `sleep 30`)
	watch, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); lendlive.WatchGrants(watch, f.store, f.srv, 50*time.Millisecond) }()
	defer func() { stopWatch(); wg.Wait() }()
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	follow, stopFollowing := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() { defer close(followed); f.dlg.Run(follow, d.ID) }()
	defer func() { stopFollowing(); <-followed }()
	f.waitRunning(t, d.ID)
	if !slices.Contains(f.srv.Granted(), d.ID) {
		t.Fatalf("a running live mount is not granted: %v", f.srv.Granted())
	}
	if _, err := f.store.FireDelegation(d.ID, lease.Cancel, "cancelled by another process", nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Second); slices.Contains(f.srv.Granted(), d.ID); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the grant of a lease ended elsewhere stands")
		}
	}
	f.credentialRefused(t)
}

// A delegation followed anew (its delegator restarted: the grant, held in
// memory, is gone) is granted again, and its mount goes on.
func TestFollowedAnewIsGrantedAgain(t *testing.T) {
	f := newLiveFixture(t, `while :; do cat a.txt > seen.txt; sleep 0.05; done`)
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "loop"})
	if err != nil {
		t.Fatal(err)
	}
	first, stopFirst := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() { defer close(followed); f.dlg.Run(first, d.ID) }()
	f.waitRunning(t, d.ID)
	stopFirst()
	<-followed
	f.srv.Revoke(d.ID) // what a restart of this process loses
	os.Remove(filepath.Join(f.dir, "seen.txt"))
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := f.dlg.Run(context.Background(), d.ID); done <- end }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(f.dir, "seen.txt")); err == nil && slices.Contains(f.srv.Granted(), d.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount did not go on (granted: %v)", f.srv.Granted())
		}
	}
	if _, err := f.dlg.Cancel(context.Background(), d.ID); err != nil {
		t.Fatal(err)
	}
	if end := <-done; end.State != lease.Cancelled {
		t.Fatalf("ended %s", end.State)
	}
}

// mountsLeft lists awcp mounts under this fixture's work root (other tests
// may mount elsewhere at the same time).
func (f *liveFixture) mountsLeft() []string {
	mps, _ := awcpfs.Mounted()
	var out []string
	for _, mp := range mps {
		if strings.HasPrefix(mp, f.exec.Root+"/") {
			out = append(out, mp)
		}
	}
	return out
}

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
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
	l := sshdtest.Lend(t, id, dir)
	auth, addr, cred := l.Authority, l.Addr, l.Cred
	info := func() *control.WorkDirInfo {
		return &control.WorkDirInfo{Transport: control.TransportSSHFS, Endpoint: &control.Endpoint{Host: "127.0.0.1", Port: addr.Port, User: id},
			ExportLocator: sshd.Locator(id), Credential: &control.Credential{PrivateKey: cred.PrivateKey, Certificate: cred.Certificate}}
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
		tr    *executor.SSHFSExecutor
		start func(*control.WorkDirInfo)
		ok    bool
		says  string
	}{
		{name: "hostKey field", tr: &executor.SSHFSExecutor{}, start: func(w *control.WorkDirInfo) { w.HostKey = auth.HostPublicKey() }, ok: true},
		{name: "options.hostKey of earlier releases", tr: &executor.SSHFSExecutor{},
			start: func(w *control.WorkDirInfo) {
				w.Options = map[string]string{control.HostKeyOption: auth.HostPublicKey()}
			}, ok: true},
		{name: "a wrong key sent", tr: &executor.SSHFSExecutor{InsecureAcceptHostKey: true},
			start: func(w *control.WorkDirInfo) { w.HostKey = other.HostPublicKey() }, says: "handshake"},
		{name: "none sent", tr: &executor.SSHFSExecutor{}, says: "--known-hosts"},
		{name: "none sent, known_hosts knows it", tr: &executor.SSHFSExecutor{KnownHosts: writeKnownHosts(auth.HostPublicKey())}, ok: true},
		{name: "none sent, known_hosts knows another", tr: &executor.SSHFSExecutor{KnownHosts: writeKnownHosts(other.HostPublicKey())}, says: "key"},
		{name: "none sent, accepted on request", tr: &executor.SSHFSExecutor{InsecureAcceptHostKey: true}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := info()
			if tt.start != nil {
				tt.start(w)
			}
			mnt := t.TempDir()
			tt.tr.Logger = slog.New(slog.DiscardHandler)
			m, err := tt.tr.Mount(control.SetupParams{ID: id, Info: w, WorkDir: mnt, AccessMode: control.AccessRW}, false)
			if err == nil {
				defer m.Unmount()
				if b, rerr := os.ReadFile(filepath.Join(mnt, "a.txt")); rerr != nil || string(b) != "a\n" {
					t.Fatalf("mounted, but a.txt: %q %v", b, rerr)
				}
			}
			if tt.ok != (err == nil) {
				t.Fatalf("Mount: %v, want ok %v", err, tt.ok)
			}
			var pe *control.ProtocolError
			if err != nil && (!errors.As(err, &pe) || pe.Code != control.CodeSetupFailed ||
				!strings.Contains(pe.Message+" "+pe.Hint, tt.says)) {
				t.Fatalf("Mount: %v (%+v), want SETUP_FAILED saying %q", err, pe, tt.says)
			}
		})
	}
}

// The delegator sends its host key in workDir.hostKey and nothing in
// options, which other executors pass to sshfs as -o flags.
func TestDelegatorSendsHostKeyInItsOwnField(t *testing.T) {
	l := sshdtest.Lend(t, "dlg_other", t.TempDir())
	auth := l.Authority
	tr := &lendlive.Transport{Issuer: auth, Server: l.Server, Host: "127.0.0.1", Port: 2222}
	info, err := tr.Prepare(t.Context(), control.Lent{ID: "dlg_x", ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if info.HostKey != auth.HostPublicKey() || len(info.Options) != 0 {
		t.Fatalf("hostKey %q, options %v", info.HostKey, info.Options)
	}
}

// Our delegator lends a directory over the live mount to a head
// executor, which mounts it as the reference does: the environment root
// holds the directory as workspace/, and the agent's writes land in it.
func TestDelegatorLendsLiveMountToHeadExecutor(t *testing.T) {
	for _, tool := range []string{"sshfs", "fusermount3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (.ci/run installs it): %v", tool, err)
		}
	}
	f := newLiveFixture(t, "true")
	os.WriteFile(filepath.Join(f.dir, "hello.txt"), []byte("hi\n"), 0o644)
	peer := delegator.NewHeadPeer(t)
	srv := httptest.NewServer(peer)
	defer srv.Close()
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportSSHFS})
	if err != nil {
		t.Fatal(err)
	}
	end, err := f.dlg.Run(t.Context(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if end.State != lease.Completed || end.Dialect != control.DialectHead {
		t.Fatalf("ended %s in %q (%+v), want completed in head", end.State, end.Dialect, end.Failure)
	}
	mounted, acked := peer.Seen()
	if !slices.Equal(mounted, []string{"workspace"}) {
		t.Fatalf("the head executor's mount holds %v, want workspace alone", mounted)
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, "hello.txt")); string(b) != "changed by the head executor\n" {
		t.Fatalf("hello.txt = %q", b)
	}
	if !acked {
		t.Error("not acknowledged")
	}
}

// Our delegator told to speak head, with our executor, over the live
// mount: the agent runs in workspace/, which the locator names in the
// environment root.
func TestHeadDialectLiveMountBetweenOurs(t *testing.T) {
	f := newLiveFixture(t, delegator.HeadAgent)
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "p", Transport: control.TransportSSHFS, Dialect: control.DialectHead})
	if err != nil {
		t.Fatal(err)
	}
	end, err := f.dlg.Run(t.Context(), d.ID)
	if err != nil {
		t.Fatal(err)
	}
	delegator.CheckHeadRun(t, end, f.dir)
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	if f.rec.last.ExportLocator != sshd.EnvLocator(d.ID) {
		t.Errorf("exportLocator %q, want the environment root", f.rec.last.ExportLocator)
	}
}

// A head live mount sits at the resource's folder in the work dir. A
// restarted executor, which no longer knows it, still finds and unmounts
// it before the work dir goes — never deleting through it.
func TestHeadMountLeftByAPreviousRunIsUnmounted(t *testing.T) {
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		t.Fatalf("no usable /dev/fuse (.ci/run installs fuse3): %v", err)
	} else {
		f.Close()
	}
	real := t.TempDir()
	os.WriteFile(filepath.Join(real, "keep.txt"), []byte("mine\n"), 0o644)
	// The delegator's environment root: its resource is the directory.
	l := sshdtest.Lend(t, "dlg_left", real)
	work := filepath.Join(t.TempDir(), "dlg_left")
	os.Mkdir(work, 0o700)
	log := slog.New(slog.DiscardHandler)
	first := &executor.SSHFSExecutor{Logger: log}
	err := first.Setup(t.Context(), control.SetupParams{ID: "dlg_left", WorkDir: work, AccessMode: control.AccessRW,
		Resources: []control.Resource{{Name: sshd.EnvResource, Type: "fs", Mode: control.AccessRW}},
		Info: &control.WorkDirInfo{Transport: control.TransportSSHFS, Endpoint: &control.Endpoint{Host: "127.0.0.1", Port: l.Addr.Port, User: l.ID},
			ExportLocator: sshd.EnvLocator(l.ID), HostKey: l.Authority.HostPublicKey(),
			Credential: &control.Credential{PrivateKey: l.Cred.PrivateKey, Certificate: l.Cred.Certificate}}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(work, sshd.EnvResource, "keep.txt")); err != nil || string(b) != "mine\n" {
		t.Fatalf("the resource is not mounted at its folder: %q %v", b, err)
	}
	restarted := &executor.SSHFSExecutor{Logger: log}
	if _, err := restarted.Teardown(t.Context(), "dlg_left", work, nil); err != nil {
		t.Fatal(err)
	}
	if mps := mountinfo.Under(work); len(mps) != 0 {
		t.Fatalf("still mounted: %v", mps)
	}
	if b, _ := os.ReadFile(filepath.Join(real, "keep.txt")); string(b) != "mine\n" {
		t.Fatalf("the delegator's file: %q", b)
	}
}

// A scripted agent's session over the live mount, as the audit log has it
// once the delegation is over: each thing the agent did in the directory,
// with its bytes, the refusal of a hidden file, and a summary that adds
// them up; the directory ends as the agent left it, the secret untouched.
func TestAuditLogMatchesTheAgent(t *testing.T) {
	f := newLiveFixture(t, `cat a.txt >/dev/null; echo new > b.txt; mkdir d; mv b.txt d/b.txt; rm a.txt; cat .env 2>/dev/null; echo ok`)
	os.WriteFile(filepath.Join(f.dir, ".env"), []byte("S=1\n"), 0o600)
	d, err := f.dlg.Create(delegator.ExportRequest{Dir: f.dir, Peer: f.exec.URL(), PeerKey: f.exec.Key(), Prompt: "tidy"})
	if err != nil {
		t.Fatal(err)
	}
	end, err := f.dlg.Run(context.Background(), d.ID)
	if err != nil || end.State != lease.Completed {
		t.Fatalf("%+v %v", end, err)
	}
	recs, _, err := f.store.AuditAfter(d.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		var op delegator.Op
		if err := json.Unmarshal(r.Data, &op); err != nil {
			t.Fatal(err)
		}
		if op.Kind == sshd.OpList {
			continue // as many as the kernel asks for
		}
		line := op.Kind + " " + op.Path
		if op.To != "" {
			line += " -> " + op.To
		}
		if op.Bytes > 0 {
			line += fmt.Sprintf(" %d", op.Bytes)
		}
		if op.Refused {
			line += " refused"
		}
		if op.Ahead {
			line += " ahead"
		}
		got = append(got, line)
	}
	// The agent's cat of a.txt is its read, or, where the tree fetched
	// ahead at mount got there first, that fetch's (and the cat is
	// answered here). Beyond the agent's operations the log may hold only
	// such reads made ahead: their contents did reach the executor.
	want := []string{"read a.txt 2", "create b.txt", "write b.txt 4", "mkdir d", "rename b.txt -> d/b.txt", "remove a.txt", "lookup .env refused"}
	extra := slices.Clone(got)
	for _, w := range want {
		i := slices.Index(extra, w)
		if i < 0 {
			i = slices.Index(extra, w+" ahead")
		}
		if i < 0 {
			t.Errorf("the log lacks %q", w)
			continue
		}
		extra = slices.Delete(extra, i, i+1)
	}
	for _, op := range extra {
		if !strings.HasPrefix(op, "read ") || !strings.HasSuffix(op, " ahead") {
			t.Errorf("the log holds %q, which the agent did not do and no fetch ahead either:\n%s", op, strings.Join(got, "\n"))
		}
	}
	if i, j := slices.Index(got, "create b.txt"), slices.Index(got, "rename b.txt -> d/b.txt"); i > j {
		t.Errorf("the create is logged after the rename:\n%s", strings.Join(got, "\n"))
	}
	s := end.Audit
	if s == nil || s.FilesRead < 1 || s.FilesRead > 2 || s.BytesRead < 2 || s.FilesWritten != 1 || s.BytesWritten != 4 ||
		s.Created != 2 || s.Deleted != 1 || s.Refused != 1 || s.FromDiff {
		t.Errorf("summary %+v", s)
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, "d", "b.txt")); string(b) != "new\n" {
		t.Errorf("d/b.txt = %q", b)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "a.txt")); err == nil {
		t.Errorf("a.txt is still there")
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, ".env")); string(b) != "S=1\n" {
		t.Errorf(".env = %q", b)
	}
}
