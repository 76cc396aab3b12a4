package control

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
	"time"

	"github.com/awcp/awcp/archive"
)

// ExecutorTransport is the executor's side of a data plane (spec §5.1).
type ExecutorTransport interface {
	// Name is the transport's wire name.
	Name() string
	// Available returns a *ProtocolError (DEP_MISSING) if this machine
	// cannot use the transport.
	Available() error
	// Setup fills p.WorkDir, which exists and is empty, from p.Info; with
	// p.Resources (the head dialect), as an environment root holding a
	// folder per resource. An error means SETUP_FAILED; the work dir is
	// cleaned by the caller.
	Setup(ctx context.Context, p SetupParams) error
	// Teardown ends the transport's use of workDir before it is removed.
	// With a result writer it writes there the result to send back in the
	// done event, as a ZIP, and reports whether it wrote one (transports
	// that write through have none).
	Teardown(ctx context.Context, id, workDir string, result io.Writer) (wrote bool, err error)
}

// SetupParams is what an executor transport sets a workspace up from.
type SetupParams struct {
	ID         string
	Info       *WorkDirInfo
	WorkDir    string
	AccessMode string
	// Resources are a head INVITE's environment; none in the seed dialect.
	Resources []Resource
}

// DelegatorTransport is the delegator's side of a data plane (spec §5.1).
type DelegatorTransport interface {
	// Name is the transport's wire name.
	Name() string
	// Prepare builds the workDir of START for delegation d.
	Prepare(ctx context.Context, d Lent) (*WorkDirInfo, error)
	// Finish brings a done event's result into the local directory.
	Finish(ctx context.Context, d Lent, ev *Event) (*archive.Report, error)
	// Cleanup releases whatever Prepare made; it runs however the
	// delegation ended, and may run more than once.
	Cleanup(ctx context.Context, d Lent) error
}

// Lent is what a delegator transport needs to know of a delegation.
type Lent struct {
	ID         string
	LocalDir   string
	AccessMode string
	ExpiresAt  time.Time
	Peer       string // the executor's URL
	Dialect    string // the executor's: the head dialect lends the directory as a resource
}

// ArchiveExecutor is the executor side of the archive transport.
type ArchiveExecutor struct {
	// Limits bound extraction. Zero fields take archive's defaults.
	Limits archive.Limits
}

var _ ExecutorTransport = (*ArchiveExecutor)(nil)

// Name implements ExecutorTransport.
func (*ArchiveExecutor) Name() string { return TransportArchive }

// Available implements ExecutorTransport: the archive transport needs nothing.
func (*ArchiveExecutor) Available() error { return nil }

// Setup verifies the checksum and extracts the workspace from the file the
// START reader decoded workspaceBase64 into.
func (t *ArchiveExecutor) Setup(_ context.Context, p SetupParams) error {
	info, workDir := p.Info, p.WorkDir
	got := info.received
	if got == nil {
		return errors.New("archive setup: the workspace was not received into a file")
	}
	if got.bad != nil {
		return Errorf(CodeSetupFailed, "workDir.workspaceBase64 is %v", got.bad)
	}
	if !strings.EqualFold(got.sum, info.Checksum) {
		return Errorf(CodeSetupFailed, "workspace checksum mismatch: got %s, START says %s", got.sum, info.Checksum).
			WithHint("the archive was damaged in transit; delegate again")
	}
	f, err := os.Open(got.file)
	if err != nil {
		return fmt.Errorf("open the received workspace: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := archive.ExtractFrom(f, fi.Size(), workDir, t.Limits); err != nil {
		pe := Errorf(CodeSetupFailed, "cannot extract the workspace: %s", StripPaths(err, workDir))
		pe.Err = err
		return pe
	}
	// A head delegator's archive has a folder per resource; one it left
	// out (an empty directory) is made, so the agent finds it.
	for _, r := range p.Resources {
		if err := os.MkdirAll(filepath.Join(workDir, r.Name), 0o700); err != nil {
			return Errorf(CodeSetupFailed, "the workspace has no usable folder %q", r.Name)
		}
	}
	return nil
}

// Teardown packs the work directory as the result.
func (*ArchiveExecutor) Teardown(_ context.Context, _ string, workDir string, result io.Writer) (bool, error) {
	if result == nil {
		return false, nil
	}
	if _, err := archive.PackTo(result, workDir); err != nil {
		return false, err
	}
	return true, nil
}

// StripPaths is err's text with dir's path left out: host paths stay out
// of messages that reach the peer.
func StripPaths(err error, dir string) string {
	return strings.ReplaceAll(err.Error(), dir+"/", "")
}

// BlobStore is where the archive transport keeps what it sent; *lease.Store.
type BlobStore interface {
	PutBlob(key string, data []byte) error
	Blob(key string) ([]byte, error)
	DeleteBlob(key string) error
}

// ArchiveDelegator is the delegator side of the archive transport.
type ArchiveDelegator struct {
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
}

var _ DelegatorTransport = (*ArchiveDelegator)(nil)

// Name implements DelegatorTransport.
func (*ArchiveDelegator) Name() string { return TransportArchive }

func manifestKey(id string) string { return "archive-base/" + id }

func (t *ArchiveDelegator) packedFile(id string) string {
	return filepath.Join(t.StagingDir, id+".zip")
}

// Prepare packs the directory into a file in the staging directory, which
// START streams from, and remembers what it sent.
func (t *ArchiveDelegator) Prepare(_ context.Context, d Lent) (*WorkDirInfo, error) {
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
	if d.Dialect == DialectHead {
		folder = ResourceWorkspace // the head dialect's archive holds a folder per resource
	}
	p, err := archive.PackIn(io.MultiWriter(f, sum), d.LocalDir, folder)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		os.Remove(name)
		return nil, Errorf(CodeWorkspaceInvalid, "cannot pack the workspace: %v", err)
	}
	m, err := json.Marshal(p.Manifest)
	if err != nil {
		return nil, err
	}
	if err := t.Blobs.PutBlob(manifestKey(d.ID), m); err != nil {
		return nil, fmt.Errorf("remember what was sent: %w", err)
	}
	return &WorkDirInfo{
		Transport:     TransportArchive,
		WorkspaceFile: name,
		Checksum:      hex.EncodeToString(sum.Sum(nil)),
	}, nil
}

