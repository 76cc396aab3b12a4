// Package lendgit is the delegator's side of the git transport: the
// export view committed into a bare repository of the delegator's own,
// lent over the live mount's SSH server (lendlive) for the executor to
// clone and push back to; what it pushes is applied three-way as the
// archive transport's result is (lendarchive), or replayed on a branch.
package lendgit

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator/lendarchive"
	"github.com/awcp/awcp/control/delegator/lending"
	"github.com/awcp/awcp/control/delegator/lendlive"
	"github.com/awcp/awcp/control/delegator/review"
	"github.com/awcp/awcp/internal/gitrun"
	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// Transport is the delegator side of the git transport: the export
// view (what the archive would send, hide patterns applied) becomes the
// one commit of a bare repository of this delegator's own — never the
// owner's, so no object of a hidden path or of the owner's history exists
// in it to be fetched — lent over the embedded SSH server to the
// delegation's certificate alone (sshd/git.go). The executor clones it,
// runs its agent on its own disk, and pushes what the agent did to
// refs/heads/result; that is applied three-way as an archive's result is.
type Transport struct {
	Live    *lendlive.Transport    // the SSH server, the certificates, reverse connections
	Archive *lendarchive.Transport // the export view, and the three-way apply of the result
	// RepoDir holds the lent repositories, one a delegation.
	RepoDir string
}

var _ control.DelegatorTransport = (*Transport)(nil)

// Name implements control.DelegatorTransport.
func (*Transport) Name() string { return control.TransportGit }

func (t *Transport) repo(id string) string { return filepath.Join(t.RepoDir, id+".git") }

// The lent repository's branches: the export view, and what the executor
// pushes back; baseFile, in it, records the view's commit (no push moves
// a file), and keptRepo is where a staged delegation's repository waits
// with its result for `apply --branch` (Cleanup moves it there).
const (
	gitBaseRef   = "refs/heads/awcp"
	gitResultRef = "refs/heads/result"
	baseFile     = "awcp-base"
	keptRepo     = "repo.git"
)

// Replayer replays what the git transport kept of a staged delegation
// (delegator.BranchReplayer): it needs no SSH server, and `apply
// --branch` runs where none does.
type Replayer struct{}

// ReplayBranch records, on a new branch of d's directory, the agent's own
// commits from the repository a staged delegation kept in stagedDir; ok
// is false where none was kept (the result is then applied as a diff).
func (Replayer) ReplayBranch(ctx context.Context, d control.Lent, stagedDir, branch string) (commit string, commits int, ok bool, err error) {
	repo := filepath.Join(stagedDir, keptRepo)
	if _, err := os.Stat(repo); err != nil {
		return "", 0, false, nil
	}
	commit, commits, err = branchFromRepo(ctx, repo, d.LocalDir, branch, lending.Hider(gitView(d).Policy))
	return commit, commits, true, err
}

// branchFromRepo records the agent's commits of the kept repository repo
// on a new branch name of dir's work tree (review.BranchFromCommits).
func branchFromRepo(ctx context.Context, repo, dir, name string, hide func(string) bool) (string, int, error) {
	base, err := os.ReadFile(filepath.Join(repo, baseFile))
	if err != nil {
		return "", 0, fmt.Errorf("the lent repository's base is unknown: %w", err)
	}
	return review.BranchFromCommits(ctx, repo, strings.TrimSpace(string(base)), gitResultRef, dir, name, hide)
}

