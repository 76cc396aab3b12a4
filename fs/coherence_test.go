package fs

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A file rewritten on the delegator's side without changing its size —
// in the same second, so that a v3 mtime (whole seconds) cannot tell —
// is read anew by the agent within the attribute timeout, whether the
// agent holds it open or opens it again: an agent that edits the file
// must not write the stale text back over the owner's change.
func TestSameSizeRewriteIsSeen(t *testing.T) {
	for _, how := range []string{"reopen", "held open"} {
		t.Run(how, func(t *testing.T) {
			f := newMount(t, false)
			onDelegator := filepath.Join(f.dir, "f")
			inMount := filepath.Join(f.mnt, "f")
			if err := os.WriteFile(onDelegator, []byte("aaaa\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var held *os.File
			if how == "held open" {
				var err error
				if held, err = os.Open(inMount); err != nil {
					t.Fatal(err)
				}
				defer held.Close()
			}
			read := func() string {
				if held != nil {
					b := make([]byte, 16)
					n, _ := held.ReadAt(b, 0)
					return string(b[:n])
				}
				b, _ := os.ReadFile(inMount)
				return string(b)
			}
			for range 3 {
				if got := read(); got != "aaaa\n" {
					t.Fatalf("first read: %q", got)
				}
			}
			if err := os.WriteFile(onDelegator, []byte("bbbb\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			changed := time.Now()
			for {
				got := read()
				if got == "bbbb\n" {
					break
				}
				if time.Since(changed) > 3*time.Second {
					t.Fatalf("still %q %s after the delegator rewrote the file (attribute timeout 1 s)", got, time.Since(changed).Round(time.Millisecond))
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
