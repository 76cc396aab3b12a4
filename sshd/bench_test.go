package sshd

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkLstatRoundTrip is one SFTP request and its answer over a real
// SSH connection on loopback: the floor under every metadata operation of
// the mount.
func BenchmarkLstatRoundTrip(b *testing.B) {
	f := newFixture(b)
	dir, cred := f.lend(b, "dlg_bench", false)
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	sc := f.sftp(b, "dlg_bench", cred)
	for b.Loop() {
		if _, err := sc.Lstat("/f"); err != nil {
			b.Fatal(err)
		}
	}
}