// Prepare packs the export view as the archive transport does (its
// manifest is the base of the three-way apply), commits it into a new
// bare repository, and lends that repository to the delegation.
func (t *Transport) Prepare(ctx context.Context, d control.Lent) (*control.WorkDirInfo, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, control.Errorf(control.CodeDepMissing, "the git transport needs git on this machine").WithHint("install git, or use --transport archive")
	}
	d = gitView(d)
	packed, err := t.Archive.PrepareStored(ctx, d)
	if err != nil {
		return nil, err
	}
	repo := t.repo(d.ID)
	if err := t.commitView(ctx, packed.WorkspaceFile, repo, d); err != nil {
		os.RemoveAll(repo)
		return nil, control.Errorf(control.CodeWorkspaceInvalid, "cannot make the repository to lend: %v", err)
	}
	t.lendRepo(d)
	info, err := t.Live.Prepare(ctx, d)
	if err != nil {
		return nil, err
	}
	info.Transport, info.ExportLocator = control.TransportGit, sshd.Locator(d.ID)
	return info, nil
}

// gitView is d as the git transport lends it: never the owner's own .git
// (the clone has its own; the owner's history, and any object of a hidden
// path in it, stays here), whatever the hide patterns say.
func gitView(d control.Lent) control.Lent {
	d.Policy.Hide = append(slices.Clip(d.Policy.Hide), ".git")
	return d
}

// git runs git on the lent repository (gitrun: nothing of this machine's
// configuration, no hooks); commits it makes are awcp's.
func git(ctx context.Context, repo string, stdin io.Reader, args ...string) ([]byte, error) {
	return gitrun.Run(ctx, "", []string{"GIT_AUTHOR_NAME=awcp", "GIT_AUTHOR_EMAIL=awcp@localhost", "GIT_COMMITTER_NAME=awcp", "GIT_COMMITTER_EMAIL=awcp@localhost"},
		stdin, append([]string{"--git-dir=" + repo}, args...)...)
}

// commitView makes repo, a bare repository whose gitBaseRef is one commit
// of the files in the ZIP packed (under the head dialect's folder for its
// dialect): without a parent, or with d.GitHistory, on top of the last
// commits of the directory's branch, fetched shallow (their paths were
// checked at admission: admitLentHistory).
func (t *Transport) commitView(ctx context.Context, packed, repo string, d control.Lent) error {
	if err := os.MkdirAll(t.RepoDir, 0o700); err != nil {
		return err
	}
	if _, err := gitrun.Run(ctx, "", nil, nil, "init", "-q", "--bare", repo); err != nil {
		return err
	}
	parent := ""
	if d.GitHistory > 0 {
		if _, err := git(ctx, repo, nil, "-c", "protocol.file.allow=always", "fetch", "-q", "--depth="+strconv.Itoa(d.GitHistory),
			"file://"+d.LocalDir, "HEAD"); err != nil {
			return fmt.Errorf("take the branch's last %d commits: %w", d.GitHistory, err)
		}
		head, err := git(ctx, repo, nil, "rev-parse", "FETCH_HEAD")
		if err != nil {
			return err
		}
		parent = strings.TrimSpace(string(head))
	}
	inFolder := d.Dialect == control.DialectHead
	zr, err := zip.OpenReader(packed)
	if err != nil {
		return err
	}
	defer zr.Close()
	// git fast-import, fed from the ZIP as it is read: nothing of the
	// view is written anywhere but into the repository's objects.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		// No delta is tried for a large file: a blob of the one commit
		// against another costs seconds of CPU for a 64 MiB file and
		// saves nothing.
		_, err := git(ctx, repo, pr, "fast-import", "--quiet", "--done", "--big-file-threshold=1m")
		pr.CloseWithError(err)
		done <- err
	}()
	err = writeImport(pw, zr, inFolder, parent)
	pw.CloseWithError(err)
	if ierr := <-done; err == nil {
		err = ierr
	}
	if err != nil {
		return err
	}
	if _, err := git(ctx, repo, nil, "symbolic-ref", "HEAD", gitBaseRef); err != nil {
		return err
	}
	// The base as a file, which no push can move (the ref is hidden from
	// pushes too: sshd/git.go).
	base, err := git(ctx, repo, nil, "rev-parse", gitBaseRef)
	if err != nil {
		return err
	}
	// Shown to the executor's push, which then sends only what is new.
	if _, err := git(ctx, repo, nil, "update-ref", sshd.GitHaveRef, strings.TrimSpace(string(base))); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(repo, baseFile), base, 0o600)
}

