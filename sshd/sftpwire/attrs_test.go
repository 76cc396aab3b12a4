package sftpwire

import (
	"bytes"
	"errors"
	"testing"
)

func TestValuesRoundTrip(t *testing.T) {
	var e Encoder
	e.Byte(Open)
	e.U32(7)
	e.U64(1 << 40)
	e.Str("a/b")
	e.Bytes([]byte{0, 1, 2})
	// The draft's layout: big-endian integers, strings as uint32 length then bytes.
	want := []byte{3, 0, 0, 0, 7, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 3, 'a', '/', 'b', 0, 0, 0, 3, 0, 1, 2}
	if !bytes.Equal(e, want) {
		t.Fatalf("encoded % x\nwant      % x", []byte(e), want)
	}
	d := Decoder{B: e}
	if b, n, big, s, p := d.Take(1)[0], d.U32(), d.U64(), d.Str(), d.Bytes(); b != Open || n != 7 || big != 1<<40 || s != "a/b" || !bytes.Equal(p, []byte{0, 1, 2}) || d.Err != nil {
		t.Fatalf("decoded %d %d %d %q %v (%v)", b, n, big, s, p, d.Err)
	}
	d.U32()
	if !errors.Is(d.Err, ErrMalformed) {
		t.Fatalf("reading past the end: %v", d.Err)
	}
}

func TestAttrsRoundTrip(t *testing.T) {
	for _, a := range []FileAttrs{
		{},
		{Flags: AttrPermissions, Mode: 0o644},
		{Flags: AttrSize | AttrACModTime, Size: 1 << 33, Atime: 1, Mtime: 2},
		{Flags: AttrSize | AttrUIDGID | AttrPermissions | AttrACModTime, Size: 5, UID: 1000, GID: 100, Mode: 0o100600, Atime: 3, Mtime: 4,
			Nlink: 2, HasNlink: true, MtimeNsec: 999_999_999, Ctime: 1 << 35, CtimeNsec: 1, HasTimes: true},
		{Flags: AttrPermissions, Mode: 0o40755, HasNlink: true},
		{Flags: AttrSize, HasTimes: true, Ctime: 9},
	} {
		var e Encoder
		a.Encode(&e)
		d := Decoder{B: e}
		got := DecodeAttrs(&d)
		want := a
		if a.HasNlink || a.HasTimes {
			want.Flags |= AttrExtended
		}
		if got != want || d.Err != nil || len(d.B) != 0 {
			t.Errorf("%+v\nread back as %+v (%v, %d bytes left)", a, got, d.Err, len(d.B))
		}
	}
}

// Another server's extended attributes are skipped, and one of ours that
// does not parse is taken as absent.
func TestAttrsForeignAndBadExtensions(t *testing.T) {
	var e Encoder
	e.U32(AttrSize | AttrExtended)
	e.U64(10)
	e.U32(4)
	e.Str("acl@example.com")
	e.Str("whatever")
	e.Str(TimesAttr)
	e.Str("1 2") // a member short
	e.Str(NlinkAttr)
	e.Str("-1")
	e.Str("mime@example.com")
	e.Str("text/plain")
	d := Decoder{B: e}
	got := DecodeAttrs(&d)
	if got != (FileAttrs{Flags: AttrSize | AttrExtended, Size: 10}) || d.Err != nil || len(d.B) != 0 {
		t.Fatalf("%+v (%v)", got, d.Err)
	}
	for _, times := range []string{"1000000000 0 0", "0 0 1000000000", "a b c", ""} {
		if _, _, _, ok := parseTimes(times); ok {
			t.Errorf("%q read as times", times)
		}
	}
	short := Decoder{B: e[:len(e)-3]}
	DecodeAttrs(&short)
	if !errors.Is(short.Err, ErrMalformed) {
		t.Fatalf("cut short: %v", short.Err)
	}
}
