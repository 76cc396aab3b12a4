package delegator

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/untrusted"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// A file the export hides is hidden as a file, but where git tracks it
// (an .env committed once) its content is in .git/objects, which a live
// mount lends: `git show HEAD:.env` reads it. Admission looks in every
// repository it lends for a hidden path in the index or in any object
// reachable from a ref or a reflog, and refuses to lend one unless told
// (--lend-hidden-history); --hide .git lends the tree without its
// history. Objects no ref or reflog reaches (dangling, until git's gc
// prunes them) are not looked at.

// gitHistoryTimeout bounds the look at one repository's history (a
// variable for the tests).
var gitHistoryTimeout = 30 * time.Second

// hiddenInGit is where a hidden path shows in the repository at repo
// (relative to the lent directory dir, "" for dir itself): the path, and
// "the index" or the object that holds it. found is false if none does.
type hiddenInGit struct {
	Repo, Path, Where string
}

// findHiddenInGit looks in the repository whose work tree is
// dir/repo for a path hide matches. An error means it could not look.
func findHiddenInGit(ctx context.Context, dir, repo string, hide *wire.Matcher) (*hiddenInGit, error) {
	ctx, cancel := context.WithTimeout(ctx, gitHistoryTimeout)
	defer cancel()
	top := dir
	if repo != "" {
		top = dir + "/" + repo
	}
	git := func(args ...string) *exec.Cmd {
		// The owner's repository, named exactly (git looks nowhere above
		// it), read with nothing of its config that runs a program:
		// ls-files would start core.fsmonitor.
		cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.fsmonitor=false",
			"-c", "safe.directory=" + top, "--no-optional-locks"}, args...)...)
		cmd.Dir = top
		cmd.Env = append(gitEnv(), "GIT_DIR="+top+"/.git", "GIT_WORK_TREE="+top)
		return cmd
	}
	// A .git that git does not take for a repository holds no history
	// git (the agent's either) would read.
	if err := git("rev-parse", "--git-dir").Run(); err != nil {
		if ctx.Err() != nil {
			return nil, errTooLong
		}
		return nil, nil
	}
	inLent := func(p string) string {
		if repo == "" {
			return p
		}
		return repo + "/" + p
	}
	out, err := git("ls-files", "-z", "--cached").Output()
	if err != nil {
		if ctx.Err() != nil {
			return nil, errTooLong
		}
		return nil, gitError("ls-files", err)
	}
	for _, p := range bytes.Split(out, []byte{0}) {
		if len(p) > 0 && hiddenOrAbove(hide, inLent(string(p))) {
			return &hiddenInGit{Repo: repo, Path: inLent(string(p)), Where: "the index"}, nil
		}
	}
	// Every object reachable from a ref or a reflog, each named by the
	// first path it was reached at: a tree or blob of a hidden path.
	cmd := git("rev-list", "--all", "--reflog", "--objects")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, gitError("rev-list", err)
	}
	var found *hiddenInGit
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		sum, p, ok := strings.Cut(sc.Text(), " ")
		if ok && p != "" && hide.Hidden(inLent(p)) {
			found = &hiddenInGit{Repo: repo, Path: inLent(p), Where: "object " + sum}
			break
		}
	}
	cmd.Process.Kill() // found, or read to the end
	werr := cmd.Wait()
	if found != nil {
		return found, nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if werr != nil {
		if ctx.Err() != nil {
			return nil, errTooLong
		}
		return nil, gitError("rev-list", werr)
	}
	return nil, nil
}

// errTooLong is a history not looked through within gitHistoryTimeout: a
// repository that cannot be looked through is not lent.
var errTooLong = errors.New("the history is too long to look through in time")

// hiddenOrAbove reports whether p or a directory above it is hidden.
func hiddenOrAbove(hide *wire.Matcher, p string) bool {
	for q := p; q != "." && q != "/" && q != ""; q = path.Dir(q) {
		if hide.Hidden(q) {
			return true
		}
	}
	return false
}

