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

	"github.com/a2aproject/a2a-go/a2a"

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
	files := map[string][]byte{}
	removed := map[string]bool{}
	var notes []string
	var size int64
	for _, art := range task.Artifacts {
		if art == nil {
			continue
		}
		for _, part := range art.Parts {
			switch p := part.(type) {
			case a2a.TextPart:
				if art.Name != "" {
					summary = append(summary, "["+untrusted.Clip(art.Name, 80)+"]")
				}
				summary = append(summary, p.Text)
			case a2a.FilePart:
				switch fc := p.File.(type) {
				case a2a.FileBytes:
					name := resultName(fc.Name)
					if name == "" {
						notes = append(notes, fmt.Sprintf("a file named %q: not a path in the directory, left out", untrusted.Clip(fc.Name, 120)))
						continue
					}
					data, err := base64.StdEncoding.DecodeString(fc.Bytes)
					if err != nil {
						notes = append(notes, fmt.Sprintf("%s: not base64, left out", name))
						continue
					}
					if size += int64(len(data)); size > maxResult {
						return control.Errorf(control.CodeTaskFailed, "the A2A agent's files are past the %d bytes a result may be: nothing was applied", maxResult)
					}
					files[name] = data
				case a2a.FileURI:
					notes = append(notes, fmt.Sprintf("%s by URI (%s): not fetched", untrusted.Clip(fc.Name, 120), untrusted.Clip(fc.URI, 200)))
				}
			case a2a.DataPart:
				list, _ := p.Data["removed"].([]any)
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

// resultZip writes the result: every entry of the workspace sent that the
// agent neither changed nor removed, then its files. It returns the file
// and its SHA-256 (hex).
func (p *Peer) resultZip(id string, files map[string][]byte, removed map[string]bool) (string, string, error) {
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
			if _, err := w.Write(files[n]); err != nil {
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
