package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/untrusted"
)

// What of the executor's reaches the editor. The executor routes the
// agent's callbacks (control/executor/acp), but the gateway does not rely
// on it: the executor, or an agent behind it, is hostile input to the
// owner's machine, and the editor runs terminals and reads and writes
// files there. So the gateway itself enforces seed 001's table:
//
//	session/update (notification)            → the editor
//	session/request_permission               → the editor
//	fs/read_text_file, fs/write_text_file    → the editor, if it declared
//	                                           them, for a path inside the
//	                                           session's cwd (resolved here,
//	                                           on the editor's machine,
//	                                           symlinks followed), neither
//	                                           hidden by the export's policy
//	                                           nor, for a write, one git obeys
//	everything else                          → refused here, and recorded
//
// Messages are read strictly at every hop (control.RPCConn: a key twice
// or two keys differing in case are refused), and a file callback is
// passed on re-encoded from exactly the fields checked.

// errRefused is a callback the gateway does not pass on.
var errRefused = errors.New("refused by the gateway")

// routeRequest decides on a request from the executor: it returns the
// request to send the editor (its params maybe re-encoded), or an error
// answer for the executor.
func (g *Gateway) routeRequest(s *session, m *control.RPCMessage) (*control.RPCMessage, error) {
	switch m.Method {
	case "session/request_permission":
		return m, nil
	case "fs/read_text_file", "fs/write_text_file":
		write := m.Method == "fs/write_text_file"
		want := "fs.readTextFile"
		fields := []string{"sessionId", "path", "line", "limit", "_meta"}
		if write {
			want, fields = "fs.writeTextFile", []string{"sessionId", "path", "content", "_meta"}
		}
		g.mu.Lock()
		declared := slices.Contains(g.caps, want)
		g.mu.Unlock()
		if !declared {
			return nil, fmt.Errorf("%w: the editor did not declare %s", errRefused, want)
		}
		p, err := untrusted.ExactObject(m.Params, fields...)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errRefused, err)
		}
		var path string
		if json.Unmarshal(p["path"], &path) != nil {
			return nil, fmt.Errorf("%w: path is not a string", errRefused)
		}
		real, err := s.confine(path, write)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errRefused, path, err)
		}
		p["path"], _ = json.Marshal(real)
		out := *m
		out.Params, _ = json.Marshal(p)
		return &out, nil
	}
	return nil, fmt.Errorf("%w: %q is not a callback the editor takes from a remote agent", errRefused, m.Method)
}

// routeNotification reports whether a notification from the executor
// goes to the editor: session/update only.
func routeNotification(m *control.RPCMessage) bool {
	return m.Method == "session/update"
}

// confine is path, a file callback's, as the editor would reach it with
// every symlink followed — which must be inside the session's cwd, not
// hidden by the export's policy, and for a write not a path git obeys
// (untrusted.GitControlled).
func (s *session) confine(path string, write bool) (string, error) {
	if !filepath.IsAbs(path) || strings.ContainsRune(path, 0) {
		return "", errors.New("not an absolute path")
	}
	root, err := filepath.EvalSymlinks(s.cwd)
	if err != nil {
		return "", fmt.Errorf("the session's directory: %w", err)
	}
	real, err := resolve(filepath.Clean(path))
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", errors.New("outside the session's directory")
	}
	rel = filepath.ToSlash(rel)
	if s.hide != nil && s.hide.Hidden(rel) {
		return "", errors.New("hidden by the export's policy")
	}
	if write && untrusted.GitControlled(rel) {
		return "", errors.New("a path git executes or obeys (.git/config, hooks, …): not written for the executor")
	}
	return real, nil
}

// resolve is p with every symlink followed. Where p does not exist (a
// file being written), it is its nearest existing directory resolved, and
// the rest; a dangling symlink is refused, as the editor would follow it.
func resolve(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err == nil {
		return real, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if _, lerr := os.Lstat(p); lerr == nil {
		return "", errors.New("a symlink leading nowhere")
	}
	dir := filepath.Dir(p)
	if dir == p {
		return "", err
	}
	realDir, err := resolve(dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(realDir, filepath.Base(p)), nil
}
