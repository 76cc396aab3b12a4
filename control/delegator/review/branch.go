package review

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/internal/untrusted"
)

// ErrBranchExists is a branch name already taken: Branch never moves one.
var ErrBranchExists = errors.New("the branch exists already")

// Branch records the result as a commit on a new branch name of the git
// work tree holding dir, whose parent is the branch checked out (HEAD):
// HEAD's tree with each changed path as the executor left it. The working
// tree, the index and HEAD are left as they are; the owner reviews the
// branch as a pull request. Paths under .git, and symlinks leading out of
// the lent directory, are left out. It returns the commit.
//
// Names and the message are the executor's: each entry goes to git
// NUL-terminated (a newline in a name cannot add an entry of its own
// making), each file's bytes are read through an os.Root of the result
// (a link inside cannot lead git to a file outside), and the message's
// control bytes are escaped (git log prints it raw to the owner's
// terminal).
func (r *Result) Branch(ctx context.Context, dir, name, message string) (string, error) {
	message = untrusted.Text(message)
	g := gitIn{ctx: ctx, dir: dir}
	head, prefix, err := newBranch(ctx, dir, name)
	if err != nil {
		return "", err
	}

	index, err := os.CreateTemp("", "awcp-index-")
	if err != nil {
		return "", err
	}
	index.Close()
	os.Remove(index.Name()) // git makes it; an empty file is not an index
	defer os.Remove(index.Name())
	g.env = []string{"GIT_INDEX_FILE=" + index.Name()}
	if _, err := g.run(nil, "read-tree", head); err != nil {
		return "", err
	}
	result, err := os.OpenRoot(r.ResultDir)
	if err != nil {
		return "", err
	}
	defer result.Close()
	var info bytes.Buffer // update-index -z --index-info entries
	for _, p := range r.Paths {
		if underGit(p) {
			continue
		}
		at := path.Join(prefix, p)
		b, inBase := r.Base[p]
		a, inRes := r.Res[p]
		switch {
		case inRes && a.Kind == archive.KindFile:
			f, err := result.Open(filepath.FromSlash(p))
			if err != nil {
				return "", err
			}
			sum, err := g.run(f, "hash-object", "-w", "--stdin")
			f.Close()
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&info, "%s %s\t%s\x00", gitMode(a), sum, at)
		case inRes && a.Kind == archive.KindSymlink:
			if !archive.LinkStaysInside(p, a.Hash) {
				continue // a link out: never recorded (the apply's rule)
			}
			sum, err := g.run(strings.NewReader(a.Hash), "hash-object", "-w", "--stdin")
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&info, "120000 %s\t%s\x00", sum, at)
		case inBase && b.Kind != archive.KindDir:
			// Deleted, or now a directory: its entry goes.
			fmt.Fprintf(&info, "0 %s\t%s\x00", strings.Repeat("0", len(head)), at)
		}
	}
	if info.Len() > 0 {
		if _, err := g.run(&info, "update-index", "-z", "--index-info"); err != nil {
			return "", err
		}
	}
	tree, err := g.run(nil, "write-tree")
	if err != nil {
		return "", err
	}
	if _, err := g.run(nil, "var", "GIT_COMMITTER_IDENT"); err != nil {
		// git knows no one here: the commit is signed as awcp's.
		g.env = append(g.env, "GIT_AUTHOR_NAME=awcp", "GIT_AUTHOR_EMAIL=awcp@localhost",
			"GIT_COMMITTER_NAME=awcp", "GIT_COMMITTER_EMAIL=awcp@localhost")
	}
	commit, err := g.run(strings.NewReader(message), "commit-tree", tree, "-p", head)
	if err != nil {
		return "", err
	}
	// The empty old value: made only if the name is still free.
	if _, err := g.run(nil, "update-ref", "refs/heads/"+name, commit, ""); err != nil {
		return "", fmt.Errorf("%s: %w", name, ErrBranchExists)
	}
	return commit, nil
}

// newBranch checks that name can be made a new branch of the git work
// tree holding dir, and returns the commit it starts from (HEAD) and dir's
// path in the work tree ("." at its top), slash-separated.
func newBranch(ctx context.Context, dir, name string) (head, prefix string, err error) {
	g := gitIn{ctx: ctx, dir: dir}
	top, err := g.run(nil, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", "", fmt.Errorf("%s is not in a git work tree: %w", dir, err)
	}
	if _, err := g.run(nil, "check-ref-format", "--branch", name); err != nil {
		return "", "", fmt.Errorf("%q is not a branch name git takes", name)
	}
	if _, err := g.run(nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+name); err == nil {
		return "", "", fmt.Errorf("%s: %w", name, ErrBranchExists)
	}
	head, err = g.run(nil, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return "", "", fmt.Errorf("the work tree has no commit to branch from: %w", err)
	}
	absDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", "", err
	}
	prefix, err = filepath.Rel(top, absDir)
	if err != nil || strings.HasPrefix(prefix, "..") {
		return "", "", fmt.Errorf("%s is outside its work tree %s", dir, top)
	}
	return head, filepath.ToSlash(prefix), nil
}

// gitIn runs git in a directory.
type gitIn struct {
	ctx context.Context
	dir string
	env []string
}

func (g gitIn) run(stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(g.ctx, "git", args...)
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), g.env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %s", args[0], msg)
	}
	return strings.TrimSpace(out.String()), nil
}
