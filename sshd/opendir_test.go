package sshd

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestOpendirOfAFIFOIsRefusedNotWaitedOn: a directory listing asked of a
// FIFO in the export is refused at once (the open is O_DIRECTORY); an
// open for reading would wait for a writer that never comes, holding one
// of the session's workers. The session lists on afterwards.
func TestOpendirOfAFIFOIsRefusedNotWaitedOn(t *testing.T) {
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_fifo", false)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := f.sftp(t, "dlg_fifo", cred)
	done := make(chan error, 1)
	go func() { _, err := sc.ReadDir("/pipe"); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO was listed as a directory")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the listing of a FIFO is still waiting after 5 s")
	}
	ents, err := sc.ReadDir("/")
	if err != nil || len(ents) != 1 || ents[0].Name() != "pipe" {
		t.Fatalf("the root then lists %v, %v", ents, err)
	}
}
