// Package lending is what the delegator's core and each of its transports
// (lendarchive, lendgit, lendlive) share about a lent directory: the
// export policy's tests of a path (hidden; protected from the executor's
// writes), how a file is kept in the delegator's private state, and where
// a staged review finds what was sent. It imports no transport and no
// part of the core, so that both may import it.
package lending

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/awcp/awcp/internal/untrusted"
	"github.com/awcp/awcp/lease"
	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// Hider is the test of a hidden path under policy; nil if it hides
// nothing.
func Hider(policy lease.ExportPolicy) func(rel string) bool {
	if len(policy.Hide) == 0 {
		return nil
	}
	return wire.NewMatcher(policy.Hide).Hidden
}

// Protected is what of a result the policy keeps the executor from
// writing, and why: git's control paths (ProtectGit), what lies outside
// the write scope (the directories above the scope are passed through,
// not written); nil if nothing.
func Protected(p lease.ExportPolicy) func(rel string) string {
	if !p.ProtectGit && p.WriteScope == "" {
		return nil
	}
	return func(rel string) string {
		switch {
		case p.ProtectGit && untrusted.GitControlled(rel):
			return "git control: not written for the executor"
		case p.WriteScope != "" && !wire.Within(rel, p.WriteScope) && !wire.Within(p.WriteScope, rel):
			return "outside the write scope " + p.WriteScope
		}
		return ""
	}
}

// ShortID is a delegation id's first eight characters: the suffix of the
// conflict copies its result leaves.
func ShortID(id string) string {
	id = strings.TrimPrefix(id, "dlg_")
	if len(id) > 8 {
		id = id[:8]
	}
	return id
}

// KeepFile moves file to path, in a private directory, copying it if it is
// on another filesystem.
func KeepFile(file, path string) error { return PlacePrivate(file, path, os.Rename) }

// LinkOrCopy makes dst, in a private directory, hold src's bytes: a hard
// link where it can.
func LinkOrCopy(src, dst string) error { return PlacePrivate(src, dst, os.Link) }

// PlacePrivate makes dst, in a private directory, hold src's bytes: by
// fast (a rename, a hard link) where it can, else by a copy.
func PlacePrivate(src, dst string, fast func(src, dst string) error) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if fast(src, dst) == nil {
		return nil
	}
	return copyPrivate(src, dst)
}

// copyPrivate copies src to dst, a new file of mode 600; nothing of dst
// is left if it fails.
func copyPrivate(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

// What a staged review of an archive's result reads in the staged
// directory: the archive sent, and its manifest.
const (
	SentArchive  = "base.zip"
	SentManifest = "manifest.json"
)

// KeepSent keeps the archive sent (packed) and its manifest in dir, the
// staged directory, where the review reads them.
func KeepSent(packed string, manifest []byte, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, SentManifest), manifest, 0o600); err != nil {
		return err
	}
	return LinkOrCopy(packed, filepath.Join(dir, SentArchive))
}

// ErrTunnelNotYet is the executor's answer to a reverse live mount's
// parked connection while no mount of the delegation waits for one.
var ErrTunnelNotYet = errors.New("the executor has no reverse mount waiting for this delegation yet")