// writeImport writes a fast-import stream of one commit of zr's files,
// on parent if there is one.
func writeImport(w io.Writer, zr *zip.ReadCloser, inFolder bool, parent string) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	msg := "the lent directory (awcp export view)\n"
	fmt.Fprintf(bw, "commit %s\ncommitter awcp <awcp@localhost> 0 +0000\ndata %d\n%s", gitBaseRef, len(msg), msg)
	if parent != "" {
		// On the branch's last commit, with the view's files alone.
		fmt.Fprintf(bw, "from %s\ndeleteall\n", parent)
	}
	for _, f := range zr.File {
		name := f.Name
		if inFolder {
			rest, ok := strings.CutPrefix(name, control.ResourceWorkspace+"/")
			if !ok {
				continue
			}
			name = rest
		}
		mode := f.Mode()
		if mode.IsDir() || name == "" || strings.HasSuffix(name, "/") {
			continue
		}
		gitMode := "100644"
		switch {
		case mode&os.ModeSymlink != 0:
			gitMode = "120000"
		case mode&0o111 != 0:
			gitMode = "100755"
		case !mode.IsRegular():
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		fmt.Fprintf(bw, "M %s inline %s\ndata %d\n", gitMode, cQuote(name), f.UncompressedSize64)
		n, err := io.Copy(bw, rc)
		rc.Close()
		if err != nil {
			return err
		}
		if uint64(n) != f.UncompressedSize64 {
			return fmt.Errorf("%s: %d bytes, its header says %d", name, n, f.UncompressedSize64)
		}
		bw.WriteString("\n")
	}
	bw.WriteString("done\n")
	return bw.Flush()
}

// Finish reads what the executor pushed to gitResultRef, packs its tree
// (bounded as an archive's extraction is) as an archive result, and
// applies that three-way against the export view: the owner's edits made
// meanwhile stay, and a path both changed is a conflict.
func (t *Transport) Finish(ctx context.Context, d control.Lent, ev *control.Event) (*archive.Report, error) {
	if d.AccessMode != control.AccessRW {
		return &archive.Report{}, nil
	}
	d = gitView(d)
	done := *ev
	drop, err := t.PackResult(ctx, d, &done)
	if err != nil {
		return nil, err
	}
	defer drop()
	return t.Archive.Finish(ctx, d, &done)
}

