// Package lendlive is the delegator's side of the live mount: the embedded
// SSH server (host.go) that lends each delegation's directory, under a
// certificate of its own, until its lease ends; the listeners facing each
// executor (faces.go); and the reverse live mount's connections, parked
// at the executor (reverse.go).
package lendlive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	wire "github.com/awcp/awcp/sshd/sftpwire"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/stage"
	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// CertIssuer issues a delegation's credential; *sshd.Authority.
type CertIssuer interface {
	Issue(id string, validBefore time.Time) (*sshd.Credential, error)
	HostPublicKey() string
	// HostKey signs the proofs of reverse connections.
	HostKey() gossh.Signer
}

// Lender is the SSH server's side of lending: a delegation's directory is
// granted until the lease's end, and revoked when the lease ends before;
// *sshd.Server.
type Lender interface {
	Grant(id string, exp sshd.Export, until time.Time)
	Revoke(id string)
}

// Auditor records each delegation's operations on the SSH server and sums
// them up at its end; delegator.AuditLog.
type Auditor interface {
	For(id string) sshd.Recorder
	End(id string) *lease.AuditSummary
	Run(ctx context.Context)
}

// Tunnels opens a reverse live mount's connections to the executor,
// parked there until its mount takes one (delegator.Tunnels): proof is
// signed by the SSH server's host key.
type Tunnels interface {
	OpenTunnel(ctx context.Context, d control.Lent, proof string) (net.Conn, error)
}

// Transport is the delegator side of the live mount: a certificate per
// delegation for the embedded SSH server, which is granted the directory
// until the lease ends, and revoked when it ends sooner.
type Transport struct {
	Issuer CertIssuer // required
	Server Lender     // required
	// Host is the address executors dial. Default: the local end of the
	// route towards each executor.
	Host string
	// Port is the server's port. Required.
	Port int
	// Audit, if set, records every operation of each delegation's
	// sessions.
	Audit Auditor
	// Tunnels opens a reverse mount's connections to the executor.
	// Required for the reverse live mount.
	Tunnels Tunnels
	// Logger default slog.Default().
	Logger *slog.Logger

	// faces, where set, are listeners opened on the address facing each
	// executor for its delegations (faces.go); nil: the server's one
	// listener serves them all.
	faces *faces

	mu      sync.Mutex                 // guards keepers, areas and repos
	keepers map[string]*keeper         // of the delegations lent in reverse
	areas   map[string]*stage.Area     // staging areas of staged delegations, one each
	repos   map[string]*sshd.GitExport // what the git transport lends instead of a directory (LendRepo)
	running sync.WaitGroup             // the keepers
}

// LendRepo has the SSH server lend repo, a git repository, instead of
// delegation id's directory, from its next grant on (the git transport's
// way: the repository is what it lends).
func (t *Transport) LendRepo(id string, repo *sshd.GitExport) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.repos == nil {
		t.repos = map[string]*sshd.GitExport{}
	}
	t.repos[id] = repo
}

// Log is where the transport logs (Logger, or slog's default).
func (t *Transport) Log() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.Default()
}

// SSHPortFor is the port the executor at peer (a URL) dials for
// delegation id: that of the listener facing it, opened now and held for
// id (until its Cleanup) where each address has its own.
func (t *Transport) SSHPortFor(peer, id string) (int, error) {
	if t.faces == nil || t.Host != "" {
		return t.Port, nil
	}
	return t.faces.open(t.hostFor(peer), id)
}

// hostFor is the address the executor at peer (a URL) dials: Host, or the
// local end of the route towards it.
func (t *Transport) hostFor(peer string) string {
	if t.Host != "" {
		return t.Host
	}
	if u, err := url.Parse(peer); err == nil && u.Hostname() != "" {
		return AdvertiseHost(u.Hostname())
	}
	return "127.0.0.1"
}

// portFor is the port delegation d's executor dials: that of the listener
// facing it, held for d, where each address has its own.
func (t *Transport) portFor(d control.Lent) (int, error) {
	if t.faces == nil || t.Host != "" || d.Reverse {
		return t.Port, nil
	}
	return t.faces.open(t.hostFor(d.Peer), d.ID)
}

var _ control.DelegatorTransport = (*Transport)(nil)

// Name implements control.DelegatorTransport.
func (*Transport) Name() string { return control.TransportSSHFS }

