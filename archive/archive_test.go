package archive

import (
	"archive/zip"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func write(t *testing.T, dir, rel, content string, perm fs.FileMode) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestPackExtractRoundTrip(t *testing.T) {
	src, outside := t.TempDir(), t.TempDir()
	write(t, src, "README.md", "hello\n", 0o644)
	write(t, src, "bin/run.sh", "#!/bin/sh\necho hi\n", 0o755)
	write(t, src, "src/deep/a.go", "package a\n", 0o600)
	write(t, src, ".git/HEAD", "ref: refs/heads/main\n", 0o644)
	write(t, src, "web/node_modules/x/index.js", "x\n", 0o644)
	write(t, outside, "secret", "s", 0o644)
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	symlink(t, "README.md", filepath.Join(src, "link"))
	symlink(t, "../README.md", filepath.Join(src, "src/up"))
	symlink(t, filepath.Join(outside, "secret"), filepath.Join(src, "abs-out"))
	symlink(t, "../../etc/passwd", filepath.Join(src, "src/rel-out"))

	p, err := Pack(src)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"abs-out", "src/rel-out"}; !reflect.DeepEqual(p.Skipped, want) {
		t.Fatalf("skipped %v, want %v", p.Skipped, want)
	}
	for _, rel := range []string{".git/HEAD", "web/node_modules/x/index.js"} {
		if _, ok := p.Manifest[rel]; ok {
			t.Errorf("%s was packed", rel)
		}
	}
	if len(Checksum(p.Zip)) != 64 {
		t.Fatal("checksum is not hex SHA-256")
	}

	dst := t.TempDir()
	if err := Extract(p.Zip, dst, Limits{}); err != nil {
		t.Fatal(err)
	}
	got, err := Scan(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p.Manifest) {
		t.Fatalf("extracted manifest differs:\n got %v\nwant %v", got, p.Manifest)
	}
	if got["bin/run.sh"].Perm != 0o755 || got["src/deep/a.go"].Perm != 0o600 || got["empty"].Perm != 0o750 {
		t.Fatalf("modes not kept: %v", got)
	}
	if got["link"].Kind != KindSymlink || got["link"].Hash != "README.md" {
		t.Fatalf("symlink not kept: %+v", got["link"])
	}
}

// zipOf builds an archive from raw entries, as an attacker would.
func zipOf(t *testing.T, entries ...func(*zip.Writer)) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		e(zw)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func file(name, content string) func(*zip.Writer) {
	return func(zw *zip.Writer) {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate}
		h.SetMode(0o644)
		w, _ := zw.CreateHeader(h)
		w.Write([]byte(content))
	}
}

func link(name, target string) func(*zip.Writer) {
	return func(zw *zip.Writer) {
		h := &zip.FileHeader{Name: name}
		h.SetMode(fs.ModeSymlink | 0o777)
		w, _ := zw.CreateHeader(h)
		w.Write([]byte(target))
	}
}

func TestExtractRefusesMaliciousArchives(t *testing.T) {
	tests := []struct {
		name string
		data func(t *testing.T) []byte
		lim  Limits
	}{
		{name: "zip slip", data: func(t *testing.T) []byte { return zipOf(t, file("../evil", "x")) }},
		{name: "deep zip slip", data: func(t *testing.T) []byte { return zipOf(t, file("a/../../evil", "x")) }},
		{name: "absolute name", data: func(t *testing.T) []byte { return zipOf(t, file("/tmp/evil", "x")) }},
		{name: "absolute link", data: func(t *testing.T) []byte { return zipOf(t, link("l", "/etc")) }},
		{name: "link leading out", data: func(t *testing.T) []byte { return zipOf(t, link("a/l", "../../x")) }},
		{name: "write through link out", data: func(t *testing.T) []byte {
			// Even if a link slipped through, os.Root refuses to follow it.
			return zipOf(t, link("l", "."), file("l/../../evil", "x"))
		}},
		{name: "link climbing through a link", data: func(t *testing.T) []byte {
			// par -> dot/.. passes a string check of the target (it
			// cleans to "."), and the kernel resolves it to the parent.
			return zipOf(t, link("dot", "."), link("par", "dot/.."))
		}},
		{name: "link placed through a link", data: func(t *testing.T) []byte {
			// dot/d/up lies in d: one level down, not two.
			return zipOf(t, link("dot", "."), file("d/f", "x"), link("dot/d/up", "../.."))
		}},
		{name: "duplicate entry", data: func(t *testing.T) []byte { return zipOf(t, file("a", "1"), file("a", "2")) }},
		{name: "bomb", lim: Limits{MaxBytes: 1 << 20}, data: func(t *testing.T) []byte {
			return zipOf(t, file("zeros", strings.Repeat("\x00", 4<<20)))
		}},
		{name: "too many entries", lim: Limits{MaxEntries: 3}, data: func(t *testing.T) []byte {
			return zipOf(t, file("a", ""), file("b", ""), file("c", ""), file("d", ""))
		}},
		{name: "not a zip", data: func(t *testing.T) []byte { return []byte("hello") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "work")
			if err := os.Mkdir(dst, 0o700); err != nil {
				t.Fatal(err)
			}
			err := Extract(tt.data(t), dst, tt.lim)
			if !errors.Is(err, ErrUnsafe) && (err == nil || !strings.Contains(err.Error(), "escapes")) {
				t.Fatalf("err = %v, want refusal", err)
			}
			ents, _ := os.ReadDir(parent)
			if len(ents) != 1 {
				t.Fatalf("something was written beside the work dir: %v", ents)
			}
		})
	}
}

