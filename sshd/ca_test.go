package sshd

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Delegators started at once on one state directory (several `awcp-ctl
// export` runs) each load the keys the first of them made: none reads a
// key file another is still writing, and none replaces another's key.
func TestLoadAuthorityConcurrent(t *testing.T) {
	for range 20 {
		dir := t.TempDir()
		const n = 8
		var wg sync.WaitGroup
		auths := make([]*Authority, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				auths[i], errs[i] = LoadAuthority(dir)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("process %d: %v", i, err)
			}
		}
		for i, a := range auths {
			if !bytes.Equal(a.ca.PublicKey().Marshal(), auths[0].ca.PublicKey().Marshal()) ||
				!bytes.Equal(a.host.PublicKey().Marshal(), auths[0].host.PublicKey().Marshal()) {
				t.Fatalf("process %d loaded other keys than process 0", i)
			}
		}
		again, err := LoadAuthority(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.ca.PublicKey().Marshal(), auths[0].ca.PublicKey().Marshal()) {
			t.Fatal("the CA key on disk is not the one the processes used")
		}
		ents, err := os.ReadDir(filepath.Join(dir, "ssh"))
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 2 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Fatalf("the key directory holds %v, want the two keys only", names)
		}
	}
}
