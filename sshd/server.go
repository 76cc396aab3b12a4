package sshd

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"

	"github.com/awcp/awcp/internal/bufconn"
	"github.com/awcp/awcp/internal/stage"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// Export is what a grant lends: a directory, whether it is read-only, what
// else it refuses, and where its operations are recorded.
type Export struct {
	Dir      string
	ReadOnly bool
	// Policy is what the export refuses beyond ReadOnly: hidden names,
	// deletes, writes past a bound. Announced to clients in VERSION
	// (sftpwire.Policy).
	Policy wire.ExportPolicy
	// Audit, if set, is given every operation of the delegation's
	// sessions (audit.go).
	Audit Recorder
	// Stage, if set, takes every change instead of Dir, which is then
	// only read (staged.go): the delegation's result waits for review.
	Stage *stage.Area
	// Git, if set, lends a repository instead of Dir (git.go): the
	// delegation's sessions are git's, and SFTP is refused.
	Git *GitExport
}

// Locator is the exportLocator of delegation id's directory, as START
// names it: the server serves it as another name of the session's root.
func Locator(id string) string { return "awcp/" + id }

// Options configures a Server. Authority is required.
type Options struct {
	// Authority signs and checks certificates. Required.
	Authority *Authority
	// SweepInterval is how often connections past their grant's end are
	// closed. Default 2s.
	SweepInterval time.Duration
	// IdleTimeout closes connections without traffic. Default 5m; the
	// executor's keepalives count.
	IdleTimeout time.Duration
	// Logger default slog.Default().
	Logger *slog.Logger
	// Now is the clock for certificate validity. Default time.Now.
	Now func() time.Time
	// Metrics receives the SFTP sessions' requests, bytes and errors.
	// Default: none.
	Metrics Metrics
	// Resumed, if set, is closed once the delegator has granted again
	// what it lent before it started (a restarted daemon's delegations,
	// a session an editor's new gateway takes over). Until then a valid
	// certificate of a delegation without a grant waits for one (at most
	// resumeHold) rather than be refused: an executor that re-dials a
	// delegator taking its delegation over must not be told its lease is
	// over.
	Resumed <-chan struct{}
}

// resumeHold bounds the wait of a certificate for the delegator's
// resumption (Options.Resumed).
const resumeHold = 10 * time.Second

// Server is the embedded SSH server: certificates of our CA only, the sftp
// subsystem only.
type Server struct {
	opts Options
	ssh  *ssh.Server
	log  *slog.Logger

	mu     sync.Mutex       // guards grants, conns and shares
	grants map[string]grant // what the delegator lends, by delegation id
	conns  map[string]map[gossh.Conn]struct{}
	shares map[gossh.Conn]*connShare

	sessions sync.WaitGroup // sftp sessions: gliderlabs does not track them
	preauth  preauth        // connections not authenticated yet
}

// grant is a directory lent to a delegation, until a time (zero: until
// revoked).
type grant struct {
	Export
	until       time.Time
	written     *atomic.Int64 // bytes written by all its sessions (Policy.MaxWriteBytes; a git push's)
	made        *madeSet      // what its sessions made (Policy.NoDelete)
	gitSessions *atomic.Int32 // its git sessions running
}

