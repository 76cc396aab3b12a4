package sshd

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// rawSession speaks SFTP to ServeSFTP byte by byte, for requests no client
// of ours would send.
type rawSession struct {
	t    *testing.T
	conn net.Conn
	id   uint32
}

func newRawSession(t *testing.T, dir string) *rawSession {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	client, server := net.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		ServeSFTP(server, root, false, slog.New(slog.DiscardHandler))
		server.Close()
	}()
	t.Cleanup(func() { client.Close(); <-served; root.Close() })
	s := &rawSession{t: t, conn: client}
	s.send(wire.Init, func(b *buf) {}, false)
	s.reply() // VERSION
	return s
}

// send writes a request of type typ whose body fill builds, with a request
// id unless it is INIT.
func (s *rawSession) send(typ byte, fill func(b *buf), withID bool) {
	s.t.Helper()
	var b buf
	b.U32(0)
	b.Byte(typ)
	if withID {
		s.id++
		b.U32(s.id)
	} else {
		b.U32(3) // INIT's version
	}
	fill(&b)
	b.SetU32(0, uint32(len(b)-4))
	if _, err := s.conn.Write(b); err != nil {
		s.t.Fatal(err)
	}
}

// reply reads one packet: its type and what follows the type.
func (s *rawSession) reply() (byte, []byte) {
	s.t.Helper()
	var hdr [5]byte
	if _, err := io.ReadFull(s.conn, hdr[:]); err != nil {
		s.t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:4])-1)
	if _, err := io.ReadFull(s.conn, body); err != nil {
		s.t.Fatal(err)
	}
	return hdr[4], body
}

// status sends a request and returns the code of its STATUS answer.
func (s *rawSession) status(typ byte, fill func(b *buf)) uint32 {
	s.t.Helper()
	s.send(typ, fill, true)
	typ, body := s.reply()
	if typ != wire.Status || len(body) < 8 {
		s.t.Fatalf("answer of type %d, want STATUS", typ)
	}
	return binary.BigEndian.Uint32(body[4:8])
}

func openNamed(handle, path string) func(b *buf) {
	return func(b *buf) {
		b.Str(wire.OpenNamed)
		b.Str(handle)
		b.Str(path)
		b.U32(wire.FlagWrite | wire.FlagCreat | wire.FlagExcl)
		b.U32(0) // no attributes
	}
}

// A client names its handles only in its own space (NamedPrefix), and
// never one that is open: both are refused before anything is created.
func TestOpenNamedRefusals(t *testing.T) {
	dir := t.TempDir()
	s := newRawSession(t, dir)
	if code := s.status(wire.Extended, openNamed("1", "/hex")); code != wire.BadMessage {
		t.Fatalf("a handle named like the server's: status %d, want BAD_MESSAGE", code)
	}
	if code := s.status(wire.Extended, openNamed("n1", "/first")); code != wire.OK {
		t.Fatalf("open-named: status %d", code)
	}
	if code := s.status(wire.Extended, openNamed("n1", "/second")); code != wire.Failure {
		t.Fatalf("a handle name in use: status %d, want FAILURE", code)
	}
	if code := s.status(wire.Extended, func(b *buf) { b.Str(wire.OpenNamed) }); code != wire.BadMessage {
		t.Fatalf("open-named without a handle: status %d, want BAD_MESSAGE", code)
	}
	write := func(b *buf) { b.Str("n1"); b.U64(0); b.Str("data") }
	if code := s.status(wire.Write, write); code != wire.OK {
		t.Fatalf("write on the named handle: status %d", code)
	}
	if code := s.status(wire.Close, func(b *buf) { b.Str("n1") }); code != wire.OK {
		t.Fatalf("close of the named handle: status %d", code)
	}
	for _, name := range []string{"hex", "second"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s was created by a refused open: %v", name, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "first")); string(b) != "data" {
		t.Fatalf("first holds %q", b)
	}
}

// TestNamedOpensLeftBehindAreSwept: a client may name a new handle in every
// open-named@awcp, and never close it (the open refused, or abandoned). The
// read loop's order for such handles, and the path a REMOVE would wait on,
// are dropped once nothing of theirs is in flight; those of open handles,
// and of requests still running, stay.
func TestNamedOpensLeftBehindAreSwept(t *testing.T) {
	s := &sftpServer{handleTable: &handleTable{handles: map[string]*handle{"nopen": {}}}}
	order := map[string]*handleOrder{}
	opening := map[string]*sync.WaitGroup{}
	for i := range orderSweepAt {
		o := &handleOrder{path: "/f" + strconv.Itoa(i), opened: new(sync.WaitGroup)}
		order["n"+strconv.Itoa(i)] = o
		opening[o.path] = o.opened
	}
	order["nopen"] = &handleOrder{}
	running := &handleOrder{path: "/running", opened: new(sync.WaitGroup)}
	running.opened.Add(1)
	done := running.track(running.opened)
	order["nrunning"], opening["/running"] = running, running.opened
	sweepOrder(s, order, opening)
	if len(order) != 2 || order["nopen"] == nil || order["nrunning"] == nil {
		t.Fatalf("after the sweep %d orders are kept, want the open handle's and the running one's", len(order))
	}
	if len(opening) != 1 || opening["/running"] == nil {
		t.Fatalf("after the sweep %d named opens are kept for REMOVE, want the running one", len(opening))
	}
	done.Done()
	sweepOrder(s, order, opening)
	if len(order) != 1 || len(opening) != 0 {
		t.Fatalf("once handled, %d orders and %d named opens are kept", len(order), len(opening))
	}
}
