package sshd

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
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
	s.send(func(b *buf) { b.Byte(wire.Init); b.U32(3) })
	if typ, _ := s.reply(); typ != wire.Version {
		t.Fatalf("answer to INIT of type %d", typ)
	}
	return s
}

func (s *floodSession) send(fill func(b *buf)) {
	s.t.Helper()
	b := buf{0, 0, 0, 0}
	fill(&b)
	b.SetU32(0, uint32(len(b)-4))
	if _, err := s.ch.Write(b); err != nil {
		s.t.Fatal(err)
	}
}

func (s *floodSession) reply() (byte, []byte) {
	s.t.Helper()
	typ, body, err := s.tryReply()
	if err != nil {
		s.t.Fatal(err)
	}
	return typ, body
}

// tryReply reads one answer; it may be called from any goroutine.
func (s *floodSession) tryReply() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(s.ch, hdr[:]); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:4])-1)
	_, err := io.ReadFull(s.ch, body)
	return hdr[4], body, err
}

// open opens name for reading and returns its handle.
func (s *floodSession) open(name string) string {
	s.t.Helper()
	s.send(func(b *buf) { b.Byte(wire.Open); b.U32(1); b.Str(name); b.U32(wire.FlagRead); b.U32(0) })
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
		s.send(func(b *buf) { b.Byte(wire.Read); b.U32(uint32(100 + i)); b.Str(handle); b.U64(0); b.U32(maxReadLen) })
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

// heapGrowth is how much the live heap grew since before.
func heapGrowth(before uint64) uint64 {
	if now := heapInUse(); now > before {
		return now - before
	}
	return 0
}

// peakGrowth is the most the live heap grew since before, sampled for two
// seconds (or until it passed 64 MiB), while a flood is held.
func peakGrowth(before uint64) uint64 {
	var peak uint64
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		peak = max(peak, heapGrowth(before))
		if peak > 64<<20 {
			break
		}
	}
	return peak
}

