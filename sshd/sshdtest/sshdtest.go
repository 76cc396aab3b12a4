// Package sshdtest runs a real sshd.Server for other packages' tests, as
// net/http/httptest does for HTTP servers.
package sshdtest

import (
	"context"
	"net"
	"testing"

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
