package sshd

import (
	"io/fs"
	"path"
	"strings"
)

// The head dialect of AWCP (the reference implementation's later wire)
// names in START's exportLocator an environment root: a directory that
// holds each lent resource under its name. A head executor mounts that
// root and runs its agent in the resource. The server serves such a root
// for every delegation, as a read-only directory of one entry, EnvResource,
// which is the export; nothing else is in it.

// EnvResource is the name the export has in its environment root.
const EnvResource = "workspace"

// EnvLocator is the exportLocator of delegation id's environment root.
func EnvLocator(id string) string { return "awcp-env/" + id }

// envRoot is the name rel gives the environment root. It holds a NUL, which
// no file name can: any request not answered by the environment's own
// handlers (stat, opendir, realpath) fails on it in the kernel, and so do
// names in the root other than EnvResource (envRoot + "/" + the name).
const envRoot = "\x00env"

// envName maps p, a cleaned absolute request path, if it is in the
// environment root of s's delegation: the root itself to envRoot, the
// resource to the export (a name relative to it), anything else to a
// name under envRoot.
func (s *sftpServer) envName(p string) (string, bool) {
	if s.env == "" {
		return "", false
	}
	rest, ok := strings.CutPrefix(p, s.env)
	if !ok || (rest != "" && rest[0] != '/') {
		return "", false
	}
	if rest == "" || rest == "/" {
		return envRoot, true
	}
	sub, ok := strings.CutPrefix(rest, "/"+EnvResource)
	if !ok || (sub != "" && sub[0] != '/') {
		return envRoot + rest, true
	}
	return path.Clean("/" + sub), true
}

// inEnv reports whether name (from rel) is in the environment root but
// not the export.
func inEnv(name string) bool { return strings.HasPrefix(name, envRoot) }

// envRootInfo is the environment root as it is listed: a read-only
// directory that looks like the export's root otherwise.
func (s *sftpServer) envRootInfo() (fs.FileInfo, error) {
	fi, err := s.fast.Stat(".")
	if err != nil {
		return nil, err
	}
	return envInfo{FileInfo: fi, name: path.Base(s.env), mode: fs.ModeDir | 0o555}, nil
}

// envEntry is the export as the environment root's one entry.
func (s *sftpServer) envEntry() (fs.DirEntry, error) {
	fi, err := s.fast.Stat(".")
	if err != nil {
		return nil, err
	}
	return fs.FileInfoToDirEntry(envInfo{FileInfo: fi, name: EnvResource, mode: fi.Mode()}), nil
}

// envInfo is a FileInfo under another name and mode.
type envInfo struct {
	fs.FileInfo
	name string
	mode fs.FileMode
}

func (e envInfo) Name() string      { return e.name }
func (e envInfo) Mode() fs.FileMode { return e.mode }