// zipResult writes a result tree's entries as an archive result ZIP: its files and
// symlinks as they are in git (no checkout: no attribute of the tree
// converts a byte), a directory entry for each of their parents, and the
// base's empty directories, which git cannot carry (never deleted for
// that). The paths are the executor's, checked again by the apply.
func (t *Transport) zipResult(ctx context.Context, repo string, entries []treeEntry, out string, d control.Lent) error {
	prefix := ""
	if d.Dialect == control.DialectHead {
		prefix = control.ResourceWorkspace + "/"
	}
	f, err := os.OpenFile(out, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	dirs := map[string]bool{}
	addDir := func(dir string) error {
		for ; dir != "." && dir != "" && !dirs[dir]; dir = filepath.Dir(dir) {
			dirs[dir] = true
			hdr := &zip.FileHeader{Name: prefix + dir + "/", Method: zip.Store}
			hdr.SetMode(os.ModeDir | 0o755)
			if _, err := zw.CreateHeader(hdr); err != nil {
				return err
			}
		}
		return nil
	}
	if prefix != "" {
		hdr := &zip.FileHeader{Name: prefix, Method: zip.Store}
		hdr.SetMode(os.ModeDir | 0o755)
		if _, err := zw.CreateHeader(hdr); err != nil {
			return err
		}
	}
	if base, err := t.baseManifest(d.ID); err == nil {
		for _, p := range emptyDirs(base) {
			if err := addDir(p); err != nil {
				return err
			}
		}
	}
	// One cat-file for every blob. Returning early kills it (the context)
	// before it is waited for, and the feeder, whose pipe then breaks, is
	// waited for too: neither is left blocked on the other.
	catCtx, stop := context.WithCancel(ctx)
	cat := exec.CommandContext(catCtx, "git", "--git-dir="+repo, "cat-file", "--batch")
	cat.Env = gitrun.Env()
	in, err := cat.StdinPipe()
	if err != nil {
		stop()
		return err
	}
	outp, err := cat.StdoutPipe()
	if err != nil {
		stop()
		return err
	}
	if err := cat.Start(); err != nil {
		stop()
		return err
	}
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		bw := bufio.NewWriter(in)
		for _, e := range entries {
			if _, err := fmt.Fprintln(bw, e.sha); err != nil {
				break
			}
		}
		bw.Flush()
		in.Close()
	}()
	defer func() { stop(); <-fed; cat.Wait() }()
	r := bufio.NewReader(outp)
	for _, e := range entries {
		head, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		h := strings.Fields(head)
		if len(h) != 3 || h[0] != e.sha || h[1] != "blob" {
			return fmt.Errorf("%s: unexpected object %q", e.path, strings.TrimSpace(head))
		}
		size, err := strconv.ParseInt(h[2], 10, 64)
		if err != nil {
			return err
		}
		if err := addDir(filepath.Dir(e.path)); err != nil {
			return err
		}
		// Stored: the ZIP is read here, by the apply; deflating it cost a
		// second and a half of a 64 MiB tree's return.
		hdr := &zip.FileHeader{Name: prefix + e.path, Method: zip.Store}
		switch e.mode {
		case "120000":
			hdr.SetMode(os.ModeSymlink | 0o777)
		case "100755":
			hdr.SetMode(0o755)
		default:
			hdr.SetMode(0o644)
		}
		w, err := zw.CreateHeader(hdr)
		if err != nil {
			return err
		}
		if _, err := io.CopyN(w, r, size); err != nil {
			return err
		}
		if _, err := r.Discard(1); err != nil { // the newline after each object
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// emptyDirs are m's directories with nothing in them.
func emptyDirs(m archive.Manifest) []string {
	parents := map[string]bool{}
	for p := range m {
		for d := filepath.Dir(p); d != "." && d != "/"; d = filepath.Dir(d) {
			parents[d] = true
		}
	}
	var out []string
	for p, e := range m {
		if e.Kind == archive.KindDir && !parents[p] {
			out = append(out, p)
		}
	}
	return out
}

// baseManifest is what was lent to delegation id (the archive's record).
func (t *Transport) baseManifest(id string) (archive.Manifest, error) {
	raw, err := t.Archive.Blobs.Blob(lendarchive.ManifestKey(id))
	if err != nil {
		return nil, err
	}
	var m archive.Manifest
	return m, json.Unmarshal(raw, &m)
}

// PackResult packs what the executor pushed as ev.ResultFile; drop removes
// the file.
func (t *Transport) PackResult(ctx context.Context, d control.Lent, ev *control.Event) (func(), error) {
	repo := t.repo(d.ID)
	sha, err := git(ctx, repo, nil, "rev-parse", "--verify", "-q", gitResultRef+"^{commit}")
	if err != nil {
		return nil, control.Errorf(control.CodeTaskFailed, "the executor pushed no result to the lent repository: nothing was applied or kept").WithHint("the executor's changes, if any, did not come back; check its log")
	}
	entries, err := t.resultTree(ctx, repo, strings.TrimSpace(string(sha)))
	if err != nil {
		return nil, err
	}
	packed := filepath.Join(t.RepoDir, d.ID+".result.zip")
	if err := t.zipResult(ctx, repo, entries, packed, d); err != nil {
		os.Remove(packed)
		return nil, fmt.Errorf("pack the result: %w", err)
	}
	ev.ResultFile, ev.ResultChecksum, ev.ResultErr = packed, "", nil
	return func() { os.Remove(packed) }, nil
}

// treeEntry is a blob of a result's tree, as ls-tree -l lists it.
type treeEntry struct {
	mode, sha, path string
	size            int64
}

// resultTree lists commit's blobs, refusing a tree past what an archive's
// extraction takes: a push is bounded in bytes, but objects compress.
// Submodules' commits carry nothing and are left out.
func (t *Transport) resultTree(ctx context.Context, repo, commit string) ([]treeEntry, error) {
	out, err := git(ctx, repo, nil, "ls-tree", "-r", "-l", "-z", "--full-tree", commit)
	if err != nil {
		return nil, err
	}
	lim := t.Archive.Limits
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = 1 << 30
	}
	if lim.MaxEntries <= 0 {
		lim.MaxEntries = 100_000
	}
	var entries []treeEntry
	var total int64
	for _, rec := range bytes.Split(out, []byte{0}) {
		// mode type object size, a tab, the path.
		meta, path, ok := strings.Cut(string(rec), "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 || f[1] != "blob" {
			continue
		}
		size, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: size %q", path, f[3])
		}
		entries = append(entries, treeEntry{mode: f[0], sha: f[2], path: path, size: size})
		total += size
	}
	if len(entries) > lim.MaxEntries || total > lim.MaxBytes {
		return nil, control.Errorf(control.CodeTaskFailed, "the executor's result holds %d files, %d bytes: past what is taken (%d files, %d bytes); nothing was applied", len(entries), total, lim.MaxEntries, lim.MaxBytes)
	}
	return entries, nil
}

// Cleanup revokes the grant and removes the lent repository — or, for a
// staged result, keeps it with the result (its commits go on a branch
// with `apply --branch`; it goes with the staged result).
func (t *Transport) Cleanup(ctx context.Context, d control.Lent) error {
	err := t.Live.Cleanup(ctx, d)
	repo := t.repo(d.ID)
	if d.Snapshot == lease.SnapshotStaged && d.StagedDir != "" && d.AccessMode == control.AccessRW {
		if _, serr := os.Stat(d.StagedDir); serr == nil {
			if rerr := os.Rename(repo, filepath.Join(d.StagedDir, keptRepo)); rerr == nil {
				repo = ""
			}
		}
	}
	if repo != "" {
		os.RemoveAll(repo)
	}
	if aerr := t.Archive.Cleanup(ctx, d); err == nil {
		err = aerr
	}
	return err
}

// cQuote is path as fast-import reads it: as it is, unless it must be
// C-quoted (a leading quote, a newline, a control byte or a backslash),
// then quoted with octal escapes.
func cQuote(path string) string {
	needs := strings.HasPrefix(path, `"`)
	for i := 0; i < len(path) && !needs; i++ {
		needs = path[i] < 0x20 || path[i] == 0x7f || path[i] == '\\'
	}
	if !needs {
		return path
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

var _ control.Renewer = (*Transport)(nil)

// Renew moves the repository's grant to the lease's new end and issues a
// certificate valid until then: the push at the end needs one.
func (t *Transport) Renew(ctx context.Context, d control.Lent) (*control.Credential, error) {
	return t.Live.Renew(ctx, d)
}

// Resume lends the repository again to a delegation followed anew (this
// process restarted while it ran): a grant lives in the server's memory,
// the repository on disk.
func (t *Transport) Resume(ctx context.Context, d control.Lent) {
	repo := t.repo(d.ID)
	if _, err := os.Stat(repo); err != nil {
		t.Live.Log().Warn("git transport not resumed: its repository is gone", "delegation", d.ID)
		return
	}
	t.lendRepo(d)
	t.Live.Resume(ctx, d)
}

// lendRepo has the SSH server lend d's repository instead of its
// directory, from its next grant on (lendlive.Transport.grant).
func (t *Transport) lendRepo(d control.Lent) {
	t.Live.LendRepo(d.ID, &sshd.GitExport{Repo: t.repo(d.ID), MaxReceive: d.Policy.MaxWriteBytes})
}
