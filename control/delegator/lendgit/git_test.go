package lendgit

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator/lendarchive"
	"github.com/awcp/awcp/internal/gitrun"
	"github.com/awcp/awcp/lease"
)

// A push is bounded in bytes, but objects compress: a result whose tree
// holds more than an archive's extraction takes — 8 MiB of zeros, a few
// KiB pushed — is refused before a byte of it is packed, and one of a
// single file within the bound is packed.
func TestGitResultBoundedAfterCompression(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := lease.Open(filepath.Join(t.TempDir(), "delegator.db"), lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tr := &Transport{RepoDir: dir, Archive: &lendarchive.Transport{Blobs: store, Limits: archive.Limits{MaxBytes: 1 << 20, MaxEntries: 10}}}
	id := "dlg_gitbomb"
	repo := tr.repo(id)
	run := func(stdin string, args ...string) string {
		t.Helper()
		var in io.Reader
		if stdin != "" {
			in = strings.NewReader(stdin)
		}
		out, err := git(ctx, repo, in, args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if _, err := gitrun.Run(ctx, "", nil, nil, "init", "-q", "--bare", repo); err != nil {
		t.Fatal(err)
	}
	commitOf := func(content string) string {
		blob := run(content, "hash-object", "-w", "--stdin")
		tree := run("100644 blob "+blob+"\tbig.bin\n", "mktree")
		return run("result\n", "commit-tree", tree)
	}
	run("", "update-ref", gitResultRef, commitOf(strings.Repeat("\x00", 8<<20)))
	if fi, _ := dirSize(filepath.Join(repo, "objects")); fi > 1<<20 {
		t.Fatalf("the bomb's objects take %d bytes: not a compressed bomb", fi)
	}
	d := control.Lent{ID: id, AccessMode: control.AccessRW}
	_, err = tr.PackResult(ctx, d, &control.Event{})
	if err == nil || !strings.Contains(err.Error(), "past what is taken") {
		t.Fatalf("an 8 MiB tree under a 1 MiB bound: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, id+".result.zip")); err == nil {
		t.Fatal("a refused result was packed")
	}
	run("", "update-ref", gitResultRef, commitOf("small\n"))
	ev := &control.Event{}
	drop, err := tr.PackResult(ctx, d, ev)
	if err != nil {
		t.Fatal(err)
	}
	defer drop()
	if fi, err := os.Stat(ev.ResultFile); err != nil || fi.Size() == 0 {
		t.Fatalf("the result within the bound was not packed: %v", err)
	}
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return err
	})
	return n, err
}
