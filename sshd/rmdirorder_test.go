package sshd

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// An RMDIR sent right behind the removes of a directory's names, without
// waiting for their answers, runs after them (wire.RmdirInOrder): the
// server spreads requests on different paths over its workers, and
// without the order the RMDIR overtakes some of them and fails.
func TestRmdirAfterRemoves(t *testing.T) {
	dir := t.TempDir()
	const files = 200
	for _, d := range []string{"top", "top/sub", "top/sub/deep"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range files {
			if err := os.WriteFile(filepath.Join(dir, d, fmt.Sprint("f", i)), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := newRawSession(t, dir)
	var reqs []func()
	for _, d := range []string{"/top/sub/deep", "/top/sub", "/top"} { // as rm -rf goes
		for i := range files {
			p := fmt.Sprint(d, "/f", i)
			reqs = append(reqs, func() { s.send(wire.Remove, func(b *buf) { b.Str(p) }, true) })
		}
		reqs = append(reqs, func() { s.send(wire.Rmdir, func(b *buf) { b.Str(d) }, true) })
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for _, send := range reqs {
			send()
		}
	}()
	failed := map[uint32]uint32{}
	for range reqs {
		typ, body := s.reply()
		if typ != wire.Status || len(body) < 8 {
			t.Fatalf("answer of type %d, want STATUS", typ)
		}
		if code := binary.BigEndian.Uint32(body[4:8]); code != wire.OK {
			failed[binary.BigEndian.Uint32(body[:4])] = code
		}
	}
	<-sent
	if len(failed) > 0 {
		t.Fatalf("requests failed (id: status): %v", failed)
	}
	if _, err := os.Lstat(filepath.Join(dir, "top")); !os.IsNotExist(err) {
		t.Fatalf("top is still there: %v", err)
	}
}
