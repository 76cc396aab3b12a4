package gitrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run names its subcommand when it fails, and neither a hook of the
// repository nor a user's configuration nor this process's GIT_
// variables reach it.
func TestRunIsOurs(t *testing.T) {
	repo := t.TempDir()
	ctx := context.Background()
	if _, err := Run(ctx, repo, nil, nil, "init", "-q"); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	hook := filepath.Join(repo, ".git", "hooks", "pre-commit")
	os.WriteFile(hook, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755)
	t.Setenv("GIT_DIR", "/nonexistent") // the caller's: must not reach the run
	os.WriteFile(filepath.Join(repo, "a"), []byte("a\n"), 0o644)
	if _, err := Run(ctx, repo, []string{"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x"}, nil, "add", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, repo, []string{"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x"}, nil, "commit", "-qm", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the repository's hook ran")
	}
	_, err := Run(ctx, repo, nil, nil, "-c", "x.y=z", "rev-parse", "--verify", "nothing")
	if err == nil || !strings.HasPrefix(err.Error(), "git rev-parse: ") {
		t.Fatalf("the failure does not name its subcommand: %v", err)
	}
}