// New builds a Server. It lends nothing until Grant is called.
func New(opts Options) (*Server, error) {
	if opts.Authority == nil {
		return nil, errors.New("sshd: Authority is required")
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 2 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 5 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{opts: opts, log: opts.Logger, grants: map[string]grant{}, conns: map[string]map[gossh.Conn]struct{}{},
		shares: map[gossh.Conn]*connShare{}}
	s.ssh = &ssh.Server{
		HostSigners:      []ssh.Signer{opts.Authority.HostKey()},
		IdleTimeout:      opts.IdleTimeout,
		PublicKeyHandler: s.checkCert,
		// Without a Handler gliderlabs panics on "exec"; this one refuses
		// shells and commands. SessionRequestCallback refuses them first.
		Handler: func(sess ssh.Session) {
			sess.Stderr().Write([]byte("awcp: only the sftp subsystem is served\n"))
			sess.Exit(1)
		},
		SessionRequestCallback: func(_ ssh.Session, typ string) bool { return typ == "subsystem" },
		PtyCallback:            func(ssh.Context, ssh.Pty) bool { return false },
		SubsystemHandlers: map[string]ssh.SubsystemHandler{"sftp": s.serveSFTP,
			SubsystemGitUpload: s.serveGit(false), SubsystemGitReceive: s.serveGit(true)},
		// x/crypto/ssh would read the socket 16 KiB at a time (bufconn).
		// A reverse connection is bound to the delegation it was opened
		// for (ServeTunnel).
		ConnCallback: func(ctx ssh.Context, c net.Conn) net.Conn {
			if t, ok := c.(tunnelConn); ok {
				ctx.SetValue(tunnelKey{}, t.id)
			}
			pc := s.preauth.admit(c)
			if pc == nil {
				s.log.Debug("ssh: too many connections not authenticated; closed one", "remote", c.RemoteAddr())
				return nil
			}
			ctx.SetValue(preauthKey{}, pc)
			return bufconn.New(pc)
		},
		// gliderlabs accepts every "env" request; this session handler
		// refuses them before it sees them.
		ChannelHandlers: map[string]ssh.ChannelHandler{"session": refuseEnv},
		// No LocalPortForwardingCallback, ReversePortForwardingCallback or
		// RequestHandlers: forwarding of any kind is refused.
	}
	return s, nil
}

// checkCert accepts only a user certificate signed by our CA whose single
// principal is the login user, inside its validity, for a live lease.
// CertChecker alone would accept an empty principal list and ignore the
// certificate type, hence the explicit checks.
func (s *Server) checkCert(ctx ssh.Context, key ssh.PublicKey) bool {
	user := ctx.User()
	if id, ok := ctx.Value(tunnelKey{}).(string); ok && id != user {
		s.log.Warn("ssh: refused a login over another delegation's reverse connection", "delegation", user, "tunnel", id)
		return false
	}
	cert, ok := key.(*gossh.Certificate)
	if !ok {
		s.log.Info("ssh: refused a plain key", "delegation", user, "remote", ctx.RemoteAddr())
		return false
	}
	switch {
	case cert.CertType != gossh.UserCert:
		return false
	case !bytes.Equal(cert.SignatureKey.Marshal(), s.opts.Authority.CAPublicKey().Marshal()):
		s.log.Info("ssh: refused a certificate of another CA", "delegation", user)
		return false
	case len(cert.ValidPrincipals) != 1 || cert.ValidPrincipals[0] != user:
		return false
	}
	checker := gossh.CertChecker{Clock: s.opts.Now}
	if err := checker.CheckCert(user, cert); err != nil {
		s.log.Info("ssh: refused certificate", "delegation", user, "serial", cert.Serial, "err", err)
		return false
	}
	if _, live := s.live(user); !live && !s.awaitResumed(ctx, user) {
		s.log.Info("ssh: refused certificate of an ended lease", "delegation", user, "serial", cert.Serial)
		return false
	}
	return true
}

// awaitResumed waits, while the delegator is granting again what it lent
// before a restart (Options.Resumed), for id's grant: true if it came.
// Only a certificate of our CA, valid now and naming one delegation,
// waits — but x/crypto/ssh asks this before the client has signed, so a
// holder of the certificate alone (public, once seen) can make a
// connection wait: the pre-authentication bounds count the ones that do,
// and the wait ends at resumeHold or when the server has resumed.
func (s *Server) awaitResumed(ctx ssh.Context, id string) bool {
	if s.opts.Resumed == nil {
		return false
	}
	look := time.NewTicker(50 * time.Millisecond)
	defer look.Stop()
	bound := time.NewTimer(resumeHold)
	defer bound.Stop()
	for {
		select {
		case <-s.opts.Resumed:
			_, live := s.live(id)
			return live
		case <-look.C:
			if _, live := s.live(id); live {
				return true
			}
		case <-ctx.Done():
			return false
		case <-bound.C:
			return false
		}
	}
}

func (s *Server) serveSFTP(sess ssh.Session) {
	s.sessions.Add(1)
	defer s.sessions.Done()
	id := sess.User()
	conn, _ := sess.Context().Value(ssh.ContextKeyConn).(gossh.Conn)
	exp, live := s.live(id)
	if !live || conn == nil || exp.Git != nil {
		sess.Exit(1) // a git transport's delegation is lent its repository alone
		return
	}
	share, ok := s.track(id, conn)
	defer s.untrack(id, conn)
	if !ok {
		if share == nil {
			s.log.Info("sftp: refused a connection past the delegation's limit", "delegation", id, "limit", maxConnsPerDelegation)
			sess.Exit(1)
			conn.Close()
			return
		}
		s.log.Info("sftp: refused a session past the connection's limit", "delegation", id, "limit", sessionsPerConn)
		sess.Exit(1)
		return
	}
	root, err := os.OpenRoot(exp.Dir)
	if err != nil {
		s.log.Warn("sftp: open export", "delegation", id, "err", err)
		sess.Exit(1)
		return
	}
	defer root.Close()
	s.log.Info("sftp session", "delegation", id, "remote", sess.RemoteAddr(), "readOnly", exp.ReadOnly)
	err = serveSFTP(sess, root, session{readOnly: exp.ReadOnly, policy: exp.Policy, audit: exp.Audit, written: exp.written, made: exp.made, metrics: s.opts.Metrics, stage: exp.Stage},
		s.log.With("delegation", id), newFlow(share), id)
	if err != nil {
		s.log.Debug("sftp session ended", "delegation", id, "err", err)
	}
	sess.Exit(0)
}

// connShare is what the SFTP sessions of one connection share: the budget
// of what they may hold (flow.go), and their count.
type connShare struct {
	budget   *budget
	sessions int
}

// track records a session of delegation id on c, and returns c's budget;
// ok is false past sessionsPerConn sessions. Either way untrack follows.
func (s *Server) track(id string, c gossh.Conn) (b *budget, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[id] == nil {
		s.conns[id] = map[gossh.Conn]struct{}{}
	}
	if _, known := s.conns[id][c]; !known && len(s.conns[id]) >= maxConnsPerDelegation {
		// A certificate holder's connections are bounded too: each holds
		// a descriptor and a budget of its own.
		return nil, false
	}
	s.conns[id][c] = struct{}{}
	sh := s.shares[c]
	if sh == nil {
		sh = &connShare{budget: newBudget(connInFlight)}
		s.shares[c] = sh
	}
	sh.sessions++
	return sh.budget, sh.sessions <= sessionsPerConn
}

// maxConnsPerDelegation is how many SSH connections one delegation's
// certificate may serve SFTP over at once (the mount uses one, and one more
// while it reconnects).
const maxConnsPerDelegation = 32

func (s *Server) untrack(id string, c gossh.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh := s.shares[c]; sh != nil {
		if sh.sessions--; sh.sessions == 0 {
			delete(s.shares, c)
			delete(s.conns[id], c)
		}
	}
	if len(s.conns[id]) == 0 {
		delete(s.conns, id)
	}
}

// Revoke ends delegation id's grant: its connections are closed now, and
// new ones refused. It returns once their sessions have ended (and
// recorded their last operations), or after 2 s.
func (s *Server) Revoke(id string) {
	s.mu.Lock()
	delete(s.grants, id)
	conns := make([]gossh.Conn, 0, len(s.conns[id]))
	for c := range s.conns[id] {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	if len(conns) > 0 {
		s.log.Info("ssh: closed connections of an ended lease", "delegation", id, "connections", len(conns))
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		s.mu.Lock()
		left := len(s.conns[id])
		s.mu.Unlock()
		if left == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Grant lends exp to delegation id until until (zero: until Revoke): its
// certificate is let in, and its SFTP sessions serve exp.Dir as exp says.
// A second Grant of id replaces the first, and keeps the count of bytes
// written against exp.Policy.MaxWriteBytes.
func (s *Server) Grant(id string, exp Export, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	written, made, gits := new(atomic.Int64), newMadeSet(), new(atomic.Int32)
	if old, ok := s.grants[id]; ok {
		written, made, gits = old.written, old.made, old.gitSessions
	}
	s.grants[id] = grant{Export: exp, until: until, written: written, made: made, gitSessions: gits}
}

// Granted lists the delegations lent to now: what a caller that learns of
// ends elsewhere (another process sharing the delegator's store) checks.
func (s *Server) Granted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.grants))
	for id := range s.grants {
		ids = append(ids, id)
	}
	return ids
}

// live is what id is lent, if its grant stands.
func (s *Server) live(id string) (grant, bool) {
	s.mu.Lock()
	g, ok := s.grants[id]
	s.mu.Unlock()
	if !ok || (!g.until.IsZero() && !s.opts.Now().Before(g.until)) {
		return grant{}, false
	}
	return g, true
}

// sweep revokes the grants past their end, closing their connections.
func (s *Server) sweep() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.grants))
	for id := range s.grants {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		if _, live := s.live(id); !live {
			s.Revoke(id)
		}
	}
}

