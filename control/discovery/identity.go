package discovery

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
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
// first use.
func AgentID(stateDir string) (string, error) {
	return keptOnce(filepath.Join(stateDir, agentIDFile), "agent id", readAgentID, func() (string, string, error) {
		id := control.NewDelegationID()
		return id, id, nil
	})
}

// keptOnce returns what the file at path holds (read), made by mk (the
// value and its text) on first use. Two processes starting at once agree:
// the file is written aside and linked into place, which fails for the one
// that comes second, which then reads the first one's.
func keptOnce[T any](path, what string, read func(string) (T, error), mk func() (T, string, error)) (T, error) {
	var zero T
	for range 3 {
		if v, err := read(path); !errors.Is(err, fs.ErrNotExist) {
			return v, err
		}
		v, text, err := mk()
		if err != nil {
			return zero, fmt.Errorf("%s: %w", what, err)
		}
		tmp := path + "." + control.NewDelegationID()
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return zero, fmt.Errorf("%s: %w", what, err)
		}
		_, werr := f.WriteString(text + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Link(tmp, path)
		}
		os.Remove(tmp)
		if werr == nil {
			return v, nil
		}
		if !errors.Is(werr, fs.ErrExist) {
			return zero, fmt.Errorf("%s: %w", what, werr)
		}
	}
	return read(path)
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

// identityKeyFile holds a state dir's identity key (control/identity.go):
// the Ed25519 seed, base64, mode 600.
const identityKeyFile = "identity.key"

// IdentityKey returns the identity key kept in stateDir, made on first
// use.
func IdentityKey(stateDir string) (ed25519.PrivateKey, error) {
	return keptOnce(filepath.Join(stateDir, identityKeyFile), "identity key", readIdentityKey, func() (ed25519.PrivateKey, string, error) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, "", err
		}
		return priv, base64.StdEncoding.EncodeToString(priv.Seed()), nil
	})
}

func readIdentityKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	seed, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("identity key: %s is not one; remove it to make a new one (delegators that trust the old one will refuse this executor until they trust the new)", path)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}
