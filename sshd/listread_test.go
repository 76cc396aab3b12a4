package sshd

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/awcp/awcp/fs/sftpc"
	"github.com/awcp/awcp/internal/stage"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// TestListReadPagesWhatAnOpenCouldRead: list-read@awcp pages a directory
// in name order, each page within the budget asked for, every entry once,
// and carries the contents of the small regular files only — never a
// hidden file's (left out of the listing), a symlink's target (inside
// the export or out), a file larger than asked, or a FIFO's. A hidden
// directory and a file are refused as OPENDIR refuses them; a staged
// export does not serve it.
func TestListReadPagesWhatAnOpenCouldRead(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	files := map[string]string{"a.txt": "a\n", ".env": "SECRET=1\n", "secrets/x": "x\n", "sub/y": "y\n"}
	for i := range 700 {
		files[fmt.Sprintf("f%03d", i)] = fmt.Sprint("file ", i)
	}
	for name, content := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "big"), make([]byte, 100<<10), 0o644)
	os.Symlink("a.txt", filepath.Join(dir, "link-in"))
	os.Symlink("/etc/passwd", filepath.Join(dir, "link-out"))
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &memRecorder{}
	c := sessionOn(t, f, "dlg_listread", Export{Dir: dir, Policy: wire.ExportPolicy{Hide: []string{".env", "secrets"}}, Audit: rec})

	var names []string
	data := map[string]string{}
	pages, start := 0, 0
	for {
		call := c.StartListRead("/", start, 64<<10, 8<<10)
		if call == nil {
			t.Fatal("the server does not announce list-read@awcp")
		}
		total, page, err := c.ListReadResult(call)
		if err != nil {
			t.Fatal(err)
		}
		if total != 706 {
			t.Fatalf("the directory holds %d entries, want 706 (hidden ones left out)", total)
		}
		pages++
		for _, e := range page {
			names = append(names, e.Name)
			if e.HasData {
				data[e.Name] = string(e.Data)
			}
		}
		start += len(page)
		if len(page) == 0 || start >= total {
			break
		}
	}
	if pages < 3 {
		t.Errorf("706 entries came in %d pages of at most 8 KiB: the budget was not kept", pages)
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) || len(names) != 706 {
		t.Fatalf("%d names, sorted %v: want each of 706 once, in name order", len(names), slices.IsSorted(names))
	}
	for _, name := range names {
		if name == ".env" || name == "secrets" {
			t.Errorf("hidden %s listed", name)
		}
	}
	for name, content := range files {
		if strings.Contains(name, "/") || name == ".env" {
			continue
		}
		if data[name] != content {
			t.Errorf("%s came with %q, want %q", name, data[name], content)
		}
	}
	for _, name := range []string{"big", "link-in", "link-out", "pipe", "sub"} {
		if _, ok := data[name]; ok {
			t.Errorf("%s came with contents", name)
		}
	}

	// What went with the listing is in the audit log as read, marked as
	// fetched ahead: the contents reached the executor, asked for or not.
	if op, ok := rec.find(OpRead, "a.txt"); !ok || !op.Ahead || op.Bytes != 2 {
		t.Errorf("a.txt's contents, sent with the listing, are logged as %+v (found %v), want a read of 2 bytes marked ahead", op, ok)
	}
	if _, ok := rec.find(OpRead, "big"); ok {
		t.Errorf("big, whose contents were not sent, is logged as read")
	}

	for _, p := range []string{"/secrets", "/a.txt", "/missing"} {
		if _, _, err := c.ListReadResult(c.StartListRead(p, 0, 64<<10, 64<<10)); err == nil {
			t.Errorf("list-read of %s answered", p)
		}
	}

	area, err := stage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	staged := sessionOn(t, f, "dlg_listread_staged", Export{Dir: dir, Stage: area})
	if _, _, err := staged.ListReadResult(staged.StartListRead("/", 0, 64<<10, 64<<10)); err == nil || !strings.Contains(err.Error(), "unsupported") {
		t.Errorf("a staged export answered list-read: %v", err)
	}
}

