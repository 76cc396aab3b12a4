package merge3

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Each case is merged here and by git merge-file: both must agree on
// whether it is clean, and on the text when it is.
func TestMergeAgreesWithGit(t *testing.T) {
	base := "a\nb\nc\nd\ne\nf\ng\nh\n"
	for _, c := range []struct {
		name, ours, theirs string
		clean              bool
	}{
		{"different lines", "A\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nd\ne\nf\ng\nH\n", true},
		{"same line", "a\nb\nC1\nd\ne\nf\ng\nh\n", "a\nb\nC2\nd\ne\nf\ng\nh\n", false},
		{"same change both sides", "a\nb\nX\nd\ne\nf\ng\nh\n", "a\nb\nX\nd\ne\nf\ng\nh\n", true},
		{"adjacent lines", "a\nb\nC\nd\ne\nf\ng\nh\n", "a\nb\nc\nD\ne\nf\ng\nh\n", false},
		{"insert and delete apart", "a\nnew\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nd\ne\nf\nh\n", true},
		{"both insert at one place", "a\nb\nc\nd\nX\ne\nf\ng\nh\n", "a\nb\nc\nd\nY\ne\nf\ng\nh\n", false},
		{"one side only", base, "a\nb\nc\nd\ne\nf\ng\nh\ni\n", true},
		{"no newline at the end", "A\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nd\ne\nf\ng\nh", true},
		{"delete all and change", "", "a\nb\nC\nd\ne\nf\ng\nh\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, conflicts := Merge([]byte(base), []byte(c.ours), []byte(c.theirs))
			if clean := conflicts == nil; clean != c.clean {
				t.Fatalf("clean %v (conflicts %v), want %v", clean, conflicts, c.clean)
			}
			want, gitClean := gitMerge(t, base, c.ours, c.theirs)
			if gitClean != c.clean {
				t.Fatalf("git merge-file: clean %v, the case says %v", gitClean, c.clean)
			}
			if c.clean && string(got) != want {
				t.Errorf("merged %q, git %q", got, want)
			}
		})
	}
}

func gitMerge(t *testing.T, base, ours, theirs string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	for name, s := range map[string]string{"base": base, "ours": ours, "theirs": theirs} {
		os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644)
	}
	cmd := exec.Command("git", "merge-file", "-p", "ours", "base", "theirs")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 && ee.ExitCode() < 128 {
			return string(out), false
		}
		t.Fatalf("git merge-file: %v", err)
	}
	return string(out), true
}

// A conflict names the base's lines both sides changed.
func TestConflictNamesTheLines(t *testing.T) {
	_, conflicts := Merge([]byte("a\nb\nc\nd\n"), []byte("a\nB1\nc\nd\n"), []byte("a\nB2\nc\nd\n"))
	if len(conflicts) != 1 || conflicts[0].String() != "line 2" {
		t.Errorf("conflicts %v", conflicts)
	}
	if Text([]byte("a\x00b")) || !Text([]byte("plain\n")) {
		t.Error("Text")
	}
	if strings.Contains(Conflict{3, 5}.String(), "3–5") == false {
		t.Error(Conflict{3, 5}.String())
	}
}
