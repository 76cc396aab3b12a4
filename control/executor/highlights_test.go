package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A renamed directory's files are all named, up to maxHighlights and no
// more; a logged path that is gone, or reached only through a symlink the
// agent put in place of a directory, is not; a symlink itself is.
func TestLoggedHighlightsAreBoundedAndStayBeneath(t *testing.T) {
	slow(t)
	dir := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "big", "deeper"), 0o755))
	for i := range maxHighlights + 5 {
		sub := "big"
		if i%2 == 1 {
			sub = "big/deeper"
		}
		must(os.WriteFile(filepath.Join(dir, sub, fmt.Sprintf("f%05d", i)), nil, 0o644))
	}
	must(os.WriteFile(filepath.Join(outside, "secret"), nil, 0o600))
	must(os.Symlink(outside, filepath.Join(dir, "was-a-dir")))
	must(os.Mkdir(filepath.Join(dir, "other"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "other", "f"), nil, 0o644))
	must(os.Symlink("other", filepath.Join(dir, "sub")))
	must(os.WriteFile(filepath.Join(dir, "a.txt"), nil, 0o644))

	got, err := loggedHighlights(dir, []string{"a.txt", "gone.txt", "was-a-dir", "was-a-dir/secret", "sub", "sub/f"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.txt", "sub", "was-a-dir"}; !slices.Equal(got, want) {
		t.Fatalf("highlights %q, want %q", got, want)
	}

	got, err = loggedHighlights(dir, []string{"big", "a.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxHighlights || !slices.Contains(got, "a.txt") {
		t.Fatalf("%d highlights (a.txt among them: %v), want %d with a.txt", len(got), slices.Contains(got, "a.txt"), maxHighlights)
	}
	for _, p := range got {
		if p == "big/deeper" || p == "big" {
			t.Fatalf("a directory named: %q", p)
		}
	}
}

// The cut list is within both bounds, and no shorter than they make it.
func TestCappedHighlights(t *testing.T) {
	var many, long []string
	for i := range maxHighlights + 10 {
		many = append(many, fmt.Sprint("f", i))
	}
	for i := range 2000 {
		long = append(long, fmt.Sprintf("%04d%s", i, strings.Repeat("n", 4000)))
	}
	if got := capped(many); len(got) != maxHighlights {
		t.Errorf("%d names kept of %d, want %d", len(got), len(many), maxHighlights)
	}
	got := capped(long)
	size := 0
	for _, p := range got {
		size += len(p)
	}
	if size > maxHighlightBytes || size+len(long[len(got)]) <= maxHighlightBytes {
		t.Errorf("%d names of %d bytes in all kept, want as many as fit in %d", len(got), size, maxHighlightBytes)
	}
	if few := many[:3]; !slices.Equal(capped(few), few) {
		t.Errorf("a short list was cut: %v", capped(few))
	}
}