func applyOpts(t *testing.T) ApplyOptions {
	return ApplyOptions{StagingDir: t.TempDir(), ConflictSuffix: ".awcp-conflict"}
}

func TestApplyCarriesCreatesChangesAndDeletes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "keep.txt", "same\n", 0o644)
	write(t, dir, "edit.txt", "old\n", 0o644)
	write(t, dir, "gone.txt", "bye\n", 0o644)
	write(t, dir, "olddir/x.txt", "x\n", 0o644)
	write(t, dir, "tool.sh", "echo\n", 0o644)
	write(t, dir, ".git/config", "[core]\n", 0o644)
	sent, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}

	// The executor's copy.
	work := t.TempDir()
	if err := Extract(sent.Zip, work, Limits{}); err != nil {
		t.Fatal(err)
	}
	write(t, work, "edit.txt", "new\n", 0o644)
	write(t, work, "new/dir/made.txt", "made\n", 0o644)
	os.Remove(filepath.Join(work, "gone.txt"))
	os.RemoveAll(filepath.Join(work, "olddir"))
	os.Chmod(filepath.Join(work, "tool.sh"), 0o755)
	result, err := Pack(work)
	if err != nil {
		t.Fatal(err)
	}

	rep, err := Apply(dir, sent.Manifest, result.Zip, applyOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Conflicts) != 0 {
		t.Fatalf("conflicts: %v", rep.Conflicts)
	}
	got, _ := Scan(dir)
	if !reflect.DeepEqual(got, result.Manifest) {
		t.Fatalf("dir does not match the executor's:\n got %v\nwant %v", got, result.Manifest)
	}
	if _, err := os.Stat(filepath.Join(dir, ".git/config")); err != nil {
		t.Fatal("a path that was never sent was touched")
	}
	if want := []string{"gone.txt", "olddir/", "olddir/x.txt"}; !reflect.DeepEqual(sorted(rep.Deleted), want) { // a directory with its slash
		t.Fatalf("deleted %v", rep.Deleted)
	}
}

func sorted(s []string) []string { sortPaths(s); return s }

func TestApplyKeepsLocalChanges(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "both.txt", "base\n", 0o644)
	write(t, dir, "deleted-remote.txt", "base\n", 0o644)
	write(t, dir, "same.txt", "base\n", 0o644)
	sent, _ := Pack(dir)

	work := t.TempDir()
	Extract(sent.Zip, work, Limits{})
	write(t, work, "both.txt", "executor\n", 0o644)
	os.Remove(filepath.Join(work, "deleted-remote.txt"))
	write(t, work, "same.txt", "agreed\n", 0o644)
	result, _ := Pack(work)

	// Meanwhile the user edits the same files.
	write(t, dir, "both.txt", "user\n", 0o644)
	write(t, dir, "deleted-remote.txt", "user\n", 0o644)
	write(t, dir, "same.txt", "agreed\n", 0o644)

	rep, err := Apply(dir, sent.Manifest, result.Zip, applyOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Conflicts) != 2 {
		t.Fatalf("conflicts %v, want 2", rep.Conflicts)
	}
	for rel, want := range map[string]string{
		"both.txt": "user\n", "both.txt.awcp-conflict": "executor\n",
		"deleted-remote.txt": "user\n", "same.txt": "agreed\n",
	} {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", rel, b, err, want)
		}
	}
}