// TestTreeReadWalksWhatAListReadCould: tree-read@awcp pages the named
// directories and every directory below them, breadth first, within the
// budget asked for; a client that asks again for what an answer did not
// reach (a short page, a subdirectory without a record) gets the whole
// tree, each entry once. Nothing is walked that a LIST-READ could not
// read: hidden directories and a symlink to a directory (in the export or
// out) are not entered, a hidden directory named is refused in its
// record, and what went with the pages is in the audit log as fetched
// ahead. A staged export does not serve it; a malformed request is
// refused.
func TestTreeReadWalksWhatAListReadCould(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	want := map[string]string{} // every file the walk may return, with its contents
	for i := range 6 {
		for j := range 5 {
			for k := range 30 {
				name := fmt.Sprintf("d%d/e%d/f%02d.txt", i, j, k)
				want[name] = fmt.Sprint("file ", name)
			}
		}
	}
	want["top.txt"] = "top\n"
	want["deep/a/b/c/d/e/f/g/leaf"] = "leaf\n"
	for name, content := range want {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"secrets/key", "d1/.aws/credentials"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte("SECRET"), 0o600)
	}
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "passwd"), []byte("root:x:0:0"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "out"))
	os.Symlink("secrets", filepath.Join(dir, "in"))
	rec := &memRecorder{}
	c := sessionOn(t, f, "dlg_treeread", Export{Dir: dir, Policy: wire.ExportPolicy{Hide: []string{"secrets", ".aws"}}, Audit: rec})

	got := map[string]string{}
	dirsSeen := map[string]int{}
	queue := []sftpc.TreeStart{{Path: "/"}}
	requests := 0
	for len(queue) > 0 {
		batch := queue[:min(len(queue), 7)]
		queue = queue[len(batch):]
		requests++
		call := c.StartTreeRead(batch, 64<<10, 16<<10)
		if call == nil {
			t.Fatal("the server does not announce tree-read@awcp")
		}
		pages, err := c.TreeReadResult(call, len(batch))
		if err != nil {
			t.Fatal(err)
		}
		if len(pages) == 0 {
			t.Fatal("an answer with no directory: the walk makes no progress")
		}
		listed := map[string]bool{}
		var found []sftpc.TreeStart
		for _, pg := range pages {
			p := path.Join(batch[pg.From].Path, pg.Sub)
			listed[p] = true
			if pg.Err != nil {
				t.Errorf("%s: %v", p, pg.Err)
				continue
			}
			start := 0
			if pg.Sub == "" {
				start = batch[pg.From].Start
			}
			dirsSeen[p]++
			for _, e := range pg.Page {
				child := strings.TrimPrefix(path.Join(p, e.Name), "/")
				if _, dup := got[child]; dup {
					t.Errorf("%s came twice", child)
				}
				got[child] = string(e.Data)
				if e.Attrs.Mode&syscall.S_IFMT == syscall.S_IFDIR {
					found = append(found, sftpc.TreeStart{Path: "/" + child})
				}
			}
			if next := start + len(pg.Page); next < pg.Total {
				found = append(found, sftpc.TreeStart{Path: p, Start: next})
			}
		}
		for _, d := range batch {
			if !listed[d.Path] {
				queue = append(queue, d)
			}
		}
		for _, d := range found {
			if !listed[d.Path] || d.Start > 0 {
				queue = append(queue, d)
			}
		}
	}
	for name, content := range want {
		if got[name] != content {
			t.Errorf("%s came with %q, want %q", name, got[name], content)
		}
	}
	for name := range got {
		if strings.Contains(name, "secrets") || strings.Contains(name, ".aws") || strings.HasPrefix(name, "out/") || strings.HasPrefix(name, "in/") {
			t.Errorf("%s was walked into", name)
		}
	}
	if got["out"] != "" || got["in"] != "" {
		t.Errorf("a symlink came with contents")
	}
	if requests < 6 {
		t.Errorf("%d KiB of tree came in %d answers of at most 16 KiB: the budget was not kept", len(want)*40>>10, requests)
	}
	if op, ok := rec.find(OpRead, "deep/a/b/c/d/e/f/g/leaf"); !ok || !op.Ahead {
		t.Errorf("a file eight levels down, sent with its directory, is logged as %+v (found %v), want a read marked ahead", op, ok)
	}

	// A hidden directory named is refused in its record, and recorded;
	// the rest of the request is answered.
	pages, err := c.TreeReadResult(c.StartTreeRead([]sftpc.TreeStart{{Path: "/secrets"}, {Path: "/top.txt"}, {Path: "/d0/e0"}}, 64<<10, 64<<10), 3)
	if err != nil {
		t.Fatal(err)
	}
	errs := map[int]error{}
	for _, pg := range pages {
		if pg.Sub == "" {
			errs[pg.From] = pg.Err
		}
	}
	if errs[0] == nil || errs[1] == nil || errs[2] != nil || len(errs) != 3 {
		t.Errorf("records of /secrets, /top.txt, /d0/e0: %v; want refused, refused, listed", errs)
	}
	if !slices.Contains(rec.refused(), "list secrets") {
		t.Errorf("the refusal of the hidden directory is not in the audit log: %v", rec.refused())
	}

	// Malformed: no directory, or one more than the bound.
	if _, err := c.TreeReadResult(c.StartTreeRead(make([]sftpc.TreeStart, treeReadStarts+1), 1, 1), treeReadStarts+1); err == nil {
		t.Error("a request naming too many directories was answered")
	}

	area, err := stage.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	staged := sessionOn(t, f, "dlg_treeread_staged", Export{Dir: dir, Stage: area})
	if _, err := staged.TreeReadResult(staged.StartTreeRead([]sftpc.TreeStart{{Path: "/"}}, 64<<10, 64<<10), 1); err == nil || !strings.Contains(err.Error(), "unsupported") {
		t.Errorf("a staged export answered tree-read: %v", err)
	}
}
