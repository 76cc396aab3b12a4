package executor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/gitrun"
)

// The reference implementation's git transport: its START names a remote
// of a third party (repoUrl), the branch and commit to start from, and
// that remote's credential; the executor clones from it, and pushes what
// the agent did to a branch awcp/{delegationId} of it, then names the
// branch and commit in its snapshot (JSON, which its delegator merges).
// Taken only from remotes the executor's operator allows
// (GitExecutor.AllowRemotes): a START may name any URL, and the
// executor's git would fetch from and push to wherever it says, with the
// executor's network.

// remoteAllowed says whether url starts with one of the allowed prefixes.
func (t *GitExecutor) remoteAllowed(url string) bool {
	for _, p := range t.AllowRemotes {
		if p != "" && strings.HasPrefix(url, p) {
			return true
		}
	}
	return false
}

// remoteAuth is the environment that gives git the START's credential for
// the remote's URL: an HTTP header from git's own configuration variables
// in the environment (never an argument, which every local user sees in
// ps; never the clone's configuration, which the agent reads).
func remoteAuth(info *control.WorkDirInfo) ([]string, error) {
	a := info.Auth
	switch {
	case a == nil || a.Type == "none" || a.Type == "":
		return nil, nil
	case a.Type == "token" && a.Token != "":
		basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + a.Token))
		return []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic " + basic}, nil
	}
	return nil, control.Errorf(control.CodeSetupFailed, "the git remote's credential of type %q is not taken by this executor", a.Type).
		WithHint("lend over a token or no credential, or use awcp's own git transport (over the delegation's SSH connection)")
}

// setupRemote clones the START's remote for the reference's git transport.
func (t *GitExecutor) setupRemote(ctx context.Context, p control.SetupParams) error {
	info := p.Info
	if !t.remoteAllowed(info.RepoURL) {
		return control.Errorf(control.CodeSetupFailed, "the delegator's git remote %s is not one this executor takes", info.RepoURL).
			WithHint("its operator allows remotes with awcp-fs serve --git-remote-allow URL-PREFIX")
	}
	auth, err := remoteAuth(info)
	if err != nil {
		return err
	}
	dir := p.WorkDir
	switch len(p.Resources) {
	case 0:
	case 1:
		// The head dialect's environment: the clone is its one resource.
		dir = filepath.Join(p.WorkDir, p.Resources[0].Name)
	default:
		return control.Errorf(control.CodeSetupFailed, "the git transport lends one repository; the INVITE named %d resources", len(p.Resources))
	}
	if _, err := gitrun.Run(ctx, "", auth, nil, "clone", "-q", "--branch", info.BaseBranch, "--single-branch", "--", info.RepoURL, dir); err != nil {
		return &control.ProtocolError{Code: control.CodeSetupFailed, Message: "cannot clone the delegator's remote: " + StripPaths(err, p.WorkDir), Err: err}
	}
	head, err := gitrun.Run(ctx, "", nil, nil, "--git-dir="+filepath.Join(dir, ".git"), "rev-parse", "HEAD")
	if err != nil {
		return &control.ProtocolError{Code: control.CodeSetupFailed, Message: "the clone has no commit", Err: err}
	}
	lend := &gitLend{info: info, base: strings.TrimSpace(string(head)), remote: info.RepoURL, auth: auth, baseCommit: info.BaseCommit, dir: dir}
	if lend.baseCommit == "" {
		lend.baseCommit = lend.base
	}
	t.mu.Lock()
	if t.lends == nil {
		t.lends = map[string]*gitLend{}
	}
	t.lends[p.ID] = lend
	t.mu.Unlock()
	if p.Agent != nil {
		if err := chownTree(p.WorkDir, *p.Agent); err != nil {
			t.drop(p.ID)
			return fmt.Errorf("hand the clone to the agent's user: %w", err)
		}
	}
	t.logger().Info("git transport (the reference's remote): cloned", "delegation", p.ID, "remote", info.RepoURL, "base", lend.base)
	return nil
}

// remoteSnapshot is the reference's GitSnapshotInfo.
type remoteSnapshot struct {
	Branch       string   `json:"branch"`
	CommitHash   string   `json:"commitHash"`
	BaseCommit   string   `json:"baseCommit"`
	ChangedFiles []string `json:"changedFiles"`
}

// pushRemote pushes final (a commit of the daemon's own repository repo)
// to the remote's branch awcp/{id}, and writes the snapshot naming it.
func (t *GitExecutor) pushRemote(ctx context.Context, id, repo, final string, lend *gitLend, result io.Writer) error {
	branch := "awcp/" + id
	if _, err := gitrun.Run(ctx, "", lend.auth, nil, "--git-dir="+repo, "push", "-q", "--", lend.remote, final+":refs/heads/"+branch); err != nil {
		return &control.ProtocolError{Code: control.CodeTaskFailed, Message: "the result could not be pushed to the delegator's remote: " + err.Error(), Err: err}
	}
	changed := []string{}
	if out, err := gitrun.Run(ctx, "", nil, nil, "--git-dir="+repo, "diff", "--name-only", "-z", lend.baseCommit, final); err == nil {
		for _, p := range strings.Split(string(out), "\x00") {
			if p != "" {
				changed = append(changed, p)
			}
		}
	}
	t.logger().Info("git transport (the reference's remote): result pushed", "delegation", id, "branch", branch, "commit", final)
	return json.NewEncoder(result).Encode(remoteSnapshot{Branch: branch, CommitHash: final, BaseCommit: lend.baseCommit, ChangedFiles: changed})
}
