package sshd

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// Authority is the delegator's CA and host key, kept in the state dir.
type Authority struct {
	ca   gossh.Signer
	host gossh.Signer
}

// LoadAuthority reads the CA and host keys from dir/ssh, creating them
// (ed25519, 0600 in a 0700 directory) on first use.
func LoadAuthority(stateDir string) (*Authority, error) {
	dir := filepath.Join(stateDir, "ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := loadOrCreateKey(filepath.Join(dir, "ca_ed25519"))
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	host, err := loadOrCreateKey(filepath.Join(dir, "host_ed25519"))
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	return &Authority{ca: ca, host: host}, nil
}

func loadOrCreateKey(path string) (gossh.Signer, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		block, err := gossh.MarshalPrivateKey(priv, "")
		if err != nil {
			return nil, err
		}
		if err := publishKey(path, pem.EncodeToMemory(block)); errors.Is(err, fs.ErrExist) {
			// Another process starting at once made it first: use its.
			return loadOrCreateKey(path)
		} else if err != nil {
			return nil, err
		}
		return gossh.NewSignerFromKey(priv)
	}
	if err != nil {
		return nil, err
	}
	if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %v): refusing to use it", path, info.Mode().Perm())
	}
	return gossh.ParsePrivateKey(data)
}

// publishKey writes data to path unless path exists (fs.ErrExist), and
// path never holds less than all of it: it is written to a temporary file
// beside it and linked into place. A process that finds path made by
// another reads a whole key, and a crash leaves no half-written one.
func publishKey(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// A link, not a rename: a rename would replace a key another process
	// made and already uses.
	return os.Link(f.Name(), path)
}

// HostKey is the host key the server presents.
func (a *Authority) HostKey() gossh.Signer { return a.host }

// HostPublicKey is the host key in authorized_keys form, for START's
// options so the executor pins it.
func (a *Authority) HostPublicKey() string {
	return string(gossh.MarshalAuthorizedKey(a.host.PublicKey()))
}

// CAPublicKey is the key every accepted certificate must be signed by.
func (a *Authority) CAPublicKey() gossh.PublicKey { return a.ca.PublicKey() }

// Credential is a fresh key pair with its certificate, as START carries it.
type Credential struct {
	PrivateKey  string // OpenSSH PEM
	Certificate string // authorized_keys form
	Serial      uint64
}

// Issue makes a key pair and a user certificate for delegation id: KeyId
// and the only principal are the id, the serial is random, it is valid
// until validBefore, and it grants no extensions (no pty, no forwarding,
// no agent) and no critical options.
func (a *Authority) Issue(id string, validBefore time.Time) (*Credential, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	sshPub, err := gossh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	var serial [8]byte
	if _, err := rand.Read(serial[:]); err != nil {
		return nil, err
	}
	cert := &gossh.Certificate{
		Key:             sshPub,
		Serial:          binary.BigEndian.Uint64(serial[:]),
		CertType:        gossh.UserCert,
		KeyId:           id,
		ValidPrincipals: []string{id},
		ValidAfter:      uint64(time.Now().Add(-time.Minute).Unix()), // clock skew
		ValidBefore:     uint64(validBefore.Unix()),
	}
	if err := cert.SignCert(rand.Reader, a.ca); err != nil {
		return nil, err
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, err
	}
	return &Credential{
		PrivateKey:  string(pem.EncodeToMemory(block)),
		Certificate: string(gossh.MarshalAuthorizedKey(cert)),
		Serial:      cert.Serial,
	}, nil
}
