package sshd

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// 13. Anyone who reaches the port opens idle TCP connections and never
// authenticates: 300 from one address. Past 16 they are closed at once,
// the rest when the handshake's deadline passes; the delegation's real
// client, from another address, is served meanwhile.
func TestUnauthenticatedConnectionsBounded(t *testing.T) {
	slow(t)
	old := handshakeTimeout
	handshakeTimeout = 2 * time.Second
	t.Cleanup(func() { handshakeTimeout = old })
	f := newFixture(t)
	_, cred := f.lend(t, "dlg_owner", false)
	attacker := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var conns []net.Conn
	for range 300 {
		c, err := attacker.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	closedBy := func(d time.Duration) int {
		n := 0
		for _, c := range conns {
			c.SetReadDeadline(time.Now().Add(d))
			buf := make([]byte, 256)
			for {
				if _, err := c.Read(buf); err != nil {
					if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
						n++
					}
					break
				}
			}
		}
		return n
	}
	if n := closedBy(20 * time.Millisecond); n < 300-maxPreauthPerSource {
		t.Errorf("%d of 300 idle connections from one address closed at once, want all past %d", n, maxPreauthPerSource)
	}
	start := time.Now()
	c := f.sftp(t, "dlg_owner", cred)
	if _, err := c.ReadDir("."); err != nil {
		t.Fatalf("the owner's client beside 300 idle connections: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the owner's client waited %s", took)
	}
	time.Sleep(handshakeTimeout + 500*time.Millisecond)
	if n := closedBy(20 * time.Millisecond); n != 300 {
		t.Errorf("%d of 300 idle connections closed after the handshake deadline", n)
	}
}

