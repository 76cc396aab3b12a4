package a2aface

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"os"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/awcp/awcp/internal/linediff"
)

// Artifact names of a completed task.
const (
	ArtifactChanges = "changes"   // the changed files, as file parts, and what was removed
	ArtifactDiff    = "diff"      // a unified diff of the changed text files
	maxEntries      = 100_000     // of a ZIP read here
	maxDiffBytes    = 4 << 20     // the diff artifact's text
	maxDiffedFile   = 1 << 20     // a file larger is named in the diff, not diffed
	maxEdits        = 2000        // a line diff's edit distance (review's bound)
	diffOmitted     = "(omitted)" // a file's line in the diff when it is not diffed
)

// entry is one file of a workspace ZIP.
type entry struct {
	f    *zip.File
	link bool
}

// zipFiles are a ZIP's files by path: directories left out, a link kept
// as a link (its target is its content).
func zipFiles(r *zip.Reader) (map[string]entry, error) {
	if len(r.File) > maxEntries {
		return nil, fmt.Errorf("%d entries, past the %d read here", len(r.File), maxEntries)
	}
	out := make(map[string]entry, len(r.File))
	for _, f := range r.File {
		mode := f.Mode()
		if mode.IsDir() || strings.HasSuffix(f.Name, "/") {
			continue
		}
		out[path.Clean(f.Name)] = entry{f: f, link: mode&fs.ModeSymlink != 0}
	}
	return out, nil
}

func openZip(f *os.File) (*zip.Reader, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return zip.NewReader(f, fi.Size())
}

// artifacts are a completed task's result: the changed files (and the
// removed ones, named), and the diff as text. None for a read-only
// delegation (no result).
func (f *Face) artifacts(t *lentTask) ([]*a2a.Artifact, error) {
	res, err := f.exec.ResultFile(t.delegation)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer res.Close()
	after, err := openZip(res)
	if err != nil {
		return nil, fmt.Errorf("the result: %w", err)
	}
	ws, err := os.Open(t.workspace)
	if err != nil {
		return nil, fmt.Errorf("the workspace sent: %w", err)
	}
	defer ws.Close()
	before, err := openZip(ws)
	if err != nil {
		return nil, fmt.Errorf("the workspace sent: %w", err)
	}
	old, err := zipFiles(before)
	if err != nil {
		return nil, err
	}
	cur, err := zipFiles(after)
	if err != nil {
		return nil, err
	}
	var changed, removed []string
	for p, e := range cur {
		if o, ok := old[p]; !ok || o.link != e.link || o.f.CRC32 != e.f.CRC32 || o.f.UncompressedSize64 != e.f.UncompressedSize64 || o.f.Mode() != e.f.Mode() {
			changed = append(changed, p)
		}
	}
	for p := range old {
		if _, ok := cur[p]; !ok {
			removed = append(removed, p)
		}
	}
	slices.Sort(changed)
	slices.Sort(removed)

	var parts []*a2a.Part
	var sent, omitted []string
	budget := f.opts.MaxArtifactBytes
	for _, p := range changed {
		e := cur[p]
		if e.link || int64(e.f.UncompressedSize64) > budget {
			omitted = append(omitted, p)
			continue
		}
		data, err := readEntry(e.f, int64(e.f.UncompressedSize64))
		if err != nil {
			return nil, fmt.Errorf("the result's %s: %w", p, err)
		}
		budget -= int64(len(data))
		parts = append(parts, &a2a.Part{Content: a2a.Raw(data), Filename: p, MediaType: mimeOf(p, data)})
		sent = append(sent, p)
	}
	summary := map[string]any{"changed": nonNil(changed), "removed": nonNil(removed), "sent": nonNil(sent), "omitted": nonNil(omitted)}
	parts = append(parts, a2a.NewDataPart(summary))
	changes := &a2a.Artifact{ID: a2a.NewArtifactID(), Name: ArtifactChanges,
		Description: fmt.Sprintf("%d file(s) changed or made, %d removed; the changed ones as file parts (a link, or a file past the artifact bound, named in \"omitted\")", len(changed), len(removed)),
		Parts:       parts}

	var diff bytes.Buffer
	for _, p := range append(slices.Clone(changed), removed...) {
		if diff.Len() > maxDiffBytes {
			fmt.Fprintf(&diff, "# … the rest left out: the diff is past %d bytes\n", maxDiffBytes)
			break
		}
		var a, b []byte
		var binary bool
		if o, ok := old[p]; ok {
			a, binary = textOf(o)
		}
		if e, ok := cur[p]; ok {
			var bin bool
			b, bin = textOf(e)
			binary = binary || bin
		}
		from, to := "a/"+p, "b/"+p
		if _, ok := old[p]; !ok {
			from = "/dev/null"
		}
		if _, ok := cur[p]; !ok {
			to = "/dev/null"
		}
		if binary {
			fmt.Fprintf(&diff, "Binary files %s and %s differ\n", from, to)
			continue
		}
		fmt.Fprintf(&diff, "--- %s\n+++ %s\n", from, to)
		linediff.WriteHunks(&diff, linediff.Lines(lines(a), lines(b), maxEdits), func(s string) string { return s })
	}
	diffArt := &a2a.Artifact{ID: a2a.NewArtifactID(), Name: ArtifactDiff,
		Description: "a unified diff of the changed text files against the workspace sent",
		Parts:       []*a2a.Part{a2a.NewTextPart(diff.String())}}
	return []*a2a.Artifact{changes, diffArt}, nil
}

// textOf is e's content if it is text to diff; binary if it is not (not
// UTF-8, a NUL, past maxDiffedFile, or a link).
func textOf(e entry) ([]byte, bool) {
	if e.link || e.f.UncompressedSize64 > maxDiffedFile {
		return nil, true
	}
	data, err := readEntry(e.f, maxDiffedFile)
	if err != nil || !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return nil, true
	}
	return data, false
}

// readEntry reads a ZIP entry, at most max bytes (its header may lie).
func readEntry(f *zip.File, max int64) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("larger than its header says")
	}
	return data, nil
}

// lines splits text into lines, each with its newline.
func lines(text []byte) []string {
	var out []string
	for len(text) > 0 {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			out = append(out, string(text))
			break
		}
		out = append(out, string(text[:i+1]))
		text = text[i+1:]
	}
	return out
}

func mimeOf(p string, data []byte) string {
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	if utf8.Valid(data) && bytes.IndexByte(data, 0) < 0 {
		return "text/plain"
	}
	return "application/octet-stream"
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
