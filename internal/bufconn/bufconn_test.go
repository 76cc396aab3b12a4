package bufconn

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// countingConn counts the reads of the real connection below the buffer.
type countingConn struct {
	net.Conn
	reads atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// Packets read the way x/crypto/ssh reads them (a length, then the body)
// arrive whole and in order, from far fewer reads of the socket.
func TestPacketsFromFewReads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const packets, body = 32, 32 << 10
	var sent bytes.Buffer
	for range packets {
		b := make([]byte, 4+body)
		binary.BigEndian.PutUint32(b, body)
		rand.Read(b[4:])
		sent.Write(b)
	}
	wrote := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			wrote <- err
			return
		}
		defer c.Close()
		_, err = c.Write(sent.Bytes())
		wrote <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// All of it is in the socket before the first read: what one read
	// returns is then bounded by the buffer, not by timing.
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	counted := &countingConn{Conn: raw}
	c := New(counted)
	var got bytes.Buffer
	var length [4]byte
	for range packets {
		if _, err := io.ReadFull(c, length[:]); err != nil {
			t.Fatal(err)
		}
		p := make([]byte, binary.BigEndian.Uint32(length[:]))
		if _, err := io.ReadFull(c, p); err != nil {
			t.Fatal(err)
		}
		got.Write(length[:])
		got.Write(p)
	}
	if !bytes.Equal(got.Bytes(), sent.Bytes()) {
		t.Fatal("the packets read differ from those sent")
	}
	// 1 MiB in reads of up to Size (256 KiB): a handful, against 64 or
	// more through x/crypto/ssh's own 4 KiB buffer.
	if n := counted.reads.Load(); n > 16 {
		t.Fatalf("%d reads of the socket for %d bytes", n, sent.Len())
	}
}
