package archive

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// benchTree makes 200 files of 16 KiB (half random, half text) in 10 dirs.
func benchTree(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	buf := make([]byte, 16<<10)
	for i := range 200 {
		p := filepath.Join(dir, "d"+strconv.Itoa(i%10), "f"+strconv.Itoa(i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if i%2 == 0 {
			rand.Read(buf)
		} else {
			for j := range buf {
				buf[j] = "package main\n"[j%13]
			}
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

func BenchmarkPack(b *testing.B) {
	dir := benchTree(b)
	b.SetBytes(200 * 16 << 10)
	for b.Loop() {
		if _, err := Pack(dir); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExtract(b *testing.B) {
	p, err := Pack(benchTree(b))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(200 * 16 << 10)
	for b.Loop() {
		dst := b.TempDir()
		if err := Extract(p.Zip, dst, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkApplyNoChanges(b *testing.B) {
	dir := benchTree(b)
	p, err := Pack(dir)
	if err != nil {
		b.Fatal(err)
	}
	opts := ApplyOptions{StagingDir: b.TempDir(), ConflictSuffix: ".c"}
	for b.Loop() {
		if _, err := Apply(dir, p.Manifest, p.Zip, opts); err != nil {
			b.Fatal(err)
		}
	}
}
