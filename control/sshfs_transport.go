package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/awcp/awcp/archive"
	awcpfs "github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// HostKeyOption is the key of workDir.options that carried the
// delegator's host key before it had a field of its own
// (WorkDirInfo.HostKey); an executor still reads it from our earlier
// delegators. It is the only option an executor interprets.
const HostKeyOption = "hostKey"

// CertIssuer issues a delegation's credential; *sshd.Authority.
type CertIssuer interface {
	Issue(id string, validBefore time.Time) (*sshd.Credential, error)
	HostPublicKey() string
}

// Lender is the SSH server's side of lending: a delegation's directory is
// granted until the lease's end, and revoked when the lease ends before;
// *sshd.Server.
type Lender interface {
	Grant(id, dir string, readOnly bool, until time.Time)
	Revoke(id string)
}

// SSHFSDelegator is the delegator side of the live mount: a certificate per
// delegation for the embedded SSH server, which is granted the directory
// until the lease ends, and revoked when it ends sooner.
type SSHFSDelegator struct {
	Issuer CertIssuer // required
	Server Lender     // required
	// Host is the address executors dial. Default: the local end of the
	// route towards each executor.
	Host string
	// Port is the server's port. Required.
	Port int
}

var _ DelegatorTransport = (*SSHFSDelegator)(nil)

// Name implements DelegatorTransport.
func (*SSHFSDelegator) Name() string { return TransportSSHFS }

// Prepare issues the certificate and grants the directory to it. The
// export locator is a logical name: the real path never leaves this
// machine.
func (t *SSHFSDelegator) Prepare(ctx context.Context, d Lent) (*WorkDirInfo, error) {
	cred, err := t.Issuer.Issue(d.ID, d.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	t.Resume(ctx, d)
	host := t.Host
	if host == "" {
		host = "127.0.0.1"
		if u, err := url.Parse(d.Peer); err == nil && u.Hostname() != "" {
			host = AdvertiseHost(u.Hostname())
		}
	}
	locator := sshd.Locator(d.ID)
	if d.Dialect == DialectHead {
		// A head executor mounts an environment root and works in its
		// resource folder, workspace/.
		locator = sshd.EnvLocator(d.ID)
	}
	return &WorkDirInfo{
		Transport:     TransportSSHFS,
		Endpoint:      &Endpoint{Host: host, Port: t.Port, User: d.ID},
		ExportLocator: locator,
		Credential:    &Credential{PrivateKey: cred.PrivateKey, Certificate: cred.Certificate},
		HostKey:       t.Issuer.HostPublicKey(),
	}, nil
}

// Resume grants the directory again to a delegation followed anew (this
// process restarted while it ran): a grant lives in the server's memory.
func (t *SSHFSDelegator) Resume(_ context.Context, d Lent) {
	t.Server.Grant(d.ID, d.LocalDir, d.AccessMode != AccessRW, d.ExpiresAt)
}

// Finish has nothing to bring back: every write already happened in place.
func (*SSHFSDelegator) Finish(context.Context, Lent, *Event) (*archive.Report, error) {
	return &archive.Report{}, nil
}

// Cleanup revokes the grant: the delegation's connections close now.
func (t *SSHFSDelegator) Cleanup(_ context.Context, d Lent) error {
	t.Server.Revoke(d.ID)
	return nil
}

// GrantHolder is a server whose grants can be listed and revoked;
// *sshd.Server.
type GrantHolder interface {
	Granted() []string
	Revoke(id string)
}

// WatchGrants revokes, every interval until ctx is done, the grants of
// delegations whose lease ended in another process sharing the store (a
// cancel from the command line while a daemon serves the mount, say):
// this process learns of such an end only from the store.
func WatchGrants(ctx context.Context, store *lease.Store, srv GrantHolder, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, id := range srv.Granted() {
			d, err := store.Delegation(id)
			if err == nil && !d.State.Terminal() {
				continue
			}
			if err != nil && !errors.Is(err, lease.ErrNotFound) {
				continue // the store is busy or broken: ask again next time
			}
			srv.Revoke(id)
		}
	}
}

// AdvertiseHost picks the address an executor at peerURL can reach this
// machine on: the local end of the route towards it.
func AdvertiseHost(peerHost string) string {
	conn, err := net.Dial("udp", net.JoinHostPort(peerHost, "9"))
	if err != nil {
		return "127.0.0.1"
	}
	defer conn.Close()
	host, _, _ := net.SplitHostPort(conn.LocalAddr().String())
	return host
}

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
	// Logger default slog.Default().
	Logger *slog.Logger

	mu     sync.Mutex // guards mounts
	mounts map[string]*awcpfs.Mount
}

