package untrusted

import "strings"

// What git executes or obeys without being asked, in any repository of a
// lent tree (the top one, a nested one, one the agent makes): a path whose
// components hold `.git` followed by
//
//	config, config.worktree   aliases, core.fsmonitor, core.hooksPath,
//	                          core.sshCommand, filters, pagers, editors
//	hooks/…                   run at checkout, commit, merge, push
//	info/…                    attributes, excludes, sparse-checkout, grafts
//	objects/info/alternates,  objects read from another directory
//	objects/info/http-alternates
//	commondir, gitdir         a worktree's pointer to another git dir
//	modules/…, worktrees/…    submodules' and worktrees' git dirs, each
//	                          with a config and hooks of its own
//
// and the entry `.git` itself as anything but a directory (a `.git` file
// is a pointer to a git dir elsewhere). The ancestors a rename could move a
// controlled path through (`.git`, `.git/objects`, `.git/objects/info`)
// are controlled too. Everything else of a repository — objects, refs,
// the index, logs, HEAD — is the agent's to change: it may commit.
//
// What is not here, and why: a rebase's todo list (`rebase-merge/`) runs
// its `exec` lines only when the owner continues a rebase `git status`
// shows in progress; `.gitattributes` names filters that only config
// defines; `.gitmodules` is read when the owner updates submodules.
// A bare repository the agent makes under another name (HEAD, objects,
// refs and config in a directory) is obeyed where git's
// safe.bareRepository is "all", its default: see SECURITY.md.
//
// Names are compared without case: on a case-insensitive file system
// (every Mac's APFS by default, ext4's casefold directories) `.GIT/Config`
// is `.git/config`, and a rule that matched only the one spelling would
// let the other through. On a case-sensitive one the rule then covers a
// few names git never reads, which costs nothing.
func GitControlled(rel string) bool {
	parts := strings.Split(Fold(strings.Trim(rel, "/")), "/")
	for i, p := range parts {
		if p != ".git" {
			continue
		}
		rest := parts[i+1:]
		if len(rest) == 0 {
			return true // .git itself: moved, removed, or made a file
		}
		switch rest[0] {
		case "config", "config.worktree", "commondir", "gitdir", "hooks", "info", "modules", "worktrees":
			return true
		case "objects":
			if len(rest) == 1 {
				return true
			}
			if rest[1] == "info" && (len(rest) == 2 || rest[2] == "alternates" || rest[2] == "http-alternates") {
				return true
			}
		}
	}
	return false
}

// GitDir reports whether rel is a `.git` entry (of any repository of the
// tree): the one controlled path a directory may be made at.
func GitDir(rel string) bool {
	rel = Fold(strings.Trim(rel, "/"))
	return rel == ".git" || strings.HasSuffix(rel, "/.git")
}

// UnderGit reports whether rel is inside a `.git` directory or is one:
// what `diff` shows by name, not by content.
func UnderGit(rel string) bool {
	for _, p := range strings.Split(rel, "/") {
		if strings.EqualFold(p, ".git") {
			return true
		}
	}
	return false
}