// 14. A certificate holder opens handles and never closes them: past
// maxHandles the server refuses (EMFILE) rather than spend the daemon's
// descriptors, and another delegation's session is served meanwhile.
func TestHandlesBoundedPerSession(t *testing.T) {
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_handles", false)
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	_, other := f.lend(t, "dlg_other", false)
	fdsBefore := openFDs(t)
	c := f.sftp(t, "dlg_handles", cred)
	opened := 0
	var last error
	for range maxHandles + 200 {
		if _, err := c.Open("f"); err != nil {
			last = err
			break
		}
		opened++
	}
	if opened > maxHandles || last == nil || !strings.Contains(last.Error(), "too many open files") {
		t.Fatalf("opened %d handles (last error %v), want at most %d, then EMFILE", opened, last, maxHandles)
	}
	if grown := openFDs(t) - fdsBefore; grown > maxHandles+16 {
		t.Errorf("the process holds %d more descriptors", grown)
	}
	o := f.sftp(t, "dlg_other", other)
	if _, err := o.ReadDir("."); err != nil {
		t.Fatalf("another delegation beside one holding %d handles: %v", opened, err)
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// 15. Memory outside the budget: open-named@awcp with 1 MiB handle names,
// LSTATs of 1 MiB paths, and a flood of watch@awcp requests whose answers
// are never read. Each is refused unread or answered at once, and the
// heap does not grow past a few MiB.
func TestLargeRequestsAndWatchFloodBounded(t *testing.T) {
	slow(t)
	f := newFixture(t)
	dir, cred := f.lend(t, "dlg_mem", false)
	s := newFloodSession(t, f, "dlg_mem", cred)
	go func() { // answers are read, and dropped, as they come
		for {
			if _, _, err := s.tryReply(); err != nil {
				return
			}
		}
	}()
	base := heapInUse()
	goroutines := runtime.NumGoroutine()
	sendLargeNames(s, 300)
	s2 := newFloodSession(t, f, "dlg_mem", cred) // a client that never reads
	for i := range 20000 {
		s2.send(func(b *buf) { b.Byte(wire.Extended); b.U32(uint32(i)); b.Str(wire.Watch) })
	}
	if grown := heapGrowth(base); grown > 32<<20 {
		t.Errorf("the heap grew by %d MiB", grown>>20)
	}
	if n := runtime.NumGoroutine() - goroutines; n > 64 {
		t.Errorf("%d goroutines more after a flood of watch requests", n)
	}
	// Nothing was opened under those names.
	for i := range 300 {
		if _, err := os.Stat(filepath.Join(dir, "x"+strconv.Itoa(i))); err == nil {
			t.Fatalf("a file was made under a 1 MiB handle name")
		}
	}
}

// BenchmarkUnauthenticatedConnections opens 2,000 idle TCP connections to
// the SSH port from one address and reports the descriptors the server
// holds for them a moment later (target: at most maxPreauthPerSource).
func BenchmarkUnauthenticatedConnections(b *testing.B) {
	f := newFixture(b)
	attacker := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
	var held float64
	for b.Loop() {
		before := openFDsOf(b)
		var conns []net.Conn
		for range 2000 {
			if c, err := attacker.Dial("tcp", f.addr); err == nil {
				conns = append(conns, c)
			}
		}
		time.Sleep(200 * time.Millisecond)
		// Our own ends count too: the server's are what is left above them.
		held = max(held, float64(openFDsOf(b)-before-len(conns)))
		for _, c := range conns {
			c.Close()
		}
	}
	b.ReportMetric(held, "server-fds")
}

// BenchmarkHandleFlood has one certificate holder open handles until
// refused, and reports how many descriptors the process took for them
// (target: maxHandles).
func BenchmarkHandleFlood(b *testing.B) {
	f := newFixture(b)
	dir, cred := f.lend(b, "dlg_hflood", false)
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	var grown float64
	for b.Loop() {
		c := f.sftp(b, "dlg_hflood", cred)
		before := openFDsOf(b)
		for range 5000 {
			if _, err := c.Open("f"); err != nil {
				break
			}
		}
		grown = max(grown, float64(openFDsOf(b)-before))
		c.Close()
	}
	b.ReportMetric(grown, "fds")
}

// BenchmarkLargeRequestFlood sends 600 requests with 1 MiB names
// (open-named handle names, LSTAT paths) and reports the heap's growth
// (target: well under the 128 MiB of the process's budget).
func BenchmarkLargeRequestFlood(b *testing.B) {
	f := newFixture(b)
	_, cred := f.lend(b, "dlg_lflood", false)
	var grown uint64
	for b.Loop() {
		s := newFloodSession(b, f, "dlg_lflood", cred)
		go func() {
			for {
				if _, _, err := s.tryReply(); err != nil {
					return
				}
			}
		}()
		base := heapInUse()
		sendLargeNames(s, 300)
		grown = max(grown, heapGrowth(base))
		s.ch.Close()
	}
	b.ReportMetric(float64(grown)/(1<<20), "MiB-growth")
}

func openFDsOf(b testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Fatal(err)
	}
	return len(ents)
}

// A certificate holder opens connection after connection, each with an
// SFTP session: past maxConnsPerDelegation they are refused and closed.
func TestConnectionsPerDelegationBounded(t *testing.T) {
	f := newFixture(t)
	_, cred := f.lend(t, "dlg_conns", false)
	served := 0
	for range maxConnsPerDelegation + 8 {
		c, err := f.dial("dlg_conns", certSigner(t, cred))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if sftpSessionStarts(t, c) {
			served++
		}
	}
	if served != maxConnsPerDelegation {
		t.Fatalf("%d connections of one delegation were served, want %d", served, maxConnsPerDelegation)
	}
}

// sendLargeNames sends n open-named@awcp requests with 1 MiB handle names
// (of files x0, x1, …) and n LSTATs of 1 MiB paths.
func sendLargeNames(s *floodSession, n int) {
	huge := strings.Repeat("n", 1<<20-64)
	for i := range n {
		s.send(func(b *buf) {
			b.Byte(wire.Extended)
			b.U32(uint32(i))
			b.Str(wire.OpenNamed)
			b.Str("n" + huge)
			b.Str("/x" + strconv.Itoa(i))
			b.U32(wire.FlagWrite | wire.FlagCreat)
			b.U32(0)
		})
		s.send(func(b *buf) { b.Byte(wire.Lstat); b.U32(uint32(i)); b.Str("/" + huge) })
	}
}
