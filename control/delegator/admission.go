package delegator

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	wire "github.com/awcp/awcp/sshd/sftpwire"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// AdmissionLimits are the admission checks of spec §3.1/§6.2. A zero field
// takes the default of the transport: the spec's for the archive, which
// copies the tree (ArchiveLimits), and far larger ones for the live mount,
// which copies nothing (LiveLimits).
type AdmissionLimits struct {
	MaxTotalBytes int64 `json:"maxTotalBytes,omitempty"`
	MaxFileCount  int64 `json:"maxFileCount,omitempty"`
	MaxFileBytes  int64 `json:"maxFileBytes,omitempty"`
}

var (
	// ArchiveLimits are the spec's: 100 MB, 10,000 files, 50 MB a file.
	ArchiveLimits = AdmissionLimits{MaxTotalBytes: 100 << 20, MaxFileCount: 10_000, MaxFileBytes: 50 << 20}
	// LiveLimits lend an ordinary monorepo (the Linux kernel has about
	// 80,000 files): they stop a mistake — lending a home directory or
	// the root — not a large tree.
	LiveLimits = AdmissionLimits{MaxTotalBytes: 50 << 30, MaxFileCount: 1_000_000, MaxFileBytes: 10 << 30}
)

// over returns l with its zero fields taken from defaults.
func (l AdmissionLimits) over(defaults AdmissionLimits) AdmissionLimits {
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = defaults.MaxTotalBytes
	}
	if l.MaxFileCount <= 0 {
		l.MaxFileCount = defaults.MaxFileCount
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = defaults.MaxFileBytes
	}
	return l
}

func (l AdmissionLimits) withDefaults() AdmissionLimits { return l.over(ArchiveLimits) }

// limitsHint names the flags that raise the limits, after what to do
// without them.
func limitsHint(first string) string {
	return first + "; or raise the limit: --max-files, --max-bytes, --max-file-bytes (the archive's defaults are the spec's, 10000 files and 100M; " +
		"a live mount's, 1000000 files and 50G); --hide keeps paths out"
}

// WorkspaceStats is what admission counted.
type WorkspaceStats struct {
	Files int64
	Bytes int64
	// Hidden are the first paths hidden by the export's patterns (at most
	// maxHiddenListed), HiddenCount all of them.
	Hidden      []string
	HiddenCount int
	// Repos are the git repositories lent (the directories holding a
	// .git directory that is not hidden; "" for the workspace itself).
	Repos []string
	// Largest are its largest regular files, largest first (at most
	// maxLargestNamed; of those counted, where the walk stopped early).
	Largest []SizedFile
}

// maxHiddenListed is how many hidden paths admission names.
const maxHiddenListed = 10

// hiddenNote says what admission found hidden, for the delegation's notes.
func hiddenNote(st WorkspaceStats) string {
	if st.HiddenCount == 0 {
		return ""
	}
	more := ""
	if st.HiddenCount > len(st.Hidden) {
		more = fmt.Sprintf(" and %d more", st.HiddenCount-len(st.Hidden))
	}
	return fmt.Sprintf("hidden from the executor (export policy): %s%s", strings.Join(st.Hidden, ", "), more)
}

