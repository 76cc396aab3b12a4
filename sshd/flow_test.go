package sshd

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// floodSession is an SFTP session on a real SSH connection that sends
// requests without reading their answers, as a stalled or hostile client.
type floodSession struct {
	t  testing.TB
	ch io.ReadWriteCloser
}

func newFloodSession(t testing.TB, f *fixture, id string, cred *Credential) *floodSession {
	t.Helper()
	c, err := f.dial(id, certSigner(t, cred))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	w, _ := sess.StdinPipe()
	r, _ := sess.StdoutPipe()
	if err := sess.RequestSubsystem("sftp"); err != nil {
		t.Fatal(err)
	}
	s := &floodSession{t: t, ch: struct {
		io.Reader
		io.WriteCloser
	}{r, w}}
	s.send(func(b *buf) { b.byte(wire.Init); b.u32(3) })
	if typ, _ := s.reply(); typ != wire.Version {
		t.Fatalf("answer to INIT of type %d", typ)
	}
	return s
}

func (s *floodSession) send(fill func(b *buf)) {
	s.t.Helper()
	b := buf{0, 0, 0, 0}
	fill(&b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := s.ch.Write(b); err != nil {
		s.t.Fatal(err)
	}
}

func (s *floodSession) reply() (byte, []byte) {
	s.t.Helper()
	var hdr [5]byte
	if _, err := io.ReadFull(s.ch, hdr[:]); err != nil {
		s.t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:4])-1)
	if _, err := io.ReadFull(s.ch, body); err != nil {
		s.t.Fatal(err)
	}
	return hdr[4], body
}

// open opens name for reading and returns its handle.
func (s *floodSession) open(name string) string {
	s.t.Helper()
	s.send(func(b *buf) { b.byte(wire.Open); b.u32(1); b.str(name); b.u32(wire.FlagRead); b.u32(0) })
	typ, body := s.reply()
	if typ != wire.Handle {
		s.t.Fatalf("OPEN %s: answer of type %d", name, typ)
	}
	n := binary.BigEndian.Uint32(body[4:8])
	return string(body[8 : 8+n])
}

// reads sends n READs of 1 MiB of handle, without reading the answers.
func (s *floodSession) reads(handle string, n int) {
	for i := range n {
		s.send(func(b *buf) { b.byte(wire.Read); b.u32(uint32(100 + i)); b.str(handle); b.u64(0); b.u32(maxReadLen) })
	}
}

// heapInUse is the live heap; the second collection frees what the first
// moved to sync.Pool's victim cache.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A client that pipelines READs of 1 MiB and reads no answer does not make
// the server hold them all: it stops reading requests once its connection's
// share is held (flow control), and once the client reads, every request is
// answered.
func TestReadFloodIsBounded(t *testing.T) {
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_flood", false)
	data := make([]byte, maxReadLen)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newFloodSession(t, f, "dlg_flood", cred)
	h := s.open("/big")

	const reads = 400 // 400 MiB of answers, were they all held
	before := heapInUse()
	s.reads(h, reads)
	var peak uint64
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		peak = max(peak, heapInUse()-min(before, heapInUse()))
		if peak > 64<<20 {
			break
		}
	}
	if peak > 48<<20 {
		t.Fatalf("the server held %d MiB for %d unread answers of 1 MiB; want it bounded by its flow control", peak>>20, reads)
	}
	for i := range reads {
		typ, body := s.reply()
		if typ != wire.Data {
			t.Fatalf("answer %d: type %d", i, typ)
		}
		if n := binary.BigEndian.Uint32(body[4:8]); n != maxReadLen {
			t.Fatalf("answer %d: %d bytes", i, n)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		processBudget.mu.Lock()
		used := processBudget.used
		processBudget.mu.Unlock()
		if used == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still counted once every answer was read", used)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// One connection runs at most sessionsPerConn SFTP sessions: each holds
// buffers of its own.
func TestSessionsPerConnectionBounded(t *testing.T) {
	f := newFixture(t)
	_, cred := f.lend(t, "dlg_sessions", false)
	c, err := f.dial("dlg_sessions", certSigner(t, cred))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	started := 0
	for range sessionsPerConn + 2 {
		if sftpSessionStarts(t, c) {
			started++
		}
	}
	if started != sessionsPerConn {
		t.Fatalf("%d SFTP sessions ran on one connection, want %d", started, sessionsPerConn)
	}
}

// sftpSessionStarts opens an sftp subsystem on c and reports whether it
// answers INIT; the session is left open.
func sftpSessionStarts(t *testing.T, c *gossh.Client) bool {
	sess, err := c.NewSession()
	if err != nil {
		return false
	}
	w, _ := sess.StdinPipe()
	r, _ := sess.StdoutPipe()
	if err := sess.RequestSubsystem("sftp"); err != nil {
		return false
	}
	w.Write([]byte{0, 0, 0, 5, wire.Init, 0, 0, 0, 3})
	var hdr [5]byte
	_, err = io.ReadFull(r, hdr[:])
	return err == nil && hdr[4] == wire.Version
}
