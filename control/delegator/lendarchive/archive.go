// Package lendarchive is the delegator's side of the archive transport:
// the lent directory packed into a ZIP that START carries, and the result
// the executor sends back applied three-way against what was sent (or
// kept for a staged review).
package lendarchive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator/lending"
	"github.com/awcp/awcp/lease"
)

// BlobStore is where the archive transport keeps what it sent; *lease.Store.
type BlobStore interface {
	PutBlob(key string, data []byte) error
	Blob(key string) ([]byte, error)
	DeleteBlob(key string) error
}

// Transport is the delegator side of the archive transport.
type Transport struct {
	// Blobs keeps the manifest of what was sent until the result is
	// applied, across restarts. Required.
	Blobs BlobStore
	// StagingDir is where results are unpacked before they are applied.
	// Required.
	StagingDir string
	// ResultDir keeps a result that could not be applied, as <id>.zip, so
	// that nothing the executor did is lost. Required.
	ResultDir string
	// Limits bound the extraction of results.
	Limits archive.Limits
	// Metrics receives the sizes of the archives sent and received.
	// Default: none.
	Metrics Metrics
}

func (t *Transport) metrics() Metrics {
	if t.Metrics == nil {
		return noMetrics{}
	}
	return t.Metrics
}

// Name implements DelegatorTransport.
func (*Transport) Name() string { return control.TransportArchive }

// ManifestKey is the blob holding the manifest of what was sent for
// delegation id (the git transport's export view is one too).
func ManifestKey(id string) string { return "archive-base/" + id }

func (t *Transport) packedFile(id string) string {
	return filepath.Join(t.StagingDir, id+".zip")
}

// Prepare packs the directory into a file in the staging directory, which
// START streams from, and remembers what it sent.
func (t *Transport) Prepare(_ context.Context, d control.Lent) (*control.WorkDirInfo, error) {
	return t.prepare(d, false)
}

// PrepareStored is Prepare with the files stored, not deflated, for a ZIP
// read on this machine alone (the git transport makes its repository of
// it).
func (t *Transport) PrepareStored(_ context.Context, d control.Lent) (*control.WorkDirInfo, error) {
	return t.prepare(d, true)
}

func (t *Transport) prepare(d control.Lent, stored bool) (*control.WorkDirInfo, error) {
	if err := os.MkdirAll(t.StagingDir, 0o700); err != nil {
		return nil, err
	}
	name := t.packedFile(d.ID)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pack the workspace: %w", err)
	}
	defer f.Close()
	sum := sha256.New()
	folder := ""
	if d.Dialect == control.DialectHead {
		folder = control.ResourceWorkspace // the head dialect's archive holds a folder per resource
	}
	p, err := archive.PackWith(io.MultiWriter(f, sum), d.LocalDir, archive.PackOptions{Folder: folder, Hide: lending.Hider(d.Policy), Stored: stored})
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		os.Remove(name)
		return nil, control.Errorf(control.CodeWorkspaceInvalid, "cannot pack the workspace: %v", err)
	}
	if fi, err := os.Stat(name); err == nil {
		t.metrics().Archive("workspace_sent", fi.Size())
	}
	m, err := json.Marshal(p.Manifest)
	if err != nil {
		return nil, err
	}
	if err := t.Blobs.PutBlob(ManifestKey(d.ID), m); err != nil {
		return nil, fmt.Errorf("remember what was sent: %w", err)
	}
	if d.Snapshot == lease.SnapshotStaged && d.StagedDir != "" {
		// The review diffs and applies against what was sent: kept
		// with the result, after START has removed its copy.
		if err := lending.KeepSent(name, m, d.StagedDir); err != nil {
			return nil, fmt.Errorf("keep what was sent for the review: %w", err)
		}
	}
	return &control.WorkDirInfo{
		Transport:     control.TransportArchive,
		WorkspaceFile: name,
		Checksum:      hex.EncodeToString(sum.Sum(nil)),
	}, nil
}