// Admit checks dir before anything is sent and returns its physical path
// (absolute, symlinks resolved). node_modules/ and .git/ are not counted,
// and symlinks are not followed. Failures are *ProtocolError with the
// spec's codes and hints.
// Paths hide's patterns match (sftpwire.Hidden) are not counted, and are
// reported in the stats.
func Admit(dir string, lim AdmissionLimits, hide []string) (string, WorkspaceStats, error) {
	lim = lim.withDefaults()
	var st WorkspaceStats
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", st, control.Errorf(control.CodeWorkspaceInvalid, "cannot resolve %s: %v", dir, err)
	}
	phys, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", st, control.Errorf(control.CodeWorkspaceNotFound, "workspace %s does not exist", dir).
			WithHint("check the path; relative paths are resolved from the current directory")
	}
	if err != nil {
		return "", st, control.Errorf(control.CodeWorkspaceInvalid, "cannot resolve %s: %v", dir, rootCause(err))
	}
	info, err := os.Stat(phys)
	if err != nil {
		return "", st, control.Errorf(control.CodeWorkspaceInvalid, "cannot read %s: %v", dir, rootCause(err))
	}
	if !info.IsDir() {
		return "", st, control.Errorf(control.CodeWorkspaceInvalid, "workspace %s is not a directory", dir).
			WithHint("delegate the directory that contains it")
	}
	st, err = admitWalk(phys, wire.NewMatcher(hide), lim)
	if err != nil {
		return "", st, control.Errorf(control.CodeWorkspaceInvalid, "cannot read the workspace: %v", rootCause(err)).
			WithHint("make sure every file in it is readable")
	}
	switch {
	case st.Files > lim.MaxFileCount:
		return "", st, control.Errorf(control.CodeWorkspaceTooLarge, "Workspace exceeds file count limit: more than %d files", lim.MaxFileCount).
			WithHint(limitsHint("Consider excluding node_modules, build artifacts, or data directories, or selecting a smaller subdirectory"))
	case st.Bytes > lim.MaxTotalBytes:
		return "", st, control.Errorf(control.CodeWorkspaceTooLarge, "Workspace exceeds size limits: %s > %s; the largest files: %s",
			HumanBytes(st.Bytes), HumanBytes(lim.MaxTotalBytes), largestList(st.Largest)).
			WithHint(limitsHint(hideLargest(st.Largest, 0) + " keeps the largest out; or lend it live (--transport live), which sends only what the agent reads"))
	case len(st.Largest) > 0 && st.Largest[0].Size > lim.MaxFileBytes:
		f := st.Largest[0]
		return "", st, control.Errorf(control.CodeWorkspaceTooLarge, "File %s is too large: %s > %s", f.Name, HumanBytes(f.Size), HumanBytes(lim.MaxFileBytes)).
			WithHint(limitsHint(hideLargest(st.Largest, lim.MaxFileBytes) + " keeps it out; or lend it live (--transport live)"))
	}
	return phys, st, nil
}

// largestList names files with their sizes: "data.bin (80M), model.pt (30M)".
func largestList(files []SizedFile) string {
	s := make([]string, len(files))
	for i, f := range files {
		s[i] = fmt.Sprintf("%s (%s)", f.Name, HumanBytes(f.Size))
	}
	return strings.Join(s, ", ")
}

// hideLargest is the --hide flags that keep out files (those over
// atLeast, where it is not 0), as the command line takes them.
func hideLargest(files []SizedFile, atLeast int64) string {
	var s []string
	for _, f := range files {
		if atLeast == 0 || f.Size > atLeast {
			s = append(s, "--hide "+hideArg(f.Name))
		}
	}
	return strings.Join(s, " ")
}

// hideArg is name as a --hide pattern (its pattern characters escaped)
// that a shell passes on unchanged: quoted where it holds more than
// letters, digits and ./_-.
func hideArg(name string) string {
	var pat strings.Builder
	for _, r := range name {
		if strings.ContainsRune(`*?[\`, r) {
			pat.WriteByte('\\')
		}
		pat.WriteRune(r)
	}
	arg := pat.String()
	if strings.Trim(arg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789./_-") == "" {
		return arg
	}
	return "'" + strings.ReplaceAll(arg, "'", `'\''`) + "'"
}

func rootCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// HumanBytes is n bytes as people read it: 3B, 74KB, 500MB.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// AdmitScopes checks the scopes of one task split among executors, all
// of them before any is started: each a directory under dir, given
// relative to it, and no two overlapping (one would hold the other's
// files, and be refused as busy once the first had started and changed
// dir). The error names the pair.
func AdmitScopes(dir string, scopes []string) error {
	clean := make([]string, len(scopes))
	for i, sc := range scopes {
		s := path.Clean(filepath.ToSlash(sc))
		if path.IsAbs(s) || s == "." || s == ".." || strings.HasPrefix(s, "../") {
			return control.Errorf(control.CodeWorkspaceInvalid, "scope %q: a directory under the one lent, given relative to it", sc)
		}
		if fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(s))); err != nil || !fi.IsDir() {
			return control.Errorf(control.CodeWorkspaceInvalid, "scope %q: no such directory in %s", sc, dir)
		}
		for j, prev := range clean[:i] {
			if lease.Overlaps(prev, s) {
				return control.Errorf(control.CodeWorkspaceInvalid, "scopes %q and %q overlap: each part of the directory is one executor's", scopes[j], sc).
					WithHint("give scopes none of which holds another; nothing was started")
			}
		}
		clean[i] = s
	}
	return nil
}