// A client that pipelines READs of 1 MiB and reads no answer does not make
// the server hold them all: it stops reading requests once its connection's
// share is held (flow control), and once the client reads, every request is
// answered.
func TestReadFloodIsBounded(t *testing.T) {
	slow(t)
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
	peak := peakGrowth(before)
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

// An attacker who opens many connections is bounded by the process's
// budget, which none of them can spend alone: six connections flooding at
// once hold about what the process allows, not six connections' worth;
// and once they read, all are answered.
func TestFloodOverManyConnectionsIsBounded(t *testing.T) {
	slow(t)
	const processLimit = 24 << 20 // six connections could hold 96 MiB
	saved := processBudget
	processBudget = newBudget(processLimit)
	t.Cleanup(func() { processBudget = saved })
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_many", false)
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, maxReadLen), 0o644); err != nil {
		t.Fatal(err)
	}
	const conns, reads = 6, 40
	// All connect first: once the process's budget is spent, a new
	// session waits too, for its INIT to be read.
	var sessions []*floodSession
	var handles []string
	for range conns {
		s := newFloodSession(t, f, "dlg_many", cred)
		sessions, handles = append(sessions, s), append(handles, s.open("/big"))
	}
	before := heapInUse()
	for i, s := range sessions {
		s.reads(handles[i], reads)
	}
	var peak uint64
	for range 15 {
		time.Sleep(100 * time.Millisecond)
		peak = max(peak, heapGrowth(before))
	}
	// Each session may go over by the one request it read last, and each
	// client (in this process too) holds up to its channel window (2 MiB)
	// of answers the test has not read.
	if slack := conns * (maxReadLen + 64<<10 + 2<<20); peak > processLimit+uint64(slack) {
		t.Fatalf("%d connections held %d MiB between them; the process allows %d MiB", conns, peak>>20, processLimit>>20)
	}
	// Read side by side: the answers one connection waits for may be held
	// up by another's unread ones (the process's budget is shared).
	bad := make(chan string, conns)
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range reads {
				if typ, _, err := s.tryReply(); err != nil || typ != wire.Data {
					bad <- fmt.Sprintf("connection %d: answer of type %d: %v", i, typ, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(bad)
	for msg := range bad {
		t.Error(msg)
	}
}

// A client that pipelines list-read@awcp or tree-read@awcp requests, each
// answered with up to 1 MiB of directories' entries and file contents, and
// reads no answer, is bounded as a READ flood is: the answers are counted
// against the connection's flow from the moment each request is read.
func TestListReadFloodIsBounded(t *testing.T) {
	slow(t)
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_listflood", false)
	content := make([]byte, 60<<10)
	for i := range content {
		content[i] = byte(i)
	}
	for i := range 40 { // 2.4 MiB of small files: every page is full
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// list-read@awcp pages of the directory, and tree-read@awcp answers
	// of the tree (the same directory, and its subdirectory as large).
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		os.WriteFile(filepath.Join(dir, "sub", fmt.Sprintf("g%02d", i)), content, 0o644)
	}
	for _, ext := range []string{wire.ListRead, wire.TreeRead} {
		t.Run(ext, func(t *testing.T) {
			s := newFloodSession(t, f, "dlg_listflood", cred)
			const pages = 300 // 300 MiB of answers, were they all held
			before := heapInUse()
			for i := range pages {
				s.send(func(b *buf) {
					b.Byte(wire.Extended)
					b.U32(uint32(100 + i))
					b.Str(ext)
					if ext == wire.ListRead {
						b.Str("/")
						b.U32(0)
					}
					b.U32(64 << 10)
					b.U32(maxReadLen)
					if ext == wire.TreeRead {
						b.U32(1)
						b.Str("/")
						b.U32(0)
					}
				})
			}
			peak := peakGrowth(before)
			if peak > 48<<20 {
				t.Fatalf("the server held %d MiB for %d unread answers of up to 1 MiB; want it bounded by its flow control", peak>>20, pages)
			}
			for i := range pages {
				typ, body := s.reply()
				if typ != wire.ExtendedReply {
					t.Fatalf("answer %d: type %d", i, typ)
				}
				if len(body) < 512<<10 {
					t.Fatalf("answer %d: %d bytes, want a full page", i, len(body))
				}
			}
		})
	}
}

// A certificate holder naming a new handle in every open-named@awcp — each
// refused (its directory is not there) and never closed — leaves the
// server's ordering state bounded: the read loop keeps a handle's order
// only while it is open or has a request in flight (sweepOrder), not one
// entry per name ever sent.
func TestNamedOpenFloodIsBounded(t *testing.T) {
	slow(t)
	f := newFixture(t)
	_, cred := f.lend(t, "dlg_namedflood", false)
	s := newFloodSession(t, f, "dlg_namedflood", cred)
	const opens = 20_000
	answered := make(chan error, 1)
	go func() {
		for i := range opens {
			typ, _, err := s.tryReply()
			if err == nil && typ != wire.Status {
				err = fmt.Errorf("answer %d: type %d", i, typ)
			}
			if err != nil {
				answered <- err
				return
			}
		}
		answered <- nil
	}()
	before := heapInUse()
	for i := range opens {
		s.send(func(b *buf) {
			b.Byte(wire.Extended)
			b.U32(uint32(i + 1))
			b.Str(wire.OpenNamed)
			b.Str(fmt.Sprintf("%s%d", wire.NamedPrefix, i))
			b.Str(fmt.Sprintf("/missing/dir/f%d", i))
			b.U32(wire.FlagWrite | wire.FlagCreat | wire.FlagExcl)
			b.U32(0)
		})
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	// 20,000 entries held were some 5.5 MiB; the sweep keeps 4,096 at most.
	if grown := heapGrowth(before); grown > 3<<20 {
		t.Fatalf("the server holds %d KiB more after %d refused named opens were answered; want the handles' order swept", grown>>10, opens)
	}
}