func TestApplyDoesNotFollowLinksOut(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	symlink(t, outside, filepath.Join(dir, "out")) // not sent: it leads out
	sent, _ := Pack(dir)
	result := zipOf(t, file("out/planted", "x"))
	rep, err := Apply(dir, sent.Manifest, result, applyOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Conflicts) == 0 {
		t.Fatal("no conflict reported for a write through a link leading out")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside: %v", ents)
	}
}

// A result that would plant a link leading out is refused whole: nothing of
// it is applied, the directory stays as it was.
func TestApplyRefusesResultPlantingEscapingLink(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.txt", "mine\n", 0o644)
	sent, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	result := zipOf(t, file("a.txt", "theirs\n"), link("dot", "."), link("par", "dot/.."))
	if _, err := Apply(dir, sent.Manifest, result, applyOpts(t)); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Apply: %v, want the result refused as unsafe", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("the directory holds %d entries after a refused result", len(ents))
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "mine\n" {
		t.Fatalf("a.txt holds %q", b)
	}
}

// Links that tools make, climbing at their start within the tree, are
// carried over.
func TestApplyKeepsLinksInside(t *testing.T) {
	dir := t.TempDir()
	sent, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	result := zipOf(t, file("lib/x.js", "x"), link("bin/x", "../lib/x.js"), link("here", "./lib"))
	rep, err := Apply(dir, sent.Manifest, result, applyOpts(t))
	if err != nil || len(rep.Conflicts) > 0 {
		t.Fatalf("Apply: %v %v", rep, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "bin/x")); err != nil || string(b) != "x" {
		t.Fatalf("bin/x: %q %v", b, err)
	}
}

// Hidden paths are neither sent nor touched by the result: a file of the
// same name the executor made is reported as ignored, not written over
// the owner's, and the owner's is not deleted either.
func TestHiddenPathsStayOut(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.txt", "a\n", 0o644)
	write(t, dir, ".env", "SECRET=1\n", 0o600)
	write(t, dir, "certs/server.pem", "KEY\n", 0o600)
	write(t, dir, "certs/ca.crt", "CA\n", 0o644)
	hide := func(rel string) bool { return rel == ".env" || strings.HasSuffix(rel, ".pem") }
	var buf bytes.Buffer
	sent, err := PackWith(&buf, dir, PackOptions{Hide: hide})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sorted(sent.Hidden), []string{".env", "certs/server.pem"}) {
		t.Fatalf("hidden %v", sent.Hidden)
	}
	work := t.TempDir()
	if err := Extract(buf.Bytes(), work, Limits{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".env", "certs/server.pem"} {
		if _, err := os.Stat(filepath.Join(work, p)); err == nil {
			t.Fatalf("%s was sent", p)
		}
	}
	write(t, work, ".env", "PLANTED=1\n", 0o644)
	write(t, work, "a.txt", "edited\n", 0o644)
	result, err := Pack(work)
	if err != nil {
		t.Fatal(err)
	}
	opts := applyOpts(t)
	opts.Hide = hide
	rep, err := Apply(dir, sent.Manifest, result.Zip, opts)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".env")); string(b) != "SECRET=1\n" {
		t.Fatalf(".env = %q: the result wrote a hidden path", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "certs/server.pem")); err != nil {
		t.Fatalf("the result deleted a hidden path: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "edited\n" {
		t.Fatalf("a.txt = %q", b)
	}
	if !reflect.DeepEqual(rep.Ignored, []string{".env (hidden)"}) || len(rep.Deleted) != 0 {
		t.Fatalf("report %+v", rep)
	}
}

// TestComparePathsIsAWalksOrder: paths compare name by name, so that a
// directory's contents come right after it.
func TestComparePathsIsAWalksOrder(t *testing.T) {
	got := []string{"a.txt", "a-c", "a/b/c", "b", "a", "a/b", "", "a/b-", ".env"}
	slices.SortFunc(got, ComparePaths)
	want := []string{"", ".env", "a", "a/b", "a/b/c", "a/b-", "a-c", "a.txt", "b"}
	if !slices.Equal(got, want) {
		t.Fatalf("sorted %q, want %q", got, want)
	}
}
