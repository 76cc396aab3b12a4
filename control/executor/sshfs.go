package executor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/awcp/awcp/control"
	awcpfs "github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/internal/mountinfo"
)

// SSHFSExecutor is the executor side of the live mount: an in-process
// go-fuse client over SFTP at the work dir.
type SSHFSExecutor struct {
	// Disabled turns live mounts off on this executor (DEP_MISSING).
	Disabled bool
	// FUSEDevice is checked for availability. Default /dev/fuse.
	FUSEDevice string
	// KnownHosts is an OpenSSH known_hosts file checked for a delegator
	// whose START carries no host key (another implementation's). Default
	// none: such a START fails, unless InsecureAcceptHostKey.
	KnownHosts string
	// InsecureAcceptHostKey accepts whatever host key a delegator that
	// sends none presents (trust on first use). Off by default: anyone on
	// the path could then stand in for the delegator.
	InsecureAcceptHostKey bool
	// ReconnectBound is how long a call on a mount waits for the
	// delegator, from the call, before it fails with EIO. Default 30s
	// (awcpfs.Options).
	ReconnectBound time.Duration
	// Metrics receives the mounts' FUSE requests and outages. Default:
	// none.
	Metrics awcpfs.Metrics
	// Logger default slog.Default().
	Logger *slog.Logger

	mu      sync.Mutex // guards mounts, tunnels, ready and release
	mounts  map[string]*awcpfs.Mount
	signers map[string]*renewableSigner // each mount's, for a renewed credential
	tunnels map[string]*TunnelSlot      // of the reverse mounts
	ready   map[string]chan struct{}    // closed when the delegation's slot is made (SlotReady)
	release *time.Timer                 // the memory of ended mounts given back (releaseSoon)
}

// releaseAfter is how long after the last unmount of a burst the memory
// of the ended mounts is given back to the system.
const releaseAfter = 2 * time.Second

// releaseSoon gives the memory of ended mounts back to the system once
// the mounts of a burst have ended. Each mount's FUSE server holds request
// buffers of its largest write (1 MiB each); the runtime would keep the
// heap they grew, sized for the busiest moment, until it scavenges it
// slowly. 50 mounts that ended left the daemon at 200 MiB resident, then
// 380 MiB after a second such round (make bench's many); one collection
// and release per burst brings it back to its idle size.
func (t *SSHFSExecutor) releaseSoon() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.release != nil && t.release.Stop() {
		t.release.Reset(releaseAfter)
		return
	}
	t.release = time.AfterFunc(releaseAfter, debug.FreeOSMemory)
}

var (
	_ control.ExecutorTransport = (*SSHFSExecutor)(nil)
	_ TunnelHost                = (*SSHFSExecutor)(nil)
)

// Name implements control.ExecutorTransport.
func (*SSHFSExecutor) Name() string { return control.TransportSSHFS }

// Available reports DEP_MISSING when this machine cannot mount.
func (t *SSHFSExecutor) Available() error {
	if t.Disabled {
		return control.Errorf(control.CodeDepMissing, "this executor does not offer live mounts").
			WithHint("use --transport archive")
	}
	dev := t.FUSEDevice
	if dev == "" {
		dev = "/dev/fuse"
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return control.Errorf(control.CodeDepMissing, "the executor has no usable FUSE device").
			WithHint("install fuse3 on the executor, or use --transport archive")
	}
	f.Close()
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			if _, err := exec.LookPath("fusermount"); err != nil {
				return control.Errorf(control.CodeDepMissing, "the executor is not root and has no fusermount").
					WithHint("install fuse3 on the executor, or use --transport archive")
			}
		}
	}
	return nil
}

