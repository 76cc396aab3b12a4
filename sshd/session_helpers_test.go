package sshd

import (
	"testing"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
)

// sessionOn is an SFTP session of ours on exp, lent as id.
func sessionOn(t *testing.T, f *fixture, id string, exp Export) *sftpc.Client {
	t.Helper()
	f.srv.Grant(id, exp, time.Now().Add(time.Hour))
	cred, err := f.auth.Issue(id, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := f.dial(id, certSigner(t, cred))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c, err := sftpc.Open(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// slow marks a test that takes a second or more here: `make test-short`
// (go test -short), the loop while working, leaves it out; `make test`
// and CI run every test.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a second or more: make test runs it")
	}
}
