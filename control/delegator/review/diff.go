package review

import (
	"fmt"
	"io"
	"strings"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/internal/linediff"
	"github.com/awcp/awcp/internal/untrusted"
)

// edit is one line of a line diff: ' ' kept, '-' removed, '+' added.
type edit = linediff.Edit

// maxEdits bounds the edit distance a line diff looks for (its memory
// grows with its square): past it, the file is shown replaced whole.
const maxEdits = 2000

// diffLines is a shortest edit script from a to b.
func diffLines(a, b []string) []edit { return linediff.Lines(a, b, maxEdits) }

// writeHunks writes edits as unified diff hunks. The executor's bytes
// reach a terminal: every control byte but the line's end is shown
// escaped (\x1b, \r), so no line hides another and no escape sequence
// runs.
func writeHunks(w io.Writer, edits []edit) error {
	return linediff.WriteHunks(w, edits, untrusted.Text)
}

// underGit reports whether p is in a .git directory: a live mount's result
// holds the executor's commits there, which a line diff has nothing to say
// about.
func underGit(p string) bool { return untrusted.UnderGit(p) }

// Diff writes the result as a unified diff of its text files; binary and
// large files are named with their sizes. Of changes under .git, those
// git executes or obeys (untrusted.GitControlled: config, hooks, …) are
// shown in full, marked, first; the rest (objects, refs, the index: the
// agent's commits) are named. Names are quoted and control bytes of
// content escaped, as for any text from the executor.
func (r *Result) Diff(w io.Writer) error {
	var inGit []File
	err := r.eachFile(func(f File, edits []edit) error {
		switch {
		case untrusted.GitControlled(f.Path):
			fmt.Fprintf(w, "# %s: git runs or obeys this path; `apply` leaves it out unless --allow-git-control\n", untrusted.Name(f.Path))
			return r.diffFile(w, f, edits)
		case underGit(f.Path):
			inGit = append(inGit, f)
			return nil
		}
		return r.diffFile(w, f, edits)
	})
	if err == nil && len(inGit) > 0 {
		fmt.Fprintf(w, "# %d changed path(s) under .git/ (the agent's commits: objects, refs, index), not shown as lines:\n", len(inGit))
		for _, f := range inGit {
			if _, err = fmt.Fprintf(w, "#   %s %s\n", f.Status, untrusted.Name(f.Path)); err != nil {
				break
			}
		}
	}
	return err
}

func (r *Result) diffFile(w io.Writer, f File, edits []edit) error {
	from, to := untrusted.Name("a/"+f.Path), untrusted.Name("b/"+f.Path)
	fmt.Fprintf(w, "diff --git %s %s\n", from, to)
	switch f.Status {
	case Added:
		fmt.Fprintf(w, "new file mode %s\n", gitMode(r.Res[f.Path]))
		from = "/dev/null"
	case Deleted:
		fmt.Fprintf(w, "deleted file mode %s\n", gitMode(r.Base[f.Path]))
		to = "/dev/null"
	default:
		if om, nm := gitMode(r.Base[f.Path]), gitMode(r.Res[f.Path]); om != nm {
			fmt.Fprintf(w, "old mode %s\nnew mode %s\n", om, nm)
		}
	}
	if f.Binary {
		_, err := fmt.Fprintf(w, "Binary files %s and %s differ (%d → %d bytes)\n", from, to, f.OldSize, f.NewSize)
		return err
	}
	if f.Added+f.Removed == 0 {
		return nil // the mode alone
	}
	if _, err := fmt.Fprintf(w, "--- %s\n+++ %s\n", from, to); err != nil {
		return err
	}
	return writeHunks(w, edits)
}

// gitMode is an entry's mode as git writes it.
func gitMode(e archive.Entry) string {
	switch {
	case e.Kind == archive.KindSymlink:
		return "120000"
	case e.Perm&0o111 != 0:
		return "100755"
	}
	return "100644"
}

// Stat writes a line per changed file with its added and removed lines
// (or its sizes), then the totals, as diff --stat does.
func (r *Result) Stat(w io.Writer) error {
	files, err := r.Files()
	if err != nil {
		return err
	}
	width := 0
	for _, f := range files {
		width = max(width, len(untrusted.Name(f.Path)))
	}
	added, removed := 0, 0
	for _, f := range files {
		name := untrusted.Name(f.Path)
		if f.Binary {
			fmt.Fprintf(w, " %-*s | Bin %d -> %d bytes\n", width, name, f.OldSize, f.NewSize)
			continue
		}
		added, removed = added+f.Added, removed+f.Removed
		fmt.Fprintf(w, " %-*s | %4d %s%s\n", width, name, f.Added+f.Removed,
			strings.Repeat("+", min(f.Added, 40)), strings.Repeat("-", min(f.Removed, 40)))
	}
	_, err = fmt.Fprintf(w, " %d file(s) changed, %d insertion(s)(+), %d deletion(s)(-)\n", len(files), added, removed)
	return err
}

// NameStatus writes a line per changed file: its status and path.
func (r *Result) NameStatus(w io.Writer) error {
	files, err := r.Files()
	if err != nil {
		return err
	}
	for _, f := range files {
		if _, err := fmt.Fprintf(w, "%s\t%s\n", f.Status, untrusted.Name(f.Path)); err != nil {
			return err
		}
	}
	return nil
}
