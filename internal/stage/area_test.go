package stage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/awcp/awcp/archive"
)

// An area opened again (a daemon restarted) holds what was recorded:
// deletions, directories made over deleted ones, and each path's first
// base; a line cut by a crash is skipped, and the lines after it count.
func TestAreaSurvivesReopening(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	owner := &archive.Entry{Kind: archive.KindFile, Perm: 0o644, Size: 3, Hash: "h"}
	a.Touch("a.txt", owner)
	a.Touch("a.txt", nil) // not the first touch: ignored
	a.Delete("old")
	a.Delete("gone")
	a.Made("old", true) // made anew over the deleted one: opaque
	a.Close()
	// A crash cut the last line short.
	f, _ := os.OpenFile(filepath.Join(dir, "journal"), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"op":"delete","pa`)
	f.Close()

	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Delete("after-the-crash"); err != nil {
		t.Fatal(err)
	}
	b.Close()
	c, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, base := c.Changes()
	if e := base["a.txt"]; e == nil || *e != *owner {
		t.Errorf("a.txt's base is %+v, want the first touch's", e)
	}
	for p, hidden := range map[string]bool{"gone": true, "gone/x": true, "old": false, "old/x": true, "after-the-crash": true, "a.txt": false} {
		if got := c.OwnerHidden(p); got != hidden {
			t.Errorf("OwnerHidden(%s) = %v, want %v", p, got, hidden)
		}
	}
	if err := c.Touch("x", nil); err == nil {
		t.Error("an area opened to be read recorded a change")
	}
}

// What an area records is bounded: past MaxTouched paths, or deletions, a
// change is refused (the server answers it as a failure), and what was
// recorded stands.
func TestAreaBounded(t *testing.T) {
	defer func(n int) { MaxTouched = n }(MaxTouched)
	MaxTouched = 100
	a, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 100 {
		if err := a.Touch(fmt.Sprint("p", i), nil); err != nil {
			t.Fatal(err)
		}
		if err := a.Delete(fmt.Sprint("d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Touch("one-more", nil); !errors.Is(err, ErrTooMany) {
		t.Errorf("the 101st path: %v, want ErrTooMany", err)
	}
	if err := a.Delete("one-more"); !errors.Is(err, ErrTooMany) {
		t.Errorf("the 101st deletion: %v, want ErrTooMany", err)
	}
	if paths, _ := a.Changes(); len(paths) != 100 {
		t.Errorf("%d paths recorded, want 100", len(paths))
	}
}