var _ ExecutorTransport = (*SSHFSExecutor)(nil)

// Name implements ExecutorTransport.
func (*SSHFSExecutor) Name() string { return TransportSSHFS }

// Available reports DEP_MISSING when this machine cannot mount.
func (t *SSHFSExecutor) Available() error {
	if t.Disabled {
		return Errorf(CodeDepMissing, "this executor does not offer live mounts").
			WithHint("use --transport archive")
	}
	dev := t.FUSEDevice
	if dev == "" {
		dev = "/dev/fuse"
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return Errorf(CodeDepMissing, "the executor has no usable FUSE device").
			WithHint("install fuse3 on the executor, or use --transport archive")
	}
	f.Close()
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			if _, err := exec.LookPath("fusermount"); err != nil {
				return Errorf(CodeDepMissing, "the executor is not root and has no fusermount").
					WithHint("install fuse3 on the executor, or use --transport archive")
			}
		}
	}
	return nil
}

// Setup mounts the delegator's export at the work dir, pinning the host
// key START carries.
func (t *SSHFSExecutor) Setup(_ context.Context, p SetupParams) error {
	m, err := t.Mount(p, false)
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

// Mount mounts p's sshfs workDir at p.WorkDir; `awcp-fs mount` uses it
// directly. Only the endpoint, the credential and the host key option are
// read from the workDir.
func (t *SSHFSExecutor) Mount(p SetupParams, debug bool) (*awcpfs.Mount, error) {
	info := p.Info
	hostKey, checkHost, err := t.hostKeyCheck(info)
	if err != nil {
		return nil, err
	}
	signer, err := awcpfs.CertSigner(info.Credential.PrivateKey, info.Credential.Certificate)
	if err != nil {
		return nil, Errorf(CodeSetupFailed, "invalid workDir.credential: %v", err)
	}
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
		ReadOnly:        p.AccessMode != AccessRW,
		ReconnectBound:  t.ReconnectBound,
		Name:            "awcp:" + p.ID,
		Logger:          log.With("delegation", p.ID),
		Debug:           debug,
	})
	if err != nil {
		return nil, &ProtocolError{Code: CodeSetupFailed, Message: "cannot mount the delegator's workspace: " + stripPaths(err, p.WorkDir), Err: err}
	}
	return m, nil
}

// CertificateExpiry is when info's certificate stops being valid.
func CertificateExpiry(info *WorkDirInfo) (time.Time, bool) {
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
	t.mu.Unlock()
	if m != nil {
		return false, m.Unmount()
	}
	// Left by a previous run of the daemon: unmount what is there.
	if awcpfs.IsMountpoint(workDir) {
		return false, awcpfs.Unmount(workDir)
	}
	return false, nil
}

var errMounted = errors.New("the work dir is still a mount point; refusing to delete through it")

// hostKeyCheck is how the delegator's host key is checked: pinned to the
// one START carries (workDir.hostKey, or workDir.options.hostKey from our
// earlier releases); else, where the operator said so, against a
// known_hosts file or not at all.
func (t *SSHFSExecutor) hostKeyCheck(info *WorkDirInfo) (gossh.PublicKey, gossh.HostKeyCallback, error) {
	sent := info.HostKey
	if sent == "" {
		sent = info.Options[HostKeyOption]
	}
	if sent != "" {
		k, err := parseHostKey(sent)
		if err != nil {
			return nil, nil, Errorf(CodeSetupFailed, "workDir.hostKey is not an SSH public key: %v", err)
		}
		return k, nil, nil
	}
	switch {
	case t.KnownHosts != "":
		cb, err := knownhosts.New(t.KnownHosts)
		if err != nil {
			return nil, nil, Errorf(CodeSetupFailed, "the executor cannot read its known_hosts file: %v", err)
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
	return nil, nil, Errorf(CodeSetupFailed, "START carries no host key for the delegator's SSH server").
		WithHint("the delegator should send workDir.hostKey; or start the executor with --known-hosts FILE (or, trusting the network, --insecure-accept-host-key)")
}

func parseHostKey(s string) (gossh.PublicKey, error) {
	k, _, _, _, err := gossh.ParseAuthorizedKey([]byte(s))
	return k, err
}
