package a2apeer

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/untrusted"
)

// maxSummary bounds the words a result's summary keeps of the agent's.
const maxSummary = 16 << 10

// finish gives the task's end: its result, a ZIP of the workspace sent
// with the agent's file parts written over it and the files it says it
// removed taken out, for the archive transport to apply or stage; its
// words (the status message, its text parts) as the summary.
func (f *follower) finish(ctx context.Context, task *a2a.Task) error {
	summary := []string{textOf(task.Status.Message)}
	files := map[string]string{} // name → the file its bytes were decoded into
	defer func() {
		for _, file := range files {
			os.Remove(file)
		}
	}()
	removed := map[string]bool{}
	var notes []string
	var size int64
	for _, art := range task.Artifacts {
		if art == nil {
			continue
		}
		for _, part := range art.Parts {
			if part == nil {
				continue
			}
			switch c := part.Content.(type) {
			case a2a.Text:
				if art.Name != "" {
					summary = append(summary, "["+untrusted.Clip(art.Name, 80)+"]")
				}
				summary = append(summary, string(c))
			case a2a.Raw:
				got, err := f.fileBytes(c)
				if err != nil {
					return fmt.Errorf("a file the agent sent: %w", err)
				}
				name := resultName(part.Filename)
				if name == "" {
					os.Remove(got.File)
					notes = append(notes, fmt.Sprintf("a file named %q: not a path in the directory, left out", untrusted.Clip(part.Filename, 120)))
					continue
				}
				if got.Bad != nil {
					os.Remove(got.File)
					notes = append(notes, fmt.Sprintf("%s: not base64, left out", name))
					continue
				}
				fi, err := os.Stat(got.File)
				if err != nil {
					return fmt.Errorf("a file the agent sent: %w", err)
				}
				if size += fi.Size(); size > maxResult {
					os.Remove(got.File)
					return control.Errorf(control.CodeTaskFailed, "the A2A agent's files are past the %d bytes a result may be: nothing was applied", maxResult)
				}
				if old, ok := files[name]; ok {
					os.Remove(old)
				}
				files[name] = got.File
			case a2a.URL:
				notes = append(notes, fmt.Sprintf("%s by URI (%s): not fetched", untrusted.Clip(part.Filename, 120), untrusted.Clip(string(c), 200)))
			case a2a.Data:
				data, _ := c.Value.(map[string]any)
				list, _ := data["removed"].([]any)
				for _, r := range list {
					if s, ok := r.(string); ok {
						if name := resultName(s); name != "" {
							removed[name] = true
						}
					}
				}
			}
		}
	}
	text := strings.TrimSpace(strings.Join(slices.DeleteFunc(summary, func(s string) bool { return strings.TrimSpace(s) == "" }), "\n"))
	if len(notes) > 0 {
		text += "\n(" + strings.Join(notes, "; ") + ")"
	}
	if text == "" {
		text = "The A2A agent finished without a word."
	}
	done := &control.Event{Type: control.EventDone, Summary: untrusted.Clip(text, maxSummary)}
	if f.del.AccessMode == control.AccessRW {
		out, sum, err := f.p.resultZip(f.del.ID, files, removed)
		if err != nil {
			return fmt.Errorf("build the result: %w", err)
		}
		defer os.Remove(out)
		done.ResultFile, done.ResultSum, done.ResultChecksum = out, sum, sum
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		slices.Sort(names)
		done.Highlights = names
	}
	return f.emit(done)
}

// fileBytes is the file a file part's bytes were decoded into: spooled as
// the answer was read (raw is then its mark, decoded by the SDK), or, for
// a part that came in a stream's event (the SDK reads at most 10 MiB an
// event), written now. The file is the caller's to remove.
func (f *follower) fileBytes(raw []byte) (control.Spooled, error) {
	if got, ok := f.spools.take(string(raw)); ok {
		return got, nil
	}
	sp, err := control.NewSpoolFile(f.p.Dir, 0)
	if err != nil {
		return control.Spooled{}, err
	}
	if _, err := io.WriteString(sp, base64.StdEncoding.EncodeToString(raw)); err != nil {
		sp.Discard()
		return control.Spooled{}, err
	}
	return sp.Finish()
}

// resultZip writes the result: every entry of the workspace sent that the
// agent neither changed nor removed, then its files. It returns the file
// and its SHA-256 (hex).
func (p *Peer) resultZip(id string, files map[string]string, removed map[string]bool) (string, string, error) {
	sent, err := zip.OpenReader(p.sentFile(id))
	if err != nil {
		return "", "", fmt.Errorf("the workspace sent: %w", err)
	}
	defer sent.Close()
	name := p.sentFile(id) + ".result"
	out, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", "", err
	}
	h := sha256.New()
	now := time.Now()
	zw := zip.NewWriter(io.MultiWriter(out, h))
	err = func() error {
		for _, e := range sent.File {
			clean := path.Clean(strings.TrimSuffix(e.Name, "/"))
			if _, over := files[clean]; over || removed[clean] {
				continue
			}
			if err := zw.Copy(e); err != nil {
				return err
			}
		}
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			h := &zip.FileHeader{Name: n, Method: zip.Deflate, Modified: now}
			h.SetMode(0o644) // the agent's files are plain files: no mode of its choosing
			w, err := zw.CreateHeader(h)
			if err != nil {
				return err
			}
			if err := copyFile(w, files[n]); err != nil {
				return err
			}
		}
		return zw.Close()
	}()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", "", err
	}
	return name, hex.EncodeToString(h.Sum(nil)), nil
}

// copyFile writes the content of file to w.
func copyFile(w io.Writer, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
