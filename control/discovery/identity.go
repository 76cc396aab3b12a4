package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/awcp/awcp/control"
)

// agentIDFile holds a state dir's agent id. Both daemons that share a
// state dir (awcp-fs serve and awcp-ctl) are one agent: a delegation from
// one to the other is a call to itself, which the call chain refuses.
const agentIDFile = "agent-id"

var uuidForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// AgentID returns the agent id kept in stateDir, made (a random UUID) on
// first use. Two processes starting at once agree: the file is created
// exclusively, and the loser reads the winner's.
func AgentID(stateDir string) (string, error) {
	path := filepath.Join(stateDir, agentIDFile)
	for range 3 {
		if id, err := readAgentID(path); !errors.Is(err, fs.ErrNotExist) {
			return id, err
		}
		id := control.NewDelegationID()
		tmp := path + "." + id
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return "", fmt.Errorf("agent id: %w", err)
		}
		_, werr := f.WriteString(id + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			// A link fails if another process made the file first: then
			// its id is the one.
			werr = os.Link(tmp, path)
		}
		os.Remove(tmp)
		if werr == nil {
			return id, nil
		}
		if !errors.Is(werr, fs.ErrExist) {
			return "", fmt.Errorf("agent id: %w", werr)
		}
	}
	return readAgentID(path)
}

func readAgentID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if !uuidForm.MatchString(id) {
		return "", fmt.Errorf("agent id: %s holds %q, not a UUID; remove it to make a new one", path, id)
	}
	return id, nil
}

// DefaultName is an agent's name when none is given: the host name.
func DefaultName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "awcp"
}
