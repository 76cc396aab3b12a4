package executor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/awcp/awcp/control"
	awcpfs "github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/internal/gitrun"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// GitExecutor is the executor side of the git transport: the work dir is
// a clone, on this machine's disk, of the repository the delegator lends
// over the delegation's SSH connection; at the end, what the agent did —
// its own commits, and what it left uncommitted as one last commit — is
// pushed back over the same connection to the delegation's result branch.
//
// git runs here as this daemon, so it never runs in the agent's
// repository with the agent's configuration or hooks (a filter, an
// fsmonitor, a hook there would be a command of the agent's choosing run
// as the daemon): the push is made from a repository of the daemon's own,
// into which the agent's objects are copied as plain files and its work
// tree is added under this daemon's configuration alone.
type GitExecutor struct {
	// Live checks the delegator's host key as the live mount does.
	Live *SSHFSExecutor
	// Bridge is the command git runs to reach the delegation's session:
	// this program's `git-bridge`. Default: os.Executable() git-bridge.
	Bridge []string
	// AllowRemotes are the URL prefixes of the remotes a START of the
	// reference's git transport may name (gitremote.go); none: refused.
	AllowRemotes []string
	// Logger default slog.Default().
	Logger *slog.Logger

	mu    sync.Mutex
	lends map[string]*gitLend
}

// gitLend is how a delegation reaches its delegator, and what its clone
// started from. Each use (the clone, the push) opens a connection of its
// own: one held while the agent works would be closed as idle.
type gitLend struct {
	info *control.WorkDirInfo
	slot *TunnelSlot // the reverse connections' slot; nil: the executor dials
	base string      // the commit cloned
	// remote, for the reference's git transport: the remote pushed to,
	// the environment that authenticates to it, and the commit its
	// delegator started from (gitremote.go).
	remote, baseCommit string
	auth               []string
	dir                string // where the clone is, when not the work dir (a head environment's resource)
}

var _ control.ExecutorTransport = (*GitExecutor)(nil)

// Name implements control.ExecutorTransport.
func (*GitExecutor) Name() string { return control.TransportGit }

// Available reports DEP_MISSING without git.
func (t *GitExecutor) Available() error {
	if _, err := exec.LookPath("git"); err != nil {
		return control.Errorf(control.CodeDepMissing, "the executor has no git").WithHint("install git on the executor, or use another transport")
	}
	return nil
}

func (t *GitExecutor) logger() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.Default()
}

// Setup connects to the delegator and clones the lent repository into
// the work dir, then hands it to the agent's user.
func (t *GitExecutor) Setup(ctx context.Context, p control.SetupParams) error {
	if p.Info.RepoURL != "" {
		return t.setupRemote(ctx, p) // the reference's: a remote of its choosing
	}
	if len(p.Resources) > 0 {
		return control.Errorf(control.CodeSetupFailed, "the git transport lends one directory, not an environment").WithHint("use the archive transport")
	}
	lend := &gitLend{info: p.Info}
	if p.Info.Options[control.ConnectOption] == control.ConnectReverse {
		// The delegator cannot be reached: it opens the connections to
		// this executor's endpoint, as for a reverse live mount.
		hostKey, _, err := t.Live.hostKeyCheck(p.Info)
		if err != nil {
			return err
		}
		if hostKey == nil {
			return control.Errorf(control.CodeSetupFailed, "a reverse connection needs workDir.hostKey")
		}
		lend.slot = t.Live.openSlot(p.ID, hostKey)
	}
	t.mu.Lock()
	if t.lends == nil {
		t.lends = map[string]*gitLend{}
	}
	t.lends[p.ID] = lend
	t.mu.Unlock()
	fail := func(err error) error {
		t.drop(p.ID)
		return err
	}
	err := t.overSession(ctx, lend, func(bridge string) error {
		_, err := gitrun.Run(ctx, "", nil, nil, "-c", "protocol.file.allow=always", "clone", "-q", "--no-hardlinks", "-u", bridge+" upload", "file:///awcp", p.WorkDir)
		return err
	})
	if err != nil {
		return fail(&control.ProtocolError{Code: control.CodeSetupFailed, Message: "cannot clone the lent repository: " + StripPaths(err, p.WorkDir), Err: err})
	}
	head, err := gitrun.Run(ctx, "", nil, nil, "--git-dir="+filepath.Join(p.WorkDir, ".git"), "rev-parse", "HEAD")
	if err != nil {
		return fail(&control.ProtocolError{Code: control.CodeSetupFailed, Message: "the clone has no commit", Err: err})
	}
	lend.base = strings.TrimSpace(string(head))
	if p.Agent != nil {
		if err := chownTree(p.WorkDir, *p.Agent); err != nil {
			return fail(fmt.Errorf("hand the clone to the agent's user: %w", err))
		}
	}
	if err := freshIndex(ctx, p.WorkDir, p.Agent); err != nil {
		t.logger().Warn("git transport: the clone's index is not refreshed; the agent's first git status reads every file", "delegation", p.ID, "err", err)
	}
	t.logger().Info("git transport: cloned", "delegation", p.ID, "base", lend.base)
	return nil
}

