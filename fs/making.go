package fs

import (
	"context"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
)

// A file a handle is making — created behind, or emptied at its open —
// and still writing alone is known here as well as on the delegator: its
// attributes (made: as created, moved by the handle's writes and
// setattrs) and its contents (written, up to shadowMax). What the kernel
// asks of it meanwhile — tar's futimens, the stat before an assembler's
// read-back, that read-back — is answered from them without a round
// trip; what changes the file goes out behind the writes, so that the
// delegator's file ends as the agent saw it. Anything else that touches
// the file (another writer, a truncation, the owner's change, a lost
// connection) ends it: the delegator answers again.

// soleWriter reports whether h is the file's one writer, with no closed
// handle's writes still on the wire.
func (h *fileHandle) soleWriter() bool {
	n := h.node
	n.mu.Lock()
	defer n.mu.Unlock()
	_, writer := n.writers[h]
	return writer && len(n.writers) == 1 && len(n.closing) == 0
}

// shadowMax is the most of a file a handle keeps as written.
const shadowMax = 1 << 20

// setattrBehind sets the times or the mode of a file this handle created
// behind without waiting for the delegator: the FSETSTAT follows the
// handle's open and writes on the wire (the server keeps it behind them:
// wire.WriteBarrier), and the attributes answered are made here, from
// those it was created with, its writes and set. tar sets each file's
// mtime (futimens) before closing it: a round trip a file, which this
// spares. Its error is kept as a write's is (failed). It applies only
// while nothing else changed the file: no other handle writes it, its
// size was not set, and the handle's writes went out on the live
// connection; ok is false where it does not.
func (h *fileHandle) setattrBehind(set sftpc.Attrs, mtimeSet bool) (a sftpc.Attrs, ok bool) {
	if set.Flags&^(sftpc.AttrTimes|sftpc.AttrPermissions) != 0 || set.Mode&^0o777 != 0 {
		return a, false
	}
	// Begun before Release takes the handle off the writers, the
	// FSETSTAT is among the writes its close waits for.
	h.behind.Lock()
	f, gen, a, ok := h.madeHere()
	if ok {
		h.queueing.Add(1)
	}
	h.behind.Unlock()
	if !ok {
		return a, false
	}
	defer h.queueing.Done()
	now := time.Now()
	if set.Flags&sftpc.AttrTimes != 0 {
		a.Atime, a.Mtime, a.MtimeNsec = set.Atime, set.Mtime, 0
		if set.HasTimes {
			a.MtimeNsec = set.MtimeNsec
		}
	}
	if set.Flags&sftpc.AttrPermissions != 0 {
		a.Mode = syscall.S_IFREG | set.Mode
	}
	a.Ctime, a.CtimeNsec = uint64(now.Unix()), uint32(now.Nanosecond())
	wb := &h.node.fsys.conn.writes
	h.mu.Lock()
	a.Size = h.end
	h.made = a
	// Set after every write sent so far: the file keeps these times.
	h.wroteSince = false
	h.mu.Unlock()
	upto := wb.queueSetstat(h, gen, f.StartSetstat(set), set)
	if upto != 0 {
		wb.settleTo(context.Background(), upto)
	}
	if set.Flags&sftpc.AttrPermissions != 0 || mtimeSet {
		h.node.logChange()
	}
	return a, true
}

// madeHere is the file h created behind as h made it (made), with the
// file and connection its requests go out on; ok only while the
// attributes known here are the file's: nothing but h changed it (it is
// the file's one writer, no other's writes are on the wire, its size
// was not set), and its writes went out on the live connection of a
// server that keeps an FSETSTAT behind them.
func (h *fileHandle) madeHere() (f *sftpc.File, gen uint64, a sftpc.Attrs, ok bool) {
	alone := h.soleWriter()
	client, live := h.node.fsys.conn.liveAt()
	h.mu.Lock()
	defer h.mu.Unlock()
	f, gen, a = h.f, h.gen, h.made
	a.Size = h.end
	ok = h.madeOK && alone && f != nil && client != nil && gen == live && f.WriteBarrier()
	return f, gen, a, ok
}

// attrsBehind answers a GETATTR of a file this handle created behind
// and is still writing, without waiting for its writes: the kernel asks
// after every write it sent (its attributes are void then) as soon as a
// read goes past the size it knew — an assembler writes its object file
// and reads it back, a round trip a read across a network. The size is
// the handle's furthest write's end. Written to since its times were
// last set, the file is given a modification time of now, and an
// FSETSTAT of it goes out behind the writes (setattrBehind), so that
// what the kernel is told now is what a stat says once they landed. ok
// is false where it does not apply (madeHere).
func (h *fileHandle) attrsBehind() (sftpc.Attrs, bool) {
	_, _, a, ok := h.madeHere()
	if !ok {
		return a, false
	}
	h.mu.Lock()
	wrote := h.wroteSince
	h.mu.Unlock()
	if !wrote {
		return a, true
	}
	now := time.Now()
	return h.setattrBehind(sftpc.Attrs{Flags: sftpc.AttrTimes, Atime: a.Atime,
		Mtime: uint32(now.Unix()), MtimeNsec: uint32(now.Nanosecond()), HasTimes: true}, false)
}

// fromWritten answers a read at off from what the handle wrote (written),
// if it keeps that and is still the file's one writer.
func (h *fileHandle) fromWritten(dest []byte, off int64) (int, bool) {
	alone := h.soleWriter()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.writtenOK || !alone || off < 0 {
		return 0, false
	}
	if off >= int64(len(h.written)) {
		return 0, true
	}
	return copy(dest, h.written[off:]), true
}

// forgetWritten drops what n's writers keep as written: the file was
// changed other than through them (a truncation, the owner's change).
func (n *node) forgetWritten() {
	n.mu.Lock()
	hs := slices.Collect(maps.Keys(n.writers))
	n.mu.Unlock()
	for _, h := range hs {
		h.mu.Lock()
		h.written, h.writtenOK, h.madeOK = nil, false, false
		h.mu.Unlock()
	}
}
