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