// connect opens an SSH connection to the delegator for lend, pinning its
// host key: dialled, or taken from the delegator's reverse connections.
func (t *GitExecutor) connect(ctx context.Context, lend *gitLend) (*gossh.Client, error) {
	info := lend.info
	if info.Endpoint == nil || info.Credential == nil {
		return nil, control.Errorf(control.CodeSetupFailed, "START's workDir has no endpoint or credential")
	}
	hostKey, check, err := t.Live.hostKeyCheck(info)
	if err != nil {
		return nil, err
	}
	if hostKey != nil {
		check = gossh.FixedHostKey(hostKey)
	}
	signer, err := awcpfs.CertSigner(info.Credential.PrivateKey, info.Credential.Certificate)
	if err != nil {
		return nil, control.Errorf(control.CodeSetupFailed, "invalid workDir.credential: %v", err)
	}
	addr := net.JoinHostPort(info.Endpoint.Host, strconv.Itoa(info.Endpoint.Port))
	var conn net.Conn
	if lend.slot != nil {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		conn, err = lend.slot.take(wctx)
		cancel()
	} else {
		d := net.Dialer{Timeout: 15 * time.Second}
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, &control.ProtocolError{Code: control.CodeSetupFailed, Message: "cannot reach the delegator's SSH server: " + err.Error(), Err: err}
	}
	cc, chans, reqs, err := gossh.NewClientConn(conn, addr, &gossh.ClientConfig{User: info.Endpoint.User,
		Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)}, HostKeyCallback: check, Timeout: 15 * time.Second})
	if err != nil {
		conn.Close()
		return nil, &control.ProtocolError{Code: control.CodeSetupFailed, Message: "SSH to the delegator: " + err.Error(), Err: err}
	}
	return gossh.NewClient(cc, chans, reqs), nil
}

// overSession lets run's git reach the delegation's session: it listens
// on a socket in a directory of this daemon's alone, and each connection
// the bridge makes to it (`awcp-fs git-bridge SOCKET VERB`) is joined to a
// subsystem of the SSH connection. bridge is the command for git's -u or
// --receive-pack, without its verb.
func (t *GitExecutor) overSession(ctx context.Context, lend *gitLend, run func(bridge string) error) error {
	client, err := t.connect(ctx, lend)
	if err != nil {
		return err
	}
	defer client.Close()
	dir, err := os.MkdirTemp("", "awcp-git-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer func() { ln.Close(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); t.join(client, c) }()
		}
	}()
	bridge := t.Bridge
	if len(bridge) == 0 {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		bridge = []string{self, "git-bridge"}
	}
	var cmd []string
	for _, a := range append(bridge, sock) {
		cmd = append(cmd, shellQuote(a))
	}
	return run(strings.Join(cmd, " "))
}

