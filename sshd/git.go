package sshd

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync/atomic"

	"github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"

	"github.com/awcp/awcp/internal/gitrun"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// The git transport: instead of the directory, a delegation is lent a
// bare repository the delegator made of its export view, which the
// executor clones and pushes its result to, over two subsystems of the
// same certificate-authenticated server. Nothing else is served to such a
// delegation: no SFTP, no other path.
const (
	SubsystemGitUpload  = wire.SubsystemGitUpload
	SubsystemGitReceive = wire.SubsystemGitReceive
	// GitHaveRef is the lent commit as pushes are shown it.
	GitHaveRef = wire.GitHaveRef
)

// GitExport is a repository lent to a delegation (Export.Git).
type GitExport struct {
	// Repo is the bare repository, the delegator's own (never the
	// owner's): it holds the export view's commit and what is pushed.
	Repo string
	// MaxReceive bounds the bytes every push of the delegation together
	// may send (its --max-write-bytes); 0: no bound.
	MaxReceive int64
}

// maxGitSessions bounds the git sessions one delegation may run at once.
const maxGitSessions = 4

// serveGit runs git's upload-pack (receive false) or receive-pack on the
// delegation's repository, its protocol over the session. The git run is
// the delegator's, on a repository of its own, with no hooks, no
// configuration but the repository's and what is given here.
func (s *Server) serveGit(receive bool) ssh.SubsystemHandler {
	return func(sess ssh.Session) {
		s.sessions.Add(1)
		defer s.sessions.Done()
		id := sess.User()
		g, live := s.live(id)
		conn, _ := sess.Context().Value(ssh.ContextKeyConn).(gossh.Conn)
		if !live || g.Git == nil || conn == nil {
			io.WriteString(sess.Stderr(), "awcp: no repository is lent to this delegation\n")
			sess.Exit(1)
			return
		}
		if n := g.gitSessions.Add(1); n > maxGitSessions {
			g.gitSessions.Add(-1)
			io.WriteString(sess.Stderr(), "awcp: too many git sessions at once\n")
			sess.Exit(1)
			return
		}
		defer g.gitSessions.Add(-1)
		verb := "upload-pack"
		args := []string{"-c", "core.hooksPath=/dev/null", "-c", "uploadpack.allowFilter=false"}
		if receive {
			if g.ReadOnly {
				io.WriteString(sess.Stderr(), "awcp: the delegation is read-only: nothing may be pushed\n")
				sess.Exit(1)
				return
			}
			verb = "receive-pack"
			// Only the result branch takes a push: every other ref is
			// hidden, which refuses an update of it — but the lent
			// commit, shown so that a push sends only what is new
			// (wire.GitHaveRef).
			args = append(args, "-c", "receive.fsckObjects=true", "-c", "receive.denyDeletes=true", "-c", "receive.unpackLimit=0",
				"-c", "receive.hideRefs=refs/", "-c", "receive.hideRefs=!refs/heads/result", "-c", "receive.hideRefs=!"+wire.GitHaveRef)
			if g.Git.MaxReceive > 0 {
				left := g.Git.MaxReceive - g.written.Load()
				if left <= 0 {
					io.WriteString(sess.Stderr(), "awcp: the delegation's --max-write-bytes is spent\n")
					sess.Exit(1)
					return
				}
				args = append(args, "-c", "receive.maxInputSize="+strconv.FormatInt(left, 10))
			}
		}
		cmd := exec.CommandContext(sess.Context(), "git", append(args, verb, g.Git.Repo)...)
		// Neither the system's nor a user's configuration: the run is the
		// server's, on its own repository.
		cmd.Env = gitrun.Env()
		var in io.Reader = sess
		if receive {
			in = &countingReader{r: sess, n: g.written, max: g.Git.MaxReceive}
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = in, sess, sess.Stderr()
		s.log.Info("git session", "delegation", id, "verb", verb, "remote", sess.RemoteAddr())
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			sess.Exit(0)
		case errors.As(err, &exit):
			sess.Exit(exit.ExitCode())
		default:
			fmt.Fprintf(sess.Stderr(), "awcp: git %s: %v\n", verb, err)
			sess.Exit(1)
		}
	}
}

// countingReader counts what a push sends into n, shared by the
// delegation's sessions, and stops at max: git's own bound is per push.
type countingReader struct {
	r   io.Reader
	n   *atomic.Int64
	max int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.max > 0 && c.n.Load() >= c.max {
		return 0, errors.New("the delegation's --max-write-bytes is spent")
	}
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}