// Setup mounts the delegator's export at the work dir, pinning the host
// key START carries.
func (t *SSHFSExecutor) Setup(_ context.Context, p control.SetupParams) error {
	if len(p.Resources) > 0 {
		// A head delegator's locator is the environment root, which
		// holds each resource under its name (the reference's as a
		// symlink its server resolves). The mount is of the resource
		// itself, at its folder, so that nothing else the root holds is
		// reachable.
		if len(p.Resources) != 1 {
			return control.Errorf(control.CodeSetupFailed, "this executor mounts one resource per delegation; the INVITE named %d", len(p.Resources)).
				WithHint("lend one directory, or use the archive transport")
		}
		r := p.Resources[0]
		info := *p.Info
		info.ExportLocator = path.Join(p.Info.ExportLocator, r.Name)
		p.Info, p.WorkDir = &info, filepath.Join(p.WorkDir, r.Name)
		if r.Mode == control.AccessRO {
			p.AccessMode = control.AccessRO
		}
		if err := os.Mkdir(p.WorkDir, 0o700); err != nil {
			return fmt.Errorf("create the resource's folder: %w", err)
		}
	}
	m, err := t.mount(p, false, true)
	if err != nil {
		return err
	}
	t.mu.Lock()
	if t.mounts == nil {
		t.mounts = map[string]*awcpfs.Mount{}
	}
	t.mounts[p.ID] = m
	t.mu.Unlock()
	return nil
}

// Refused is what delegation id's read-only mount refused its agent; nil
// if nothing, or no mount of it runs.
func (t *SSHFSExecutor) Refused(id string) *control.MountRefused {
	t.mu.Lock()
	m := t.mounts[id]
	t.mu.Unlock()
	if m == nil {
		return nil
	}
	if r := m.Refused(); r.Count > 0 {
		return &control.MountRefused{Count: r.Count, Examples: r.Examples}
	}
	return nil
}

// Changed is what was changed through delegation id's mount (changeLogger).
func (t *SSHFSExecutor) Changed(id string) (paths []string, complete, ok bool) {
	t.mu.Lock()
	m := t.mounts[id]
	t.mu.Unlock()
	if m == nil {
		return nil, false, false
	}
	paths, complete = m.Changed()
	return paths, complete, true
}

// lentTo is the agent's user, as the mount takes it.
func lentTo(u *control.LocalUser) *awcpfs.Owner {
	if u == nil {
		return nil
	}
	return &awcpfs.Owner{UID: u.UID, GID: u.GID}
}

// Mount mounts p's sshfs workDir at p.WorkDir; `awcp-fs mount` uses it
// directly. Only the endpoint, the credential and the host key option are
// read from the workDir.
func (t *SSHFSExecutor) Mount(p control.SetupParams, debug bool) (*awcpfs.Mount, error) {
	return t.mount(p, debug, false)
}

// mount is Mount; served says whether this executor's HTTP endpoint runs,
// which a reverse mount needs to get its connections.
func (t *SSHFSExecutor) mount(p control.SetupParams, debug, served bool) (_ *awcpfs.Mount, err error) {
	info := p.Info
	hostKey, checkHost, err := t.hostKeyCheck(info)
	if err != nil {
		return nil, err
	}
	var dial func(context.Context) (net.Conn, error)
	if info.Options[control.ConnectOption] == control.ConnectReverse {
		switch {
		case !served:
			return nil, control.Errorf(control.CodeSetupFailed, "a reverse live mount takes its connections at `awcp-fs serve`'s endpoint").
				WithHint("mount it through awcp-fs serve")
		case hostKey == nil:
			// The tunnel's proof is checked against the pinned key.
			return nil, control.Errorf(control.CodeSetupFailed, "a reverse live mount needs workDir.hostKey")
		}
		dial = t.openSlot(p.ID, hostKey).take
		defer func() {
			if err != nil {
				t.closeTunnel(p.ID)
			}
		}()
	}
	cert, err := awcpfs.CertSigner(info.Credential.PrivateKey, info.Credential.Certificate)
	if err != nil {
		return nil, control.Errorf(control.CodeSetupFailed, "invalid workDir.credential: %v", err)
	}
	signer := &renewableSigner{s: cert}
	t.mu.Lock()
	if t.signers == nil {
		t.signers = map[string]*renewableSigner{}
	}
	t.signers[p.ID] = signer
	t.mu.Unlock()
	log := t.Logger
	if log == nil {
		log = slog.Default()
	}
	m, err := awcpfs.New(p.WorkDir, awcpfs.Options{
		Addr:            net.JoinHostPort(info.Endpoint.Host, strconv.Itoa(info.Endpoint.Port)),
		User:            info.Endpoint.User,
		Export:          info.ExportLocator,
		Signer:          signer,
		HostKey:         hostKey,
		HostKeyCallback: checkHost,
		ReadOnly:        p.AccessMode != control.AccessRW,
		ReconnectBound:  t.ReconnectBound,
		Name:            "awcp:" + p.ID,
		Logger:          log.With("delegation", p.ID),
		Debug:           debug,
		Metrics:         t.Metrics,
		Dial:            dial,
		LentTo:          lentTo(p.Agent),
	})
	if err != nil {
		return nil, &control.ProtocolError{Code: control.CodeSetupFailed, Message: "cannot mount the delegator's workspace: " + StripPaths(err, p.WorkDir), Err: err}
	}
	return m, nil
}

