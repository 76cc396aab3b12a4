package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
)

// ArchiveExecutor is the executor side of the archive transport.
type ArchiveExecutor struct {
	// Limits bound extraction. Zero fields take archive's defaults.
	Limits archive.Limits
}

// Name implements ExecutorTransport.
func (*ArchiveExecutor) Name() string { return control.TransportArchive }

// Available implements ExecutorTransport: the archive transport needs nothing.
func (*ArchiveExecutor) Available() error { return nil }

// Setup verifies the checksum and extracts the workspace from the file the
// START reader decoded workspaceBase64 into.
func (t *ArchiveExecutor) Setup(_ context.Context, p control.SetupParams) error {
	info, workDir := p.Info, p.WorkDir
	got := info.Received
	if got == nil {
		return errors.New("archive setup: the workspace was not received into a file")
	}
	if got.Bad != nil {
		return control.Errorf(control.CodeSetupFailed, "workDir.workspaceBase64 is %v", got.Bad)
	}
	if !strings.EqualFold(got.Sum, info.Checksum) {
		return control.Errorf(control.CodeSetupFailed, "workspace checksum mismatch: got %s, START says %s", got.Sum, info.Checksum).
			WithHint("the archive was damaged in transit; delegate again")
	}
	f, err := os.Open(got.File)
	if err != nil {
		return fmt.Errorf("open the received workspace: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := archive.ExtractFrom(f, fi.Size(), workDir, t.Limits); err != nil {
		pe := control.Errorf(control.CodeSetupFailed, "cannot extract the workspace: %s", StripPaths(err, workDir))
		pe.Err = err
		return pe
	}
	// A head delegator's archive has a folder per resource; one it left
	// out (an empty directory) is made, so the agent finds it.
	for _, r := range p.Resources {
		if err := os.MkdirAll(filepath.Join(workDir, r.Name), 0o700); err != nil {
			return control.Errorf(control.CodeSetupFailed, "the workspace has no usable folder %q", r.Name)
		}
	}
	if p.Agent != nil {
		if err := chownTree(workDir, *p.Agent); err != nil {
			return fmt.Errorf("give the workspace to the agent's user: %w", err)
		}
		if len(p.Resources) > 0 {
			// A head environment's root is not the agent's: it works in
			// a resource folder, bound in its sandbox at its place. Left
			// the daemon's, the root stays passable where an operator's
			// idmapped grant holds the work root — through which an
			// inode of the agent's has no owner, and a 0700 one (the
			// reference's archives carry their folder's mode) stopped
			// the sandbox binding the folder: "permission denied".
			if err := os.Lchown(workDir, os.Geteuid(), os.Getegid()); err != nil {
				return err
			}
		}
	}
	return nil
}

// chownTree makes everything under dir u's, links themselves and not what
// they name. Nothing else writes there yet: the agent starts after.
func chownTree(dir string, u control.LocalUser) error {
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(u.UID), int(u.GID))
	})
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

var _ control.ExecutorTransport = (*ArchiveExecutor)(nil)
