package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkDelegatorChangeSeen is the time from a change on the
// delegator's side (a same-size rewrite of a file the mount has read, and
// cached) to its being read through the mount: the watch's notification
// latency. Without the watch it would be up to the attribute timeout.
func BenchmarkDelegatorChangeSeen(b *testing.B) {
	f := newMountWith(b, false, nil)
	onDelegator, inMount := filepath.Join(f.dir, "f"), filepath.Join(f.mnt, "f")
	os.WriteFile(onDelegator, []byte("v0000000\n"), 0o644)
	for deadline := time.Now().Add(5 * time.Second); !(f.mount.fsys.watchedGen.Load() != 0); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the watch did not begin")
		}
	}
	b.ResetTimer()
	for i := range b.N {
		want := fmt.Sprintf("v%07d\n", i+1)
		os.ReadFile(inMount) // read, and cached
		os.WriteFile(onDelegator, []byte(want), 0o644)
		for {
			got, _ := os.ReadFile(inMount)
			if string(got) == want {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}
