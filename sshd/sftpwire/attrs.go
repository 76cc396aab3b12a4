package sftpwire

import (
	"encoding/binary"
	"strconv"
	"strings"
	"syscall"
)

// Encoder appends SFTP values to a packet under construction.
type Encoder []byte

func (e *Encoder) Byte(v byte)  { *e = append(*e, v) }
func (e *Encoder) U32(v uint32) { *e = binary.BigEndian.AppendUint32(*e, v) }
func (e *Encoder) U64(v uint64) { *e = binary.BigEndian.AppendUint64(*e, v) }

// SetU32 writes v over the uint32 at offset at: a length known only once
// what follows it is written (a packet's, or a string's read in place).
func (e Encoder) SetU32(at int, v uint32) { binary.BigEndian.PutUint32(e[at:], v) }

// Bytes is p as a length-prefixed string.
func (e *Encoder) Bytes(p []byte) {
	e.U32(uint32(len(p)))
	*e = append(*e, p...)
}

// Str is s as a length-prefixed string.
func (e *Encoder) Str(s string) {
	e.U32(uint32(len(s)))
	*e = append(*e, s...)
}

// FileAttrs are a file's attributes as SFTP v3 carries them (ATTRS), with our
// two extended attributes read and written as fields. Flags says which of
// the standard ones are there; the extended ones are there when Has* says
// so.
type FileAttrs struct {
	Flags        uint32
	Size         uint64
	UID, GID     uint32
	Mode         uint32 // st_mode: type and permission bits
	Atime, Mtime uint32 // seconds
	// Nlink is the link count (NlinkAttr), if HasNlink: 0 for a file
	// unlinked while open.
	Nlink    uint32
	HasNlink bool
	// MtimeNsec, Ctime and CtimeNsec are TimesAttr's, if HasTimes.
	MtimeNsec, CtimeNsec uint32
	Ctime                uint64
	HasTimes             bool
}

// IsDir reports a directory.
func (a FileAttrs) IsDir() bool { return a.Mode&syscall.S_IFMT == syscall.S_IFDIR }

// Encode appends a as ATTRS: the fields Flags names, then, with
// AttrExtended in Flags, those of the extended attributes a has.
func (a *FileAttrs) Encode(e *Encoder) {
	flags := a.Flags
	if a.HasNlink || a.HasTimes {
		flags |= AttrExtended
	} else {
		flags &^= AttrExtended
	}
	e.U32(flags)
	if flags&AttrSize != 0 {
		e.U64(a.Size)
	}
	if flags&AttrUIDGID != 0 {
		e.U32(a.UID)
		e.U32(a.GID)
	}
	if flags&AttrPermissions != 0 {
		e.U32(a.Mode)
	}
	if flags&AttrACModTime != 0 {
		e.U32(a.Atime)
		e.U32(a.Mtime)
	}
	if flags&AttrExtended == 0 {
		return
	}
	n := uint32(0)
	if a.HasNlink {
		n++
	}
	if a.HasTimes {
		n++
	}
	e.U32(n)
	if a.HasNlink {
		e.Str(NlinkAttr)
		e.number(func(b []byte) []byte { return strconv.AppendUint(b, uint64(a.Nlink), 10) })
	}
	if a.HasTimes {
		e.Str(TimesAttr)
		e.number(func(b []byte) []byte {
			b = strconv.AppendUint(b, uint64(a.MtimeNsec), 10)
			b = strconv.AppendUint(append(b, ' '), a.Ctime, 10)
			return strconv.AppendUint(append(b, ' '), uint64(a.CtimeNsec), 10)
		})
	}
}

// number appends, as a length-prefixed string, what add appends: decimal
// text written in place, with no string of its own.
func (e *Encoder) number(add func([]byte) []byte) {
	at := len(*e)
	e.U32(0)
	*e = add(*e)
	e.SetU32(at, uint32(len(*e)-at-4))
}

// DecodeAttrs reads ATTRS. Extended attributes other than ours are
// skipped; one of ours that does not parse is taken as absent.
func DecodeAttrs(d *Decoder) FileAttrs {
	var a FileAttrs
	a.Flags = d.U32()
	if a.Flags&AttrSize != 0 {
		a.Size = d.U64()
	}
	if a.Flags&AttrUIDGID != 0 {
		a.UID, a.GID = d.U32(), d.U32()
	}
	if a.Flags&AttrPermissions != 0 {
		a.Mode = d.U32()
	}
	if a.Flags&AttrACModTime != 0 {
		a.Atime, a.Mtime = d.U32(), d.U32()
	}
	if a.Flags&AttrExtended != 0 {
		for n := d.U32(); n > 0 && d.Err == nil; n-- {
			typ, data := d.Str(), d.Str()
			switch typ {
			case NlinkAttr:
				if v, err := strconv.ParseUint(data, 10, 32); err == nil {
					a.Nlink, a.HasNlink = uint32(v), true
				}
			case TimesAttr:
				a.MtimeNsec, a.Ctime, a.CtimeNsec, a.HasTimes = parseTimes(data)
			}
		}
	}
	return a
}

// parseTimes reads a TimesAttr value; ok is false if it is not one.
func parseTimes(v string) (mtimeNsec uint32, ctime uint64, ctimeNsec uint32, ok bool) {
	a, rest, _ := strings.Cut(v, " ")
	b, c, _ := strings.Cut(rest, " ")
	mns, err1 := strconv.ParseUint(a, 10, 32)
	cs, err2 := strconv.ParseUint(b, 10, 64)
	cns, err3 := strconv.ParseUint(c, 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || mns >= 1e9 || cns >= 1e9 {
		return 0, 0, 0, false
	}
	return uint32(mns), cs, uint32(cns), true
}