// gitEnv is the environment git runs in here: this process's, less what
// would point it at another repository.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return env
}

func gitError(what string, err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("git %s: %s", what, strings.TrimSpace(string(ee.Stderr)))
	}
	return fmt.Errorf("git %s: %w", what, err)
}

// admitGitHistory refuses to lend a repository whose index or history
// holds a path hidden by the export: the agent would read it in
// .git/objects. It returns a note for the delegation where it could not
// look.
func admitGitHistory(ctx context.Context, dir string, repos []string, hide []string) (string, error) {
	if len(repos) == 0 || len(hide) == 0 {
		return "", nil
	}
	if _, err := exec.LookPath("git"); err != nil {
		return "git is not installed here: the history under .git was not looked through for hidden paths", nil
	}
	m := wire.NewMatcher(hide)
	for _, repo := range repos {
		found, err := findHiddenInGit(ctx, dir, repo, m)
		if err != nil {
			where := ".git"
			if repo != "" {
				where = repo + "/.git"
			}
			return "", control.Errorf(control.CodeWorkspaceInvalid, "%s could not be looked through for hidden paths: %v", where, err).
				WithHint("lend it without its history: --hide .git; or lend it as it is: --lend-hidden-history")
		}
		if found != nil {
			return "", control.Errorf(control.CodeWorkspaceInvalid,
				"%s is hidden, but git holds its content (%s): the agent could read it in .git/objects", found.Path, found.Where).
				WithHint("lend the tree without its history: --hide .git; rewrite the history without it (git filter-repo); or lend it anyway: --lend-hidden-history")
		}
	}
	return "", nil
}

// maxLentHistory bounds --git-history.
const maxLentHistory = 10_000

// admitLentHistory checks what --git-history n would lend of dir's
// branch: dir is its work tree's top (the history's trees are the whole
// repository's), and no path hide keeps back is in the tree of any of its
// last n commits (their objects all go to the executor). A refusal names
// the path and the commit.
func admitLentHistory(ctx context.Context, dir string, n int, hide []string) error {
	if n < 0 || n > maxLentHistory {
		return control.Errorf(control.CodeWorkspaceInvalid, "--git-history takes 1 to %d commits, not %d", maxLentHistory, n)
	}
	g := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		return cmd.Output()
	}
	top, err := g("rev-parse", "--show-toplevel")
	if err != nil {
		return control.Errorf(control.CodeWorkspaceInvalid, "--git-history: %s is not in a git work tree", dir)
	}
	if real, _ := filepath.EvalSymlinks(strings.TrimSpace(string(top))); real != dir {
		return control.Errorf(control.CodeWorkspaceInvalid, "--git-history: %s is not the top of its work tree (%s): the history's trees hold the whole repository", dir, strings.TrimSpace(string(top))).
			WithHint("lend the work tree's top, or leave --git-history out")
	}
	commits, err := g("rev-list", "--max-count="+strconv.Itoa(n), "HEAD")
	if err != nil {
		return control.Errorf(control.CodeWorkspaceInvalid, "--git-history: the branch has no commit")
	}
	matcher := wire.NewMatcher(append(slices.Clip(hide), ".git"))
	for _, c := range strings.Fields(string(commits)) {
		paths, err := g("ls-tree", "-r", "-z", "--name-only", "--full-tree", c)
		if err != nil {
			return err
		}
		for _, p := range strings.Split(string(paths), "\x00") {
			if p != "" && matcher.Hidden(p) {
				return control.Errorf(control.CodeWorkspaceInvalid, "--git-history %d: commit %.12s holds %s, which the export hides: its content would go to the executor", n, c, untrusted.Name(p)).
					WithHint("lend fewer commits (--git-history), or leave it out: the export view alone is lent then")
			}
		}
	}
	return nil
}
