package sshd

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

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