// Prepare issues the certificate and grants the directory to it. The
// export locator is a logical name: the real path never leaves this
// machine.
func (t *Transport) Prepare(ctx context.Context, d control.Lent) (*control.WorkDirInfo, error) {
	cred, err := t.Issuer.Issue(d.ID, d.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	if err := t.grant(d); err != nil {
		return nil, err
	}
	var opts map[string]string
	if d.Reverse {
		// The keeper starts before START: the executor's mount waits for
		// its first connection while START is being answered.
		if err := t.keep(ctx, d); err != nil {
			t.Server.Revoke(d.ID)
			return nil, err
		}
		opts = map[string]string{control.ConnectOption: control.ConnectReverse}
	}
	host := t.hostFor(d.Peer)
	port, err := t.portFor(d)
	if err != nil {
		t.stopKeeping(d.ID)
		t.Server.Revoke(d.ID)
		return nil, err
	}
	locator := sshd.Locator(d.ID)
	if d.Dialect == control.DialectHead {
		// A head executor mounts an environment root and works in its
		// resource folder, workspace/.
		locator = sshd.EnvLocator(d.ID)
	}
	return &control.WorkDirInfo{
		Transport:     control.TransportSSHFS,
		Endpoint:      &control.Endpoint{Host: host, Port: port, User: d.ID},
		ExportLocator: locator,
		Credential:    &control.Credential{PrivateKey: cred.PrivateKey, Certificate: cred.Certificate},
		HostKey:       t.Issuer.HostPublicKey(),
		Options:       opts,
	}, nil
}

// Resume grants the directory again to a delegation followed anew (this
// process restarted while it ran): a grant lives in the server's memory.
func (t *Transport) Resume(ctx context.Context, d control.Lent) {
	if err := t.grant(d); err != nil {
		t.Log().Warn("live mount not resumed", "delegation", d.ID, "err", err)
		return
	}
	if _, err := t.portFor(d); err != nil {
		t.Log().Warn("live mount not resumed", "delegation", d.ID, "err", err)
	}
	if d.Reverse {
		if err := t.keep(ctx, d); err != nil {
			t.Log().Warn("reverse live mount not resumed", "delegation", d.ID, "err", err)
		}
	}
}

// grant lends d's directory to its certificate until the lease's end; a
// staged delegation's changes go to its staging area, which all its
// sessions share.
func (t *Transport) grant(d control.Lent) error {
	exp := sshd.Export{Dir: d.LocalDir, ReadOnly: d.AccessMode != control.AccessRW, Policy: wire.ExportPolicy(d.Policy)}
	t.mu.Lock()
	repo := t.repos[d.ID]
	t.mu.Unlock()
	if repo != nil {
		// The git transport's delegation is lent its repository alone.
		t.Server.Grant(d.ID, sshd.Export{Git: repo, ReadOnly: exp.ReadOnly}, d.ExpiresAt)
		return nil
	}
	if (d.Snapshot == lease.SnapshotStaged || d.Snapshot == lease.SnapshotDiscard) && !exp.ReadOnly {
		area, err := t.area(d)
		if err != nil {
			return control.Errorf(control.CodeSetupFailed, "the staging area cannot be made: %v", err).
				WithHint("check the state directory's disk")
		}
		exp.Stage = area
	}
	if t.Audit != nil {
		exp.Audit = t.Audit.For(d.ID)
	}
	t.Server.Grant(d.ID, exp, d.ExpiresAt)
	return nil
}

// area is d's staging area, opened once per process.
func (t *Transport) area(d control.Lent) (*stage.Area, error) {
	if d.StagedDir == "" {
		return nil, errors.New("no place to keep a staged result")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.areas[d.ID]; a != nil {
		return a, nil
	}
	a, err := stage.Open(d.StagedDir)
	if err != nil {
		return nil, err
	}
	if t.areas == nil {
		t.areas = map[string]*stage.Area{}
	}
	t.areas[d.ID] = a
	return a, nil
}

// Finish has nothing to bring back: every write already happened in place.
func (*Transport) Finish(context.Context, control.Lent, *control.Event) (*archive.Report, error) {
	return &archive.Report{}, nil
}

// Cleanup revokes the grant: the delegation's connections close now.
func (t *Transport) Cleanup(_ context.Context, d control.Lent) error {
	t.stopKeeping(d.ID)
	t.Server.Revoke(d.ID)
	if t.faces != nil {
		t.faces.release(d.ID)
	}
	t.mu.Lock()
	area := t.areas[d.ID]
	delete(t.areas, d.ID) // its sessions are closed; the area stays on disk
	delete(t.repos, d.ID)
	t.mu.Unlock()
	if area != nil {
		area.Close()
	}
	return nil
}

// EndAudit returns what delegation id's sessions did, its audit log
// written, once they are revoked (Cleanup); nil if there is no audit log
// or it was ended already.
func (t *Transport) EndAudit(id string) *lease.AuditSummary {
	if t.Audit == nil {
		return nil
	}
	return t.Audit.End(id)
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
		granted := srv.Granted()
		if len(granted) == 0 {
			continue
		}
		ended, err := store.EndedDelegations(granted) // one read of the store a tick
		if err != nil {
			continue // the store is busy or broken: ask again next time
		}
		for _, id := range ended {
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

var _ control.Renewer = (*Transport)(nil)

// Renew moves d's grant to its new end and issues a certificate valid
// until then: the old one ends with the old lease, and a mount that
// connects again after that needs the new one.
func (t *Transport) Renew(_ context.Context, d control.Lent) (*control.Credential, error) {
	cred, err := t.Issuer.Issue(d.ID, d.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	if err := t.grant(d); err != nil {
		return nil, err
	}
	return &control.Credential{PrivateKey: cred.PrivateKey, Certificate: cred.Certificate}, nil
}
