package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// doneEvent collects the result and returns the events that end the
// task: done, and before it in the head dialect the snapshot that holds
// the result (nil if there is none).
func (e *Executor) doneEvent(ctx context.Context, a *lease.Assignment, before archive.Manifest, summary string, extra func(*control.Event)) (snapshot, done []byte, err error) {
	// Before the teardown: that ends the mount, and its log with it.
	highlights, after, err := e.highlights(a, before)
	if err != nil {
		return nil, nil, err
	}
	tr := e.transport(a.Transport)
	var checksum string
	if a.AccessMode == control.AccessRW {
		checksum, err = e.packResult(ctx, tr, a)
	} else {
		_, err = tr.Teardown(ctx, a.ID, a.WorkDir, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	if summary == "" {
		summary = "The agent finished without output."
	}
	// A result is not part of the stored event: the event stream appends
	// it from the file (see handleEvents).
	ev := &control.Event{DelegationID: a.ID, Type: control.EventDone, Summary: summary, Highlights: highlights}
	extra(ev)
	if a.Dialect != control.DialectHead || checksum == "" {
		ev.ResultChecksum = checksum
		return nil, e.eventJSON(ev), nil
	}
	// The head dialect's result is a snapshot of the environment, named
	// in done. The checksum rides along as in our done (an extension).
	if after == nil { // a mount's log, which counts no files
		if after, err = highlightScan(a.Transport)(agentDir(a)); err != nil {
			return nil, nil, err
		}
	}
	snapID := "snap_" + checksum[:12]
	snapshot = e.snapshotEvent(a.ID, snapID, checksum, summary, ev.Highlights, after)
	ev.SnapshotIDs, ev.RecommendedSnapshotID = []string{snapID}, snapID
	return snapshot, e.eventJSON(ev), nil
}

// resultFile is where a delegation's result ZIP is kept until its events
// are past retention.
func (e *Executor) resultFile(id string) string {
	return filepath.Join(e.opts.StateDir, "results", id+".zip")
}

// packResult has the transport write its result into the result file and
// returns the result's SHA-256 (hex); none is left, and the checksum is
// empty, if it has no result.
func (e *Executor) packResult(ctx context.Context, tr control.ExecutorTransport, a *lease.Assignment) (string, error) {
	tmp, checksum, err := e.packSummed(a.ID, func(w io.Writer) (bool, error) { return tr.Teardown(ctx, a.ID, a.WorkDir, w) })
	if tmp == "" || err != nil {
		return "", err
	}
	if err := os.Rename(tmp, e.resultFile(a.ID)); err != nil {
		os.Remove(tmp)
		return "", err
	}
	if fi, err := os.Stat(e.resultFile(a.ID)); err == nil {
		e.opts.Metrics.Archive("result_sent", fi.Size())
	}
	return checksum, nil
}

// packSummed has write write a ZIP into a new file beside the results
// and returns the file, for the caller to rename into place, and its
// SHA-256 (hex); no file if write wrote none or failed.
func (e *Executor) packSummed(id string, write func(io.Writer) (bool, error)) (tmp, checksum string, err error) {
	dir := filepath.Dir(e.resultFile(id))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	f, err := os.CreateTemp(dir, id+".packing-*.zip")
	if err != nil {
		return "", "", err
	}
	sum := sha256.New()
	wrote, err := write(io.MultiWriter(f, sum))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || !wrote {
		os.Remove(f.Name())
		return "", "", err
	}
	return f.Name(), hex.EncodeToString(sum.Sum(nil)), nil
}

// snapshotEvent is the head dialect's snapshot event of a result whose
// file is kept under snapID (the event stream appends its bytes).
func (e *Executor) snapshotEvent(id, snapID, checksum, summary string, highlights []string, after archive.Manifest) []byte {
	recommended := true
	return e.eventJSON(&control.Event{DelegationID: id, Type: control.EventSnapshot, SnapshotID: snapID, Summary: summary,
		Highlights: highlights, Recommended: &recommended, ResultChecksum: checksum, Metadata: snapshotMetadata(after, highlights)})
}

// snapshotMetadata is a snapshot event's metadata as the reference's
// delegator keeps it with a staged snapshot (SnapshotMetadata): the files
// of the workspace the snapshot holds, their bytes, and those changed.
func snapshotMetadata(after archive.Manifest, changed []string) json.RawMessage {
	m := struct {
		FileCount    int      `json:"fileCount"`
		TotalBytes   int64    `json:"totalBytes"`
		ChangedFiles []string `json:"changedFiles"`
	}{ChangedFiles: changed}
	if m.ChangedFiles == nil {
		m.ChangedFiles = []string{}
	}
	for _, e := range after {
		if e.Kind == archive.KindFile {
			m.FileCount++
			m.TotalBytes += e.Size
		}
	}
	raw, _ := json.Marshal(m)
	return raw
}