// join runs the subsystem the bridge asks for (its first line: upload or
// receive) with the bridge's connection as its stdin and stdout.
func (t *GitExecutor) join(client *gossh.Client, c net.Conn) {
	r := bufio.NewReader(c)
	verb, err := r.ReadString('\n')
	if err != nil {
		return
	}
	name := wire.SubsystemGitUpload
	if strings.TrimSpace(verb) == "receive" {
		name = wire.SubsystemGitReceive
	}
	sess, err := client.NewSession()
	if err != nil {
		t.logger().Warn("git transport: session", "err", err)
		return
	}
	defer sess.Close()
	// A subsystem session is not started as a command is: its pipes are
	// copied here.
	in, err := sess.StdinPipe()
	if err != nil {
		return
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		return
	}
	errOut, err := sess.StderrPipe()
	if err != nil {
		return
	}
	if err := sess.RequestSubsystem(name); err != nil {
		t.logger().Warn("git transport: subsystem", "name", name, "err", err)
		return
	}
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		io.Copy(in, r)
		in.Close()
	}()
	var stderr bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(&stderr, io.LimitReader(errOut, 64<<10))
		io.Copy(io.Discard, errOut) // past what is kept: read, so the session never stalls on it
	}()
	io.Copy(c, out)
	c.Close() // ends the feeder's read of a bridge that did not end its own
	<-fed
	<-copied
	if stderr.Len() > 0 {
		t.logger().Info("git transport: the delegator's git said", "name", name, "stderr", strings.TrimSpace(stderr.String()))
	}
}

// RunGitBridge is `awcp-fs git-bridge SOCKET VERB`: what git runs as its
// upload-pack or receive-pack, joining its stdin and stdout to the
// executor's session through SOCKET.
func RunGitBridge(sock, verb string, stdin io.Reader, stdout io.Writer) error {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "%s\n", verb); err != nil {
		return err
	}
	go func() {
		io.Copy(c, stdin)
		c.(*net.UnixConn).CloseWrite()
	}()
	_, err = io.Copy(stdout, c)
	return err
}

