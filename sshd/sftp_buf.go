package sshd

import (
	"slices"
	"sync"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// Request packets are recycled once handled (nothing keeps a reference to
// one), in three sizes: most requests, writes of up to 64 KiB, and larger
// writes. A request counts against the session's budget at its buffer's
// size, so a flood of small requests is bounded by what it holds.
const (
	tinyPacket  = 4 << 10
	smallPacket = 64 << 10
)

var (
	tinyPackets  = sync.Pool{New: func() any { return new([tinyPacket]byte) }}
	smallPackets = sync.Pool{New: func() any { return new([smallPacket]byte) }}
	largePackets = sync.Pool{New: func() any { return new([maxPacket]byte) }}
)

func getPacket(n int) []byte {
	switch {
	case n <= tinyPacket:
		return tinyPackets.Get().(*[tinyPacket]byte)[:n]
	case n <= smallPacket:
		return smallPackets.Get().(*[smallPacket]byte)[:n]
	}
	return largePackets.Get().(*[maxPacket]byte)[:n]
}

func putPacket(pkt []byte) {
	switch cap(pkt) {
	case tinyPacket:
		tinyPackets.Put((*[tinyPacket]byte)(pkt[:tinyPacket]))
	case smallPacket:
		smallPackets.Put((*[smallPacket]byte)(pkt[:smallPacket]))
	case maxPacket:
		largePackets.Put((*[maxPacket]byte)(pkt[:maxPacket]))
	}
}

// buf is a response under construction: four bytes for its length, then
// the packet. Buffers are recycled in two sizes, apart, so that a status
// never holds a megabyte a READ's answer left behind: the session's budget
// counts an answer at its buffer's capacity.
type buf = wire.Encoder

const largeBuf = maxReadLen + 64<<10 // a READ's answer, or OPEN-READ's

var smallBufs, largeBufs = sync.Pool{New: func() any { return new(buf) }}, sync.Pool{New: func() any { b := make(buf, 0, largeBuf); return &b }}

func newBuf() buf {
	b := *smallBufs.Get().(*buf)
	return append(b[:0], 0, 0, 0, 0)
}

// growBuf is slices.Grow for an answer about to carry n bytes of data: a
// large one moves to a buffer of the large pool.
func growBuf(b buf, n int) buf {
	if cap(b)-len(b) >= n {
		return b
	}
	if len(b)+n > smallPacket {
		large := append((*largeBufs.Get().(*buf))[:0], b...)
		putBuf(b)
		return slices.Grow(large, n)
	}
	return slices.Grow(b, n)
}

func putBuf(b buf) {
	switch c := cap(b); {
	case c == largeBuf:
		b = b[:0]
		largeBufs.Put(&b)
	case c <= smallPacket:
		b = b[:0]
		smallBufs.Put(&b)
	}
}