// Serve accepts on ln until ctx is done, then closes every connection and
// returns once every session has ended.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.ssh.Serve(ln) }()
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	var err error
loop:
	for {
		select {
		case err = <-errc:
			break loop
		case <-t.C:
			s.sweep()
		case <-ctx.Done():
			// Close the listener too: Serve may not have registered it
			// with the server yet, and would then accept forever.
			ln.Close()
			s.ssh.Close()
			<-errc
			err = nil
			break loop
		}
	}
	s.sessions.Wait()
	if errors.Is(err, ssh.ErrServerClosed) {
		err = nil
	}
	return err
}

// ServeAlso serves ln beside Serve's listener until ln is closed (or
// Serve ends): connections accepted on it outlive it, and end as any.
func (s *Server) ServeAlso(ln net.Listener) {
	s.ssh.Serve(ln)
}

// ServeTunnel serves one connection the delegator opened to the executor
// for delegation id (the reverse live mount: control/tunnel.go), as if the
// executor had dialled it, until it ends. Only id may log in over it.
func (s *Server) ServeTunnel(id string, c net.Conn) {
	s.ssh.HandleConn(tunnelConn{Conn: c, id: id})
}

// tunnelConn is a reverse connection, and whose it is.
type tunnelConn struct {
	net.Conn
	id string
}

