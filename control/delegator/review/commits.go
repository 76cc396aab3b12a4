package review

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/internal/gitrun"
	"github.com/awcp/awcp/internal/untrusted"
)

// maxReplayed bounds the commits BranchFromCommits replays.
const maxReplayed = 1000

// BranchFromCommits records the commits of repo (an executor's: the git
// transport's lent repository) from base to result, first parents, oldest
// first, on a new branch name of the git work tree holding dir: each one
// replayed onto the branch checked out (HEAD) with its message and author,
// as the paths it changed were in it — as Branch records one result,
// commit by commit. Paths under .git, and the paths hide says, are left
// out of every commit, as are symlinks leading out of the lent directory
// (archive.LinkStaysInside: the rule of every apply). The working tree, the index and HEAD are left as
// they are. It returns the last commit and how many were replayed.
//
// Everything of repo is the executor's: it is read with nothing of this
// machine's git configuration (gitrun), objects are copied as data
// (cat-file, then hash-object into the owner's repository), names go to
// git NUL-terminated, messages and authors are escaped.
func BranchFromCommits(ctx context.Context, repo, base, result, dir, name string, hide func(string) bool) (string, int, error) {
	lent := func(args ...string) ([]byte, error) {
		return gitrun.Run(ctx, "", nil, nil, append([]string{"--git-dir=" + repo}, args...)...)
	}
	out, err := lent("rev-list", "--first-parent", "--reverse", base+".."+result)
	if err != nil {
		return "", 0, err
	}
	commits := strings.Fields(string(out))
	switch {
	case len(commits) == 0:
		return "", 0, errors.New("the agent's result holds no commit")
	case len(commits) > maxReplayed:
		return "", 0, fmt.Errorf("the agent's result holds %d commits, more than %d", len(commits), maxReplayed)
	}
	tip, prefix, err := newBranch(ctx, dir, name)
	if err != nil {
		return "", 0, err
	}
	index, err := os.CreateTemp("", "awcp-index-")
	if err != nil {
		return "", 0, err
	}
	index.Close()
	os.Remove(index.Name()) // git makes it; an empty file is not an index
	defer os.Remove(index.Name())
	own := gitIn{ctx: ctx, dir: dir, env: []string{"GIT_INDEX_FILE=" + index.Name()}}
	for _, c := range commits {
		if _, err := own.run(nil, "read-tree", tip); err != nil {
			return "", 0, err
		}
		changes, err := lent("diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", c+"^", c)
		if err != nil {
			return "", 0, err
		}
		var info bytes.Buffer // update-index -z --index-info entries
		fields := bytes.Split(changes, []byte{0})
		for i := 0; i+1 < len(fields); i += 2 {
			// :oldmode newmode oldsha newsha status, then the path.
			meta, p := strings.Fields(strings.TrimPrefix(string(fields[i]), ":")), string(fields[i+1])
			if len(meta) != 5 || underGit(p) || hide != nil && hide(p) || strings.HasPrefix(meta[1], "160") {
				continue
			}
			at := path.Join(prefix, p)
			if meta[4] == "D" {
				fmt.Fprintf(&info, "0 %s\t%s\x00", strings.Repeat("0", len(tip)), at)
				continue
			}
			blob, err := lent("cat-file", "blob", meta[3])
			if err != nil {
				return "", 0, err
			}
			if meta[1] == "120000" && !archive.LinkStaysInside(p, string(blob)) {
				// A link leading out of the lent directory, which a
				// checkout of the branch would make: the archive apply's
				// rule, the change left out.
				continue
			}
			sum, err := own.run(bytes.NewReader(blob), "hash-object", "-w", "--stdin")
			if err != nil {
				return "", 0, err
			}
			fmt.Fprintf(&info, "%s %s\t%s\x00", meta[1], sum, at)
		}
		if info.Len() > 0 {
			if _, err := own.run(&info, "update-index", "-z", "--index-info"); err != nil {
				return "", 0, err
			}
		}
		tree, err := own.run(nil, "write-tree")
		if err != nil {
			return "", 0, err
		}
		meta, err := lent("log", "-1", "--format=%an%x00%ae%x00%aI%x00%B", c)
		if err != nil {
			return "", 0, err
		}
		parts := strings.SplitN(string(meta), "\x00", 4)
		if len(parts) != 4 {
			return "", 0, fmt.Errorf("commit %s: unreadable", c)
		}
		by := own
		by.env = append(append([]string(nil), own.env...), "GIT_AUTHOR_NAME="+oneField(parts[0]), "GIT_AUTHOR_EMAIL="+oneField(parts[1]), "GIT_AUTHOR_DATE="+oneField(parts[2]))
		if _, err := own.run(nil, "var", "GIT_COMMITTER_IDENT"); err != nil {
			by.env = append(by.env, "GIT_COMMITTER_NAME=awcp", "GIT_COMMITTER_EMAIL=awcp@localhost")
		}
		msg := untrusted.Text(strings.TrimSpace(parts[3])) + "\n"
		if tip, err = by.run(strings.NewReader(msg), "commit-tree", tree, "-p", tip); err != nil {
			return "", 0, err
		}
	}
	if _, err := own.run(nil, "update-ref", "refs/heads/"+name, tip, ""); err != nil {
		return "", 0, fmt.Errorf("%s: %w", name, ErrBranchExists)
	}
	return tip, len(commits), nil
}

// oneField is an author field of the executor's, with nothing git or a
// terminal would read as structure: no control bytes, no angle brackets.
func oneField(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '<' || r == '>' {
			return -1
		}
		return r
	}, s)
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