// openSlot makes delegation id's slot for the reverse connections the
// delegator opens, and wakes a request that waits for it (SlotReady).
func (t *SSHFSExecutor) openSlot(id string, hostKey gossh.PublicKey) *TunnelSlot {
	slot := newTunnelSlot(hostKey)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tunnels == nil {
		t.tunnels = map[string]*TunnelSlot{}
	}
	t.tunnels[id] = slot
	if ch, ok := t.ready[id]; ok {
		close(ch)
		delete(t.ready, id)
	}
	return slot
}

// TunnelSlot implements TunnelHost.
func (t *SSHFSExecutor) TunnelSlot(id string) (*TunnelSlot, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.tunnels[id]
	return s, ok
}

// SlotReady implements TunnelHost.
func (t *SSHFSExecutor) SlotReady(id string) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan struct{})
	if _, ok := t.tunnels[id]; ok {
		close(ch)
		return ch
	}
	if old, ok := t.ready[id]; ok {
		return old
	}
	if t.ready == nil {
		t.ready = map[string]chan struct{}{}
	}
	t.ready[id] = ch
	return ch
}

// CloseTunnels drops every parked reverse connection: the daemon stops.
// A mount that loses its connection afterwards waits for the next one
// within its bound (a restarted daemon's mounts are gone).
func (t *SSHFSExecutor) CloseTunnels() {
	t.mu.Lock()
	slots := t.tunnels
	t.tunnels = nil
	t.mu.Unlock()
	for _, s := range slots {
		s.close()
	}
}

// closeTunnel ends delegation id's reverse connections, if it has any.
func (t *SSHFSExecutor) closeTunnel(id string) {
	t.mu.Lock()
	s := t.tunnels[id]
	delete(t.tunnels, id)
	delete(t.ready, id) // a wait for a slot that never came
	t.mu.Unlock()
	if s != nil {
		s.close()
	}
}

// CertificateExpiry is when info's certificate stops being valid.
func CertificateExpiry(info *control.WorkDirInfo) (time.Time, bool) {
	if info.Credential == nil {
		return time.Time{}, false
	}
	pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(info.Credential.Certificate))
	if err != nil {
		return time.Time{}, false
	}
	cert, ok := pub.(*gossh.Certificate)
	if !ok || cert.ValidBefore == gossh.CertTimeInfinity {
		return time.Time{}, false
	}
	return time.Unix(int64(cert.ValidBefore), 0), true
}

