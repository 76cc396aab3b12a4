package sshdtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"
)

// OpenSSHSFTP runs OpenSSH's own sftp-server behind an SSH server that
// takes any key: a delegator that serves plain SFTP of its whole file
// system, as the reference implementation's does (its sshd trusts the
// delegator's CA; this stand-in trusts everyone). It returns the address
// and the host key. The server is closed when the test ends.
func OpenSSHSFTP(t testing.TB) (string, gossh.PublicKey) {
	t.Helper()
	const server = "/usr/lib/openssh/sftp-server"
	if _, err := os.Stat(server); err != nil {
		t.Fatalf("%s is missing (.ci/run installs openssh-sftp-server): %v", server, err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	host, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	srv := &ssh.Server{
		HostSigners:      []ssh.Signer{host},
		PublicKeyHandler: func(ssh.Context, ssh.PublicKey) bool { return true },
		Handler:          func(s ssh.Session) { s.Exit(1) },
		SubsystemHandlers: map[string]ssh.SubsystemHandler{"sftp": func(s ssh.Session) {
			cmd := exec.Command(server)
			cmd.Stdin, cmd.Stdout = s, s
			cmd.Run()
			s.Exit(0)
		}},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })
	return ln.Addr().String(), host.PublicKey()
}