// Teardown pushes what the agent did to the delegation's result branch:
// its commits that descend from the clone, and its work tree, as one last
// commit where it differs from its HEAD. It writes no archive result.
func (t *GitExecutor) Teardown(ctx context.Context, id, workDir string, result io.Writer) (bool, error) {
	t.mu.Lock()
	lend := t.lends[id]
	t.mu.Unlock()
	if lend == nil {
		return false, nil
	}
	defer t.drop(id)
	if result == nil {
		return false, nil // read-only, or nothing to send back
	}
	if lend.dir != "" {
		workDir = lend.dir
	}
	own, err := os.MkdirTemp("", "awcp-git-result-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(own)
	repo := filepath.Join(own, "repo.git")
	if _, err := gitrun.Run(ctx, "", nil, nil, "init", "-q", "--bare", repo); err != nil {
		return false, err
	}
	head, err := copyAgentObjects(workDir, repo)
	if err != nil {
		t.logger().Info("git transport: the agent's history is not taken", "delegation", id, "err", err)
	}
	g := func(args ...string) (string, error) {
		out, err := gitrun.Run(ctx, "", []string{"GIT_INDEX_FILE=" + filepath.Join(own, "index"), "GIT_WORK_TREE=" + workDir}, nil,
			append([]string{"--git-dir=" + repo}, args...)...)
		return strings.TrimSpace(string(out)), err
	}
	// The agent's HEAD counts if it is a commit that descends from the
	// clone; otherwise its work tree goes on the clone's commit.
	parent := lend.base
	if head != "" {
		if _, err := g("merge-base", "--is-ancestor", lend.base, head); err == nil {
			parent = head
		} else {
			t.logger().Info("git transport: the agent's HEAD does not descend from the clone; its work tree alone is sent", "delegation", id, "head", head)
		}
	}
	if _, err := g("cat-file", "-e", parent+"^{commit}"); err != nil {
		return false, fmt.Errorf("the clone's commit is gone from the agent's repository: %w", err)
	}
	if _, err := g("read-tree", parent); err != nil {
		return false, err
	}
	if _, err := g("add", "-A", "--", "."); err != nil {
		return false, fmt.Errorf("take the work tree: %w", err)
	}
	tree, err := g("write-tree")
	if err != nil {
		return false, err
	}
	final := parent
	if was, _ := g("rev-parse", parent+"^{tree}"); was != tree {
		out, err := gitrun.Run(ctx, "", []string{"GIT_AUTHOR_NAME=awcp-agent", "GIT_AUTHOR_EMAIL=agent@awcp.invalid",
			"GIT_COMMITTER_NAME=awcp-agent", "GIT_COMMITTER_EMAIL=agent@awcp.invalid"}, nil,
			"--git-dir="+repo, "commit-tree", tree, "-p", parent, "-m", "awcp: what the agent left uncommitted at the end of delegation "+id)
		if err != nil {
			return false, err
		}
		final = strings.TrimSpace(string(out))
	}
	if lend.remote != "" {
		return true, t.pushRemote(ctx, id, repo, final, lend, result)
	}
	err = t.overSession(ctx, lend, func(bridge string) error {
		_, err := gitrun.Run(ctx, "", nil, nil, "--git-dir="+repo, "push", "-q", "--receive-pack="+bridge+" receive", "file:///awcp", final+":refs/heads/result")
		return err
	})
	if err != nil {
		return false, &control.ProtocolError{Code: control.CodeTaskFailed, Message: "the result could not be pushed to the delegator: " + StripPaths(err, workDir), Err: err}
	}
	t.logger().Info("git transport: result pushed", "delegation", id, "commit", final)
	return false, nil
}

// drop closes delegation id's connection.
func (t *GitExecutor) drop(id string) {
	t.mu.Lock()
	lend := t.lends[id]
	delete(t.lends, id)
	t.mu.Unlock()
	if lend != nil && lend.slot != nil {
		t.Live.closeTunnel(id)
	}
}

// maxAgentObjects bounds what of the agent's object files is copied: past
// it, its history is not taken, and its work tree goes on the clone's
// commit (what the delegator takes is bounded again, by the push's bound).
const maxAgentObjects = 2 << 30

var objectName = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// copyAgentObjects copies the agent's repository's objects into repo, as
// plain files read through os.Root (no link followed, nothing but regular
// files), and returns its HEAD commit ("" if it has none that reads).
func copyAgentObjects(workDir, repo string) (string, error) {
	root, err := os.OpenRoot(filepath.Join(workDir, ".git"))
	if err != nil {
		return "", err
	}
	defer root.Close()
	var copied int64
	err = fs.WalkDir(root.FS(), "objects", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() || strings.HasPrefix(p, "objects/info") {
			return nil
		}
		src, err := root.OpenFile(p, os.O_RDONLY|syscallNoFollowNonblock, 0)
		if err != nil {
			return nil
		}
		defer src.Close()
		if fi, err := src.Stat(); err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		dst := filepath.Join(repo, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
		if err != nil {
			return nil // there already: objects are named by content
		}
		n, err := io.Copy(out, io.LimitReader(src, maxAgentObjects-copied+1))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if copied += n; err == nil && copied > maxAgentObjects {
			err = fmt.Errorf("its objects are past %d bytes", int64(maxAgentObjects))
		}
		return err
	})
	if err != nil {
		return "", err
	}
	// A clone of lent history is shallow: its boundary goes along, or
	// git would look for the parents beyond it.
	if f, err := root.OpenFile("shallow", os.O_RDONLY|syscallNoFollowNonblock, 0); err == nil {
		b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
		f.Close()
		var keep []string
		for _, line := range strings.Fields(string(b)) {
			if objectName.MatchString(line) {
				keep = append(keep, line)
			}
		}
		if len(keep) > 0 {
			if err := os.WriteFile(filepath.Join(repo, "shallow"), []byte(strings.Join(keep, "\n")+"\n"), 0o600); err != nil {
				return "", err
			}
		}
	}
	return readHead(root)
}

// readHead resolves the agent's HEAD to an object name, reading HEAD and
// the ref it names (loose or packed) as text.
func readHead(root *os.Root) (string, error) {
	read := func(name string) string {
		f, err := root.Open(name)
		if err != nil {
			return ""
		}
		defer f.Close()
		b, _ := io.ReadAll(io.LimitReader(f, 64<<10))
		return strings.TrimSpace(string(b))
	}
	head := read("HEAD")
	ref, symbolic := strings.CutPrefix(head, "ref: ")
	if !symbolic {
		if objectName.MatchString(head) {
			return head, nil
		}
		return "", errors.New("HEAD names no commit")
	}
	if !strings.HasPrefix(ref, "refs/") || strings.Contains(ref, "..") {
		return "", fmt.Errorf("HEAD names %q", ref)
	}
	if sha := read(ref); objectName.MatchString(sha) {
		return sha, nil
	}
	for _, line := range strings.Split(read("packed-refs"), "\n") {
		if sha, name, ok := strings.Cut(line, " "); ok && name == ref && objectName.MatchString(sha) {
			return sha, nil
		}
	}
	return "", fmt.Errorf("%s names no commit", ref)
}

// shellQuote is s as one word of sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// syscallNoFollowNonblock: an object file that is a link is not followed,
// and one that is a FIFO does not block the open.
const syscallNoFollowNonblock = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

var _ TunnelHost = (*GitExecutor)(nil)

// TunnelSlot implements TunnelHost: the slots are the live mount's.
func (t *GitExecutor) TunnelSlot(id string) (*TunnelSlot, bool) { return t.Live.TunnelSlot(id) }

// SlotReady implements TunnelHost.
func (t *GitExecutor) SlotReady(id string) <-chan struct{} { return t.Live.SlotReady(id) }

var _ control.CredentialTaker = (*GitExecutor)(nil)

// TakeCredential implements control.CredentialTaker: a renewed lease's
// certificate, for the push at the end.
func (t *GitExecutor) TakeCredential(id string, c *control.Credential) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	lend := t.lends[id]
	if lend == nil || c == nil {
		return nil
	}
	info := *lend.info
	info.Credential = c
	lend.info = &info
	return nil
}

// freshIndex makes the clone's index match its work tree, so that the
// agent's first git status compares stat data instead of reading every
// file: the files were just written by the checkout (in the second the
// index was, which git takes as "racily clean" and re-reads) and handed
// to the agent's user (which moved every ctime the index holds). Their
// mtimes are set two seconds back, the index refreshed, and the new index
// handed to the agent's user too. (Measured on 2,000 files: the agent's
// first status 0.26 s, a local one 0.03 s.)
func freshIndex(ctx context.Context, dir string, agent *control.LocalUser) error {
	past := time.Now().Add(-2 * time.Second)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == ".git" && filepath.Dir(p) == dir:
			return filepath.SkipDir
		case d.Type().IsRegular():
			return os.Chtimes(p, past, past)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// -q: a file that differs from the index (a filter's doing) is left
	// for the agent's status, and the rest refreshed all the same.
	if _, err := gitrun.Run(ctx, dir, nil, nil, "-c", "safe.directory="+dir, "update-index", "-q", "--refresh"); err != nil {
		return err
	}
	if agent != nil {
		return os.Lchown(filepath.Join(dir, ".git", "index"), int(agent.UID), int(agent.GID))
	}
	return nil
}
