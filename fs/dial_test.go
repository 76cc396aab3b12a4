package fs

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// A delegator address that accepts and then says nothing (a wedged
// daemon, a port taken by something else) fails the dial within
// DialTimeout instead of holding the mount up for good.
func TestDialGivesUpOnASilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c // held open, never written to
		}
	}()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, _, err := Dial(Options{Addr: ln.Addr().String(), User: "dlg", Export: "awcp/dlg", Signer: signer,
			HostKey: signer.PublicKey(), DialTimeout: 300 * time.Millisecond})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Dial succeeded against a server that never spoke")
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Dial gave up after %v, with a 300ms DialTimeout", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Dial still waits for a server that never speaks")
	}
	select {
	case c := <-accepted:
		c.Close()
	default:
	}
}
