package tail

import (
	"strings"
	"testing"
)

// A Buffer keeps the end of what was written, never more than Max bytes
// however it came — many small writes, or one far larger than Max — and
// never from the middle of a character.
func TestBufferKeepsTheEnd(t *testing.T) {
	b := &Buffer{Max: 8}
	for i := range 1000 {
		b.Write([]byte{byte('a' + i%26)})
	}
	if s, cut := b.Snapshot(); len(s) != 8 || !cut || s != "efghijkl" {
		t.Errorf("after 1000 small writes: %q, truncated %v", s, cut)
	}
	b = &Buffer{Max: 8}
	b.Write([]byte(strings.Repeat("x", 1<<20) + "the end"))
	if s := b.String(); s != "xthe end" {
		t.Errorf("after one write of 1 MiB: %q", s)
	}
	b = &Buffer{Max: 4}
	b.Write([]byte("aé€"))
	if s := b.String(); s != "€" {
		t.Errorf("cut in a character: %q", s)
	}
	b = &Buffer{Max: 64}
	b.Write([]byte("short"))
	if s, cut := b.Snapshot(); s != "short" || cut {
		t.Errorf("under the bound: %q, truncated %v", s, cut)
	}
}
