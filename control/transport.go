package control

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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
	// Setup fills p.WorkDir, which exists and is empty, from p.Info. An
	// error means SETUP_FAILED; the work dir is cleaned by the caller.
	Setup(ctx context.Context, p SetupParams) error
	// Teardown ends the transport's use of workDir before it is removed.
	// With wantResult it returns the result to send back in the done event
	// (empty for transports that write through).
	Teardown(ctx context.Context, id, workDir string, wantResult bool) (resultBase64 string, err error)
}

// SetupParams is what an executor transport sets a workspace up from.
type SetupParams struct {
	ID         string
	Info       *WorkDirInfo
	WorkDir    string
	AccessMode string
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

// Setup verifies the checksum and extracts the workspace.
func (t *ArchiveExecutor) Setup(_ context.Context, p SetupParams) error {
	info, workDir := p.Info, p.WorkDir
	data, err := base64.StdEncoding.DecodeString(info.WorkspaceBase64)
	if err != nil {
		return Errorf(CodeSetupFailed, "workDir.workspaceBase64 is not valid base64")
	}
	if sum := archive.Checksum(data); !strings.EqualFold(sum, info.Checksum) {
		return Errorf(CodeSetupFailed, "workspace checksum mismatch: got %s, START says %s", sum, info.Checksum).
			WithHint("the archive was damaged in transit; delegate again")
	}
	if err := archive.Extract(data, workDir, t.Limits); err != nil {
		pe := Errorf(CodeSetupFailed, "cannot extract the workspace: %s", stripPaths(err, workDir))
		pe.Err = err
		return pe
	}
	return nil
}

// Teardown packs the work directory as the result.
func (*ArchiveExecutor) Teardown(_ context.Context, _ string, workDir string, wantResult bool) (string, error) {
	if !wantResult {
		return "", nil
	}
	p, err := archive.Pack(workDir)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(p.Zip), nil
}

// stripPaths keeps host paths out of messages that reach the peer.
func stripPaths(err error, dir string) string {
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

// Prepare packs the directory and remembers what it sent.
func (t *ArchiveDelegator) Prepare(_ context.Context, d Lent) (*WorkDirInfo, error) {
	p, err := archive.Pack(d.LocalDir)
	if err != nil {
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
		Transport:       TransportArchive,
		WorkspaceBase64: base64.StdEncoding.EncodeToString(p.Zip),
		Checksum:        archive.Checksum(p.Zip),
	}, nil
}

// Finish applies resultBase64 so that the directory ends as the executor
// left it. A ro delegation, or a done event without a result, changes
// nothing.
func (t *ArchiveDelegator) Finish(_ context.Context, d Lent, ev *Event) (*archive.Report, error) {
	if d.AccessMode != AccessRW || ev.ResultBase64 == "" {
		return &archive.Report{}, nil
	}
	data, err := base64.StdEncoding.DecodeString(ev.ResultBase64)
	if err != nil {
		return nil, errors.New("resultBase64 is not valid base64")
	}
	raw, err := t.Blobs.Blob(manifestKey(d.ID))
	if err != nil {
		return nil, fmt.Errorf("what was sent is unknown: %w", err)
	}
	var base archive.Manifest
	if err := json.Unmarshal(raw, &base); err != nil {
		return nil, fmt.Errorf("what was sent is unreadable: %w", err)
	}
	rep, err := archive.Apply(d.LocalDir, base, data, archive.ApplyOptions{
		StagingDir:     t.StagingDir,
		ConflictSuffix: ".awcp-" + shortID(d.ID),
		Limits:         t.Limits,
	})
	if err != nil {
		kept := filepath.Join(t.ResultDir, d.ID+".zip")
		if werr := writePrivate(kept, data); werr != nil {
			return nil, fmt.Errorf("apply the result: %w (and it could not be kept: %v)", err, werr)
		}
		return nil, fmt.Errorf("apply the result: %w; the result is kept in %s", err, kept)
	}
	return rep, nil
}

// Cleanup forgets what was sent.
func (t *ArchiveDelegator) Cleanup(_ context.Context, d Lent) error {
	return t.Blobs.DeleteBlob(manifestKey(d.ID))
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "dlg_")
	if len(id) > 8 {
		id = id[:8]
	}
	return id
}

// writePrivate writes data to path, 0600 in a 0700 directory.
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}