// tunnelKey is the context key of a reverse connection's delegation.
type tunnelKey struct{}

// refuseEnv is gliderlabs' session handler with "env" requests refused: a
// delegation's environment is the executor's business, not the session's.
// A channel is opened only once the handshake and the login are done:
// the connection stops counting as one not authenticated (preauth).
func refuseEnv(srv *ssh.Server, conn *gossh.ServerConn, newChan gossh.NewChannel, ctx ssh.Context) {
	if pc, ok := ctx.Value(preauthKey{}).(*preauthConn); ok {
		pc.authenticated()
	}
	ssh.DefaultSessionHandler(srv, conn, envFilter{newChan}, ctx)
}

type envFilter struct{ gossh.NewChannel }

// Accept passes the channel's requests on, answering "env" with a refusal.
// The filtering goroutine ends when the channel's requests do.
func (f envFilter) Accept() (gossh.Channel, <-chan *gossh.Request, error) {
	ch, reqs, err := f.NewChannel.Accept()
	if err != nil {
		return ch, reqs, err
	}
	out := make(chan *gossh.Request)
	go func() {
		defer close(out)
		for r := range reqs {
			if r.Type == "env" {
				if r.WantReply {
					r.Reply(false, nil)
				}
				continue
			}
			out <- r
		}
	}()
	return ch, out, nil
}
