package review

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/internal/stage"
)

// area makes a staging area by hand: base holds the owner's files as they
// were, upper the executor's, and every path named in either is touched.
func area(t *testing.T, base, upper map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	a, err := stage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range upper {
		write(t, filepath.Join(a.Upper(), name), content)
	}
	for name, content := range base {
		write(t, filepath.Join(a.BaseDir(), name), content)
		sum := archive.Checksum([]byte(content))
		if err := a.Touch(name, &archive.Entry{Kind: archive.KindFile, Perm: 0o644, Size: int64(len(content)), Hash: sum}); err != nil {
			t.Fatal(err)
		}
	}
	for name := range upper {
		if err := a.Touch(name, nil); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// mutate makes a text like lines, changed here and there.
func mutate(r *rand.Rand, lines []string) []string {
	var out []string
	for i, l := range lines {
		switch r.IntN(10) {
		case 0: // drop
		case 1:
			out = append(out, fmt.Sprintf("changed %d %d\n", i, r.IntN(1000)))
		case 2:
			out = append(out, l, fmt.Sprintf("inserted after %d\n", i))
		default:
			out = append(out, l)
		}
	}
	return out
}

// Our unified diff is one git itself applies: for texts changed at random,
// git apply of the diff onto the base gives the executor's version, byte
// for byte (with files added, deleted, and a last line without newline).
func TestDiffAppliesWithGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed: ", err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	base, upper := map[string]string{}, map[string]string{}
	for f := range 12 {
		var lines []string
		for i := range 40 + r.IntN(200) {
			lines = append(lines, fmt.Sprintf("line %d of %d\n", i, f))
		}
		name := fmt.Sprintf("dir%d/f%d.txt", f%3, f)
		base[name] = strings.Join(lines, "")
		upper[name] = strings.Join(mutate(r, lines), "")
	}
	base["gone.txt"] = "bye\n"
	upper["added.txt"] = "hello\nno newline"
	base["nonl.txt"], upper["nonl.txt"] = "a\nb", "a\nb\nc"
	res, err := FromArea(area(t, base, upper), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	var diff bytes.Buffer
	if err := res.Diff(&diff); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	for name, content := range base {
		write(t, filepath.Join(work, name), content)
	}
	git(t, work, "init", "-q")
	patch := filepath.Join(t.TempDir(), "p.diff")
	os.WriteFile(patch, diff.Bytes(), 0o644)
	git(t, work, "apply", "--whitespace=nowarn", patch)
	for name, want := range upper {
		got, err := os.ReadFile(filepath.Join(work, name))
		if err != nil || string(got) != want {
			t.Errorf("%s after git apply: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "gone.txt")); err == nil {
		t.Error("gone.txt is still there after git apply")
	}
	var ns bytes.Buffer
	res.NameStatus(&ns)
	for _, want := range []string{"A\tadded.txt", "D\tgone.txt", "M\tnonl.txt"} {
		if !strings.Contains(ns.String(), want) {
			t.Errorf("name-status lacks %q:\n%s", want, ns.String())
		}
	}
}

// Branch records the result on a new branch whose parent is HEAD, leaving
// the working tree, the index and HEAD as they were; a taken name is
// refused.
func TestBranchLeavesTheWorkTree(t *testing.T) {
	work := t.TempDir()
	write(t, filepath.Join(work, "sub", "a.txt"), "a\n")
	write(t, filepath.Join(work, "sub", "b.txt"), "b\n")
	git(t, work, "init", "-q", "-b", "main")
	git(t, work, "add", ".")
	git(t, work, "commit", "-qm", "base")
	head := git(t, work, "rev-parse", "HEAD")
	write(t, filepath.Join(work, "sub", "b.txt"), "owner's uncommitted edit\n")
	status := git(t, work, "status", "--porcelain")

	res, err := FromArea(area(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"}, map[string]string{"a.txt": "agent a\n", "c.txt": "new\n"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	commit, err := res.Branch(context.Background(), filepath.Join(work, "sub"), "awcp/review", "the agent's work")
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, work, "rev-parse", "HEAD"); got != head {
		t.Errorf("HEAD moved to %s", got)
	}
	if got := git(t, work, "status", "--porcelain"); got != status {
		t.Errorf("the work tree's status went from %q to %q", status, got)
	}
	if got := git(t, work, "rev-parse", commit+"^"); got != head {
		t.Errorf("the commit's parent is %s, want HEAD %s", got, head)
	}
	if got := git(t, work, "show", "awcp/review:sub/a.txt"); got != "agent a" {
		t.Errorf("the branch's sub/a.txt is %q", got)
	}
	if got := git(t, work, "show", "awcp/review:sub/c.txt"); got != "new" {
		t.Errorf("the branch's sub/c.txt is %q", got)
	}
	if err := exec.Command("git", "-C", work, "cat-file", "-e", "awcp/review:sub/b.txt").Run(); err == nil {
		t.Error("the branch still has sub/b.txt, which the executor deleted")
	}
	if _, err := res.Branch(context.Background(), filepath.Join(work, "sub"), "awcp/review", "again"); err == nil {
		t.Error("a second branch of the same name was made")
	}
}

// An executor's archive result that carries the owner's hidden files
// (changed, or new under a hidden directory) gets none of them applied:
// the review leaves hidden paths out whatever the result holds.
func TestArchiveResultNeverWritesHidden(t *testing.T) {
	owner := t.TempDir()
	write(t, filepath.Join(owner, "app.txt"), "app\n")
	write(t, filepath.Join(owner, ".env"), "TOKEN=owner\n")
	hide := func(rel string) bool { return filepath.Base(rel) == ".env" || strings.HasPrefix(rel, ".aws") }
	tmp := t.TempDir()
	baseZip, resZip := filepath.Join(tmp, "base.zip"), filepath.Join(tmp, "res.zip")
	f, _ := os.Create(baseZip)
	packed, err := archive.PackWith(f, owner, archive.PackOptions{Hide: hide})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	evil := t.TempDir()
	write(t, filepath.Join(evil, "app.txt"), "app by the agent\n")
	write(t, filepath.Join(evil, ".env"), "TOKEN=attacker\n")
	write(t, filepath.Join(evil, ".aws", "credentials"), "planted\n")
	write(t, filepath.Join(evil, "sub", ".env"), "planted\n")
	f, _ = os.Create(resZip)
	if _, err := archive.PackTo(f, evil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, err := FromArchive(baseZip, resZip, packed.Manifest, "", tmp, archive.Limits{}, hide)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Apply(owner, ".awcp-x", false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(owner, ".env")); string(b) != "TOKEN=owner\n" {
		t.Errorf("the owner's .env became %q", b)
	}
	for _, p := range []string{".aws", "sub/.env", ".env.awcp-x"} {
		if _, err := os.Lstat(filepath.Join(owner, p)); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(owner, "app.txt")); string(b) != "app by the agent\n" {
		t.Errorf("app.txt is %q: the rest of the result was not applied", b)
	}
}

// A result whose paths go through a symlink of the owner's leading out of
// the directory (out -> another directory) writes nothing there: the
// apply stays inside the owner's directory, and says what it did not do.
func TestApplyNeverWritesThroughALinkOut(t *testing.T) {
	owner, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(owner, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../"+filepath.Base(outside), filepath.Join(owner, "rel")); err != nil {
		t.Fatal(err)
	}
	res, err := FromArea(area(t, nil, map[string]string{"out/planted": "x\n", "rel/planted": "x\n", "fine.txt": "ok\n"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	rep, err := res.Apply(owner, ".awcp-x", false)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the apply wrote outside the directory: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(owner, "fine.txt")); string(b) != "ok\n" {
		t.Errorf("fine.txt: %q", b)
	}
	if len(rep.Conflicts) < 2 {
		t.Errorf("the refused paths are not reported: %+v", rep)
	}
}

// apply merges a file both sides changed by lines, as git merge-file
// does: the owner's and the executor's changes to different lines are
// both in the file; where both changed the same line the owner's version
// is kept, and the executor's and the lent one are written beside it,
// with the lines named, so git merge-file can finish the job.
func TestApplyMergesLinesAsGitDoes(t *testing.T) {
	lines := func(change map[int]string) string {
		var b strings.Builder
		for i := 1; i <= 10; i++ {
			l, ok := change[i]
			if !ok {
				l = fmt.Sprintf("line %d", i)
			}
			b.WriteString(l + "\n")
		}
		return b.String()
	}
	base := lines(nil)
	owner := t.TempDir()
	write(t, filepath.Join(owner, "apart.txt"), lines(map[int]string{9: "owner's 9"}))
	write(t, filepath.Join(owner, "same.txt"), lines(map[int]string{5: "owner's 5"}))
	res, err := FromArea(area(t, map[string]string{"apart.txt": base, "same.txt": base},
		map[string]string{"apart.txt": lines(map[int]string{2: "agent's 2"}), "same.txt": lines(map[int]string{5: "agent's 5"})}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	rep, err := res.Apply(owner, ".awcp-x", false)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(owner, "apart.txt")); string(b) != lines(map[int]string{2: "agent's 2", 9: "owner's 9"}) {
		t.Errorf("apart.txt is not both sides' changes:\n%s", b)
	}
	if !slices.Equal(rep.Merged, []string{"apart.txt"}) || len(rep.Conflicts) != 1 || !strings.Contains(rep.Conflicts[0], "same.txt: changed on both sides (line 5)") {
		t.Errorf("report: merged %v, conflicts %v", rep.Merged, rep.Conflicts)
	}
	if b, _ := os.ReadFile(filepath.Join(owner, "same.txt")); string(b) != lines(map[int]string{5: "owner's 5"}) {
		t.Errorf("same.txt is not the owner's:\n%s", b)
	}
	out, _ := exec.Command("git", "-C", owner, "merge-file", "-p", "same.txt", "same.txt.awcp-x.base", "same.txt.awcp-x").Output()
	if !strings.Contains(string(out), "<<<<<<< same.txt\nowner's 5\n=======\nagent's 5\n>>>>>>> same.txt.awcp-x\n") {
		t.Errorf("git merge-file on what apply left:\n%s", out)
	}
}