// Finish applies the result (ev.ResultFile, as the event reader decoded
// resultBase64) so that the directory ends as the executor left it. A ro
// delegation changes nothing; a rw one whose done event has no result (or
// one whose SHA-256 is not its resultChecksum) fails, changing nothing.
func (t *Transport) Finish(_ context.Context, d control.Lent, ev *control.Event) (*archive.Report, error) {
	if d.AccessMode != control.AccessRW {
		return &archive.Report{}, nil
	}
	// A rw delegation is never "completed, changes: none" for want of a
	// result: what the executor changed would be lost unsaid.
	switch {
	case ev.ResultFile == "" && (ev.RecommendedSnapshotID != "" || len(ev.SnapshotIDs) > 0):
		return nil, control.Errorf(control.CodeTaskFailed, "the executor named its result snapshot %s, but neither its snapshot event nor GET /result delivered it: nothing in the directory was changed",
			ev.RecommendedSnapshotID).WithHint("the executor may have dropped it; check its log")
	case ev.ResultFile == "":
		return nil, control.Errorf(control.CodeTaskFailed, "the executor's done event carries no result (resultBase64): nothing in the directory was changed").
			WithHint("the executor's changes, if any, did not come back; check its version")
	}
	if ev.ResultErr != nil {
		return nil, fmt.Errorf("resultBase64 is %v", ev.ResultErr)
	}
	f, err := os.Open(ev.ResultFile)
	if err != nil {
		return nil, fmt.Errorf("open the result: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	t.metrics().Archive("result_received", fi.Size())
	if ev.ResultChecksum != "" && !strings.EqualFold(ev.ResultSum, ev.ResultChecksum) {
		kept := filepath.Join(t.ResultDir, d.ID+".zip")
		lending.KeepFile(ev.ResultFile, kept)
		return nil, fmt.Errorf("the result's SHA-256 is %s, not the resultChecksum the executor sent (%s): nothing was applied; the result is kept in %s",
			ev.ResultSum, ev.ResultChecksum, kept)
	}
	raw, err := t.Blobs.Blob(ManifestKey(d.ID))
	if err != nil {
		return nil, fmt.Errorf("what was sent is unknown: %w", err)
	}
	var base archive.Manifest
	if err := json.Unmarshal(raw, &base); err != nil {
		return nil, fmt.Errorf("what was sent is unreadable: %w", err)
	}
	opts := archive.ApplyOptions{
		StagingDir:     t.StagingDir,
		ConflictSuffix: ".awcp-" + lending.ShortID(d.ID),
		Limits:         t.Limits,
		Hide:           lending.Hider(d.Policy),
	}
	opts.Protected = lending.Protected(d.Policy)
	if d.Dialect == control.DialectHead {
		opts.Folder = control.ResourceWorkspace
	}
	rep, err := archive.ApplyFrom(d.LocalDir, base, f, fi.Size(), opts)
	if err != nil {
		kept := filepath.Join(t.ResultDir, d.ID+".zip")
		if werr := lending.KeepFile(ev.ResultFile, kept); werr != nil {
			return nil, fmt.Errorf("apply the result: %w (and it could not be kept: %v)", err, werr)
		}
		return nil, fmt.Errorf("apply the result: %w; the result is kept in %s", err, kept)
	}
	return rep, nil
}

// Cleanup forgets what was sent.
func (t *Transport) Cleanup(_ context.Context, d control.Lent) error {
	if err := os.Remove(t.packedFile(d.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return t.Blobs.DeleteBlob(ManifestKey(d.ID))
}

var _ control.DelegatorTransport = (*Transport)(nil)

// Metrics receives the sizes of the archive transport's archives: a
// workspace sent ("workspace_sent") or a result received
// ("result_received").
type Metrics interface {
	Archive(direction string, n int64)
}

type noMetrics struct{}

func (noMetrics) Archive(string, int64) {}
