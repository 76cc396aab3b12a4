package sshd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// TestWatchReportsOthersChanges: watch@awcp's first answer drops every
// cache; then it names what changed in the export by other hands — in a
// directory made meanwhile too — and never a hidden path, nor what the
// session itself changed.
func TestWatchReportsOthersChanges(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	const id = "dlg_watch"
	f.srv.Grant(id, Export{Dir: dir, Policy: wire.ExportPolicy{Hide: []string{"*.key"}}}, time.Now().Add(time.Hour))
	cred, err := f.auth.Issue(id, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := f.dial(id, certSigner(t, cred))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, err := sftpc.Open(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Watches() {
		t.Fatal("the server does not announce watch@awcp")
	}
	answers := make(chan []string, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			paths, overflow, err := c.Watch(ctx)
			if err != nil {
				return
			}
			if overflow {
				paths = append(paths, "<overflow>")
			}
			answers <- paths
		}
	}()
	defer func() { cancel(); <-done }()
	// collect gathers what is reported within d.
	collect := func(d time.Duration) []string {
		var got []string
		deadline := time.After(d)
		for {
			select {
			case p := <-answers:
				got = append(got, p...)
			case <-deadline:
				slices.Sort(got)
				return slices.Compact(got)
			}
		}
	}
	if got := collect(500 * time.Millisecond); !slices.Equal(got, []string{"<overflow>"}) {
		t.Fatalf("first answer %q, want an overflow", got)
	}

	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(dir, "id.key"), []byte("secret"), 0o600)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	time.Sleep(100 * time.Millisecond) // the new directory is watched
	os.WriteFile(filepath.Join(dir, "sub", "deep.txt"), []byte("d"), 0o644)
	if got := collect(300 * time.Millisecond); !slices.Equal(got, []string{"a.txt", "sub", "sub/deep.txt"}) {
		t.Fatalf("reported %q, want a.txt, sub and sub/deep.txt (and not id.key)", got)
	}

	// A directory renamed inside the export is watched under its new name;
	// one moved out of it is no longer watched.
	os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "moved"))
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(filepath.Join(dir, "moved", "after.txt"), nil, 0o644)
	if got := collect(300 * time.Millisecond); !slices.Equal(got, []string{"moved", "moved/after.txt", "sub"}) {
		t.Fatalf("after a directory's rename, reported %q", got)
	}
	outside := filepath.Join(t.TempDir(), "out")
	os.Rename(filepath.Join(dir, "moved"), outside)
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(filepath.Join(outside, "gone.txt"), nil, 0o644)
	if got := collect(300 * time.Millisecond); !slices.Equal(got, []string{"moved"}) {
		t.Fatalf("after a directory moved out, reported %q", got)
	}

	// The session's own changes are not reported back to it.
	mine, err := c.OpenFile("mine.txt", wire.FlagWrite|wire.FlagCreat|wire.FlagTrunc, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mine.WriteAt([]byte("mine"), 0); err != nil {
		t.Fatal(err)
	}
	if err := mine.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.PosixRename("mine.txt", "mine2.txt"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "theirs.txt"), nil, 0o644)
	if got := collect(300 * time.Millisecond); !slices.Equal(got, []string{"theirs.txt"}) {
		t.Fatalf("reported %q, want only theirs.txt", got)
	}
}

// watchClient is an SFTP session of ours on a new directory lent as id.
func watchClient(t *testing.T, f *fixture, id string) (string, *sftpc.Client) {
	t.Helper()
	dir, cred := f.lend(t, id, false)
	conn, err := f.dial(id, certSigner(t, cred))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c, err := sftpc.Open(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return dir, c
}

// TestWatchBounds: what one watch holds is bounded. Changes pile up to 512
// paths while the client does not ask; past that the answer is "drop
// everything", not a longer list. An export of more than 8,192
// directories is not watched at all (the client keeps its timeouts).
func TestWatchBounds(t *testing.T) {
	f := newFixture(t)
	dir, c := watchClient(t, f, "dlg_watch_piles")
	ctx := context.Background()
	if _, overflow, err := c.Watch(ctx); err != nil || !overflow {
		t.Fatalf("first answer: overflow %v, %v", overflow, err)
	}
	for i := range 600 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), nil, 0o644)
	}
	time.Sleep(200 * time.Millisecond)
	if paths, overflow, err := c.Watch(ctx); err != nil || !overflow || len(paths) != 0 {
		t.Fatalf("after 600 changes unasked: %d paths, overflow %v, %v", len(paths), overflow, err)
	}
	os.WriteFile(filepath.Join(dir, "one"), nil, 0o644)
	if paths, overflow, err := c.Watch(ctx); err != nil || overflow || !slices.Equal(paths, []string{"one"}) {
		t.Fatalf("after the overflow, one change: %q, overflow %v, %v", paths, overflow, err)
	}

	dir, c = watchClient(t, f, "dlg_watch_big")
	for i := range maxWatchDirs + 1 {
		if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("d%05d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.Watch(ctx); !errors.Is(err, sftpc.ErrNoWatch) {
		t.Fatalf("an export of %d directories: %v, want it not watched", maxWatchDirs+2, err)
	}
}
