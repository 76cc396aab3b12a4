// Package sshdtest runs a real sshd.Server for other packages' tests, as
// net/http/httptest does for HTTP servers.
package sshdtest

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/awcp/awcp/sshd"
)

// Serve serves srv on a fresh loopback port until the test ends, and
// returns the address it listens on.
func Serve(t testing.TB, srv *sshd.Server) *net.TCPAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-served })
	return ln.Addr().(*net.TCPAddr)
}

// Lent is a directory lent by a real server for a test: what a delegator
// gives an executor.
type Lent struct {
	Authority *sshd.Authority
	Server    *sshd.Server
	Addr      *net.TCPAddr
	Cred      *sshd.Credential // for delegation ID, valid for an hour
	ID        string
}

// Lend serves dir to delegation id (rw) on a new server with a new CA,
// until the test ends.
func Lend(t testing.TB, id, dir string) *Lent {
	t.Helper()
	auth, err := sshd.LoadAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.New(sshd.Options{Authority: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Grant(id, sshd.Export{Dir: dir}, time.Time{})
	cred, err := auth.Issue(id, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return &Lent{Authority: auth, Server: srv, Addr: Serve(t, srv), Cred: cred, ID: id}
}
