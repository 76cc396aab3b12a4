// Package tail keeps the end of what is written: an agent's stderr, a
// terminal's output, a check's — bounded however much comes.
package tail

import (
	"bytes"
	"sync"
	"unicode/utf8"
)

// Buffer keeps the last Max bytes written to it, from the start of a
// UTF-8 character; it is safe for concurrent use.
type Buffer struct {
	Max       int
	mu        sync.Mutex // guards buf and truncated
	buf       bytes.Buffer
	truncated bool
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if len(p) > b.Max {
		p = p[len(p)-b.Max:] // one write larger than the bound: its end
		b.buf.Reset()
		b.truncated = true
	}
	b.buf.Write(p)
	if extra := b.buf.Len() - b.Max; extra > 0 {
		b.buf.Next(extra)
		b.truncated = true
	}
	for b.truncated && b.buf.Len() > 0 && !utf8.RuneStart(b.buf.Bytes()[0]) {
		b.buf.Next(1)
	}
	return n, nil
}

func (b *Buffer) String() string {
	s, _ := b.Snapshot()
	return s
}

// Snapshot returns what is kept and whether anything was dropped.
func (b *Buffer) Snapshot() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String(), b.truncated
}
