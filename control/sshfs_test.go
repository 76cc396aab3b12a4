package control

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	awcpfs "github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
	"github.com/awcp/awcp/sshd/sshdtest"
)

// recordingTransport keeps what Prepare handed out, so the test can try
// the credential after the lease.
type recordingTransport struct {
	*SSHFSDelegator
	mu   sync.Mutex
	last *WorkDirInfo
}

func (r *recordingTransport) Prepare(ctx context.Context, d Lent) (*WorkDirInfo, error) {
	info, err := r.SSHFSDelegator.Prepare(ctx, d)
	r.mu.Lock()
	r.last = info
	r.mu.Unlock()
	return info, err
}

type liveFixture struct {
	exec *execFixture
	dlg  *Delegator
	rec  *recordingTransport
	srv  *sshd.Server
	dir  string
}

func newLiveFixture(t *testing.T, agentCmd string) *liveFixture {
	t.Helper()
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		t.Fatalf("no usable /dev/fuse (the live-mount tests need FUSE; .ci/run installs fuse3): %v", err)
	} else {
		f.Close()
	}
	log := slog.New(slog.DiscardHandler)
	x := newExecFixture(t, agentCmd, func(o *ExecutorOptions) {
		o.Transports = []ExecutorTransport{&SSHFSExecutor{Logger: log}, &ArchiveExecutor{}}
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
	rec := &recordingTransport{SSHFSDelegator: &SSHFSDelegator{Issuer: auth, Server: srv, Host: "127.0.0.1", Port: addr.Port}}
	dlg, err := NewDelegator(DelegatorOptions{Store: store, Logger: log, Transports: map[string]DelegatorTransport{
		TransportArchive: &ArchiveDelegator{Blobs: store, StagingDir: filepath.Join(state, "staging"), ResultDir: filepath.Join(state, "results")},
		TransportSSHFS:   rec,
	}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
	return &liveFixture{exec: x, dlg: dlg, rec: rec, srv: srv, dir: dir}
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
	hostKey, err := parseHostKey(info.HostKey)
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
	d, err := f.dlg.Create(ExportRequest{Dir: f.dir, Peer: f.exec.srv.URL, Prompt: "edit"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Transport != TransportSSHFS {
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

func TestLiveDelegationCancelRevokes(t *testing.T) {
	f := newLiveFixture(t, `while :; do cat a.txt >/dev/null; sleep 0.05; done`)
	d, err := f.dlg.Create(ExportRequest{Dir: f.dir, Peer: f.exec.srv.URL, Prompt: "loop"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := f.dlg.Run(context.Background(), d.ID); done <- end }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cur, _ := f.dlg.store.Delegation(d.ID)
		if cur.State == lease.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never running")
		}
		time.Sleep(20 * time.Millisecond)
	}
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
// ran here — loses its grant within WatchGrants' interval: its
// connections close and its certificate is refused.
func TestGrantOfLeaseEndedElsewhereIsRevoked(t *testing.T) {
	f := newLiveFixture(t, `sleep 30`)
	watch, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); WatchGrants(watch, f.dlg.store, f.srv, 50*time.Millisecond) }()
	defer func() { stopWatch(); wg.Wait() }()
	d, err := f.dlg.Create(ExportRequest{Dir: f.dir, Peer: f.exec.srv.URL, Prompt: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	follow, stopFollowing := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() { defer close(followed); f.dlg.Run(follow, d.ID) }()
	defer func() { stopFollowing(); <-followed }()
	deadline := time.Now().Add(10 * time.Second)
	for cur, _ := f.dlg.store.Delegation(d.ID); cur.State != lease.Running; cur, _ = f.dlg.store.Delegation(d.ID) {
		if time.Now().After(deadline) {
			t.Fatal("never running")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !slices.Contains(f.srv.Granted(), d.ID) {
		t.Fatalf("a running live mount is not granted: %v", f.srv.Granted())
	}
	if _, err := f.dlg.store.FireDelegation(d.ID, lease.Cancel, "cancelled by another process", nil); err != nil {
		t.Fatal(err)
	}
	for deadline = time.Now().Add(3 * time.Second); slices.Contains(f.srv.Granted(), d.ID); time.Sleep(20 * time.Millisecond) {
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
	d, err := f.dlg.Create(ExportRequest{Dir: f.dir, Peer: f.exec.srv.URL, Prompt: "loop"})
	if err != nil {
		t.Fatal(err)
	}
	first, stopFirst := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() { defer close(followed); f.dlg.Run(first, d.ID) }()
	deadline := time.Now().Add(10 * time.Second)
	for cur, _ := f.dlg.store.Delegation(d.ID); cur.State != lease.Running; cur, _ = f.dlg.store.Delegation(d.ID) {
		if time.Now().After(deadline) {
			t.Fatal("never running")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopFirst()
	<-followed
	f.srv.Revoke(d.ID) // what a restart of this process loses
	os.Remove(filepath.Join(f.dir, "seen.txt"))
	done := make(chan *lease.Delegation, 1)
	go func() { end, _ := f.dlg.Run(context.Background(), d.ID); done <- end }()
	for deadline = time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
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
		if strings.HasPrefix(mp, f.exec.root+"/") {
			out = append(out, mp)
		}
	}
	return out
}