// Finish applies the result (ev.ResultFile, as the event reader decoded
// resultBase64) so that the directory ends as the executor left it. A ro
// delegation changes nothing; a rw one whose done event has no result (or
// one whose SHA-256 is not its resultChecksum) fails, changing nothing.
func (t *ArchiveDelegator) Finish(_ context.Context, d Lent, ev *Event) (*archive.Report, error) {
	if d.AccessMode != AccessRW {
		return &archive.Report{}, nil
	}
	// A rw delegation is never "completed, changes: none" for want of a
	// result: what the executor changed would be lost unsaid.
	switch {
	case ev.ResultFile == "" && (ev.RecommendedSnapshotID != "" || len(ev.SnapshotIDs) > 0):
		return nil, Errorf(CodeTaskFailed, "the executor named its result snapshot %s, but neither its snapshot event nor GET /result delivered it: nothing in the directory was changed",
			ev.RecommendedSnapshotID).WithHint("the executor may have dropped it; check its log")
	case ev.ResultFile == "":
		return nil, Errorf(CodeTaskFailed, "the executor's done event carries no result (resultBase64): nothing in the directory was changed").
			WithHint("the executor's changes, if any, did not come back; check its version")
	}
	if ev.resultErr != nil {
		return nil, fmt.Errorf("resultBase64 is %v", ev.resultErr)
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
	if ev.ResultChecksum != "" && !strings.EqualFold(ev.resultSum, ev.ResultChecksum) {
		kept := filepath.Join(t.ResultDir, d.ID+".zip")
		keepFile(ev.ResultFile, kept)
		return nil, fmt.Errorf("the result's SHA-256 is %s, not the resultChecksum the executor sent (%s): nothing was applied; the result is kept in %s",
			ev.resultSum, ev.ResultChecksum, kept)
	}
	raw, err := t.Blobs.Blob(manifestKey(d.ID))
	if err != nil {
		return nil, fmt.Errorf("what was sent is unknown: %w", err)
	}
	var base archive.Manifest
	if err := json.Unmarshal(raw, &base); err != nil {
		return nil, fmt.Errorf("what was sent is unreadable: %w", err)
	}
	opts := archive.ApplyOptions{
		StagingDir:     t.StagingDir,
		ConflictSuffix: ".awcp-" + shortID(d.ID),
		Limits:         t.Limits,
	}
	if d.Dialect == DialectHead {
		opts.Folder = ResourceWorkspace
	}
	rep, err := archive.ApplyFrom(d.LocalDir, base, f, fi.Size(), opts)
	if err != nil {
		kept := filepath.Join(t.ResultDir, d.ID+".zip")
		if werr := keepFile(ev.ResultFile, kept); werr != nil {
			return nil, fmt.Errorf("apply the result: %w (and it could not be kept: %v)", err, werr)
		}
		return nil, fmt.Errorf("apply the result: %w; the result is kept in %s", err, kept)
	}
	return rep, nil
}

// Cleanup forgets what was sent.
func (t *ArchiveDelegator) Cleanup(_ context.Context, d Lent) error {
	if err := os.Remove(t.packedFile(d.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return t.Blobs.DeleteBlob(manifestKey(d.ID))
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "dlg_")
	if len(id) > 8 {
		id = id[:8]
	}
	return id
}

// keepFile moves file to path, in a private directory, copying it if it is
// on another filesystem.
func keepFile(file, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if os.Rename(file, path) == nil {
		return nil
	}
	src, err := os.Open(file)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