// Teardown unmounts. There is no result: the work happened in place.
func (t *SSHFSExecutor) Teardown(_ context.Context, id, workDir string, _ io.Writer) (bool, error) {
	t.mu.Lock()
	m := t.mounts[id]
	delete(t.mounts, id)
	delete(t.signers, id)
	t.mu.Unlock()
	defer t.closeTunnel(id) // after the unmount: the mount may still be taking one
	if m != nil {
		err := m.Unmount()
		t.releaseSoon()
		return false, err
	}
	// Left by a previous run of the daemon: unmount what is there (at
	// the work dir, or at a resource's folder in it).
	for _, mp := range mountinfo.Under(workDir) {
		if err := awcpfs.Unmount(mp); err != nil {
			return false, err
		}
	}
	return false, nil
}

// hostKeyCheck is how the delegator's host key is checked: pinned to the
// one START carries (workDir.hostKey, or workDir.options.hostKey from our
// earlier releases); else, where the operator said so, against a
// known_hosts file or not at all.
func (t *SSHFSExecutor) hostKeyCheck(info *control.WorkDirInfo) (gossh.PublicKey, gossh.HostKeyCallback, error) {
	sent := info.HostKey
	if sent == "" {
		sent = info.Options[control.HostKeyOption]
	}
	if sent != "" {
		k, err := parseHostKey(sent)
		if err != nil {
			return nil, nil, control.Errorf(control.CodeSetupFailed, "workDir.hostKey is not an SSH public key: %v", err)
		}
		return k, nil, nil
	}
	switch {
	case t.KnownHosts != "":
		cb, err := knownhosts.New(t.KnownHosts)
		if err != nil {
			return nil, nil, control.Errorf(control.CodeSetupFailed, "the executor cannot read its known_hosts file: %v", err)
		}
		return nil, cb, nil
	case t.InsecureAcceptHostKey:
		log := t.Logger
		if log == nil {
			log = slog.Default()
		}
		return nil, func(host string, _ net.Addr, key gossh.PublicKey) error {
			log.Warn("accepting the delegator's host key unchecked (--insecure-accept-host-key)",
				"host", host, "key", gossh.FingerprintSHA256(key))
			return nil
		}, nil
	}
	return nil, nil, control.Errorf(control.CodeSetupFailed, "START carries no host key for the delegator's SSH server").
		WithHint("the delegator should send workDir.hostKey; or start the executor with --known-hosts FILE (or, trusting the network, --insecure-accept-host-key)")
}

func parseHostKey(s string) (gossh.PublicKey, error) {
	k, _, _, _, err := gossh.ParseAuthorizedKey([]byte(s))
	return k, err
}

var _ control.CredentialTaker = (*SSHFSExecutor)(nil)

// TakeCredential has delegation id's mount connect with c from now on:
// a renewed session's certificate (control.RenewRequest).
func (t *SSHFSExecutor) TakeCredential(id string, c *control.Credential) error {
	cert, err := awcpfs.CertSigner(c.PrivateKey, c.Certificate)
	if err != nil {
		return fmt.Errorf("the renewed credential: %w", err)
	}
	t.mu.Lock()
	s := t.signers[id]
	t.mu.Unlock()
	if s == nil {
		return fmt.Errorf("delegation %s has no mount here", id)
	}
	s.set(cert)
	return nil
}

// renewableSigner is a mount's certificate signer, replaced when its
// session's lease is renewed: each connection the mount opens signs with
// the one current then.
type renewableSigner struct {
	mu sync.Mutex
	s  gossh.Signer
}

// Current is the signer now, for one connection's whole authentication
// (fs: currentSigner).
func (r *renewableSigner) Current() gossh.Signer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.s
}

func (r *renewableSigner) set(s gossh.Signer) {
	r.mu.Lock()
	r.s = s
	r.mu.Unlock()
}

func (r *renewableSigner) PublicKey() gossh.PublicKey { return r.Current().PublicKey() }

func (r *renewableSigner) Sign(rand io.Reader, data []byte) (*gossh.Signature, error) {
	return r.Current().Sign(rand, data)
}
