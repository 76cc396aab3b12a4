// Package sftpwire is the one definition of our SFTP dialect, which both
// ends share: the numbers of draft-ietf-secsh-filexfer-02, our private
// extensions (specified in docs/sftp-extensions.md), and the packet
// encoder and decoder, attributes included. The server is package sshd,
// the client package fs/sftpc; neither encodes a value itself.
package sftpwire

import (
	"encoding/binary"
	"errors"
)

// WriteBarrier is our extension, announced in VERSION: FSTAT, FSETSTAT and
// CLOSE on a handle run after every WRITE on that handle sent before them,
// and the WRITEs sent after them run after them. Our server runs a file's
// writes side by side on several workers; with this, a client may send
// such a request right behind its writes instead of waiting for their
// answers first.
const WriteBarrier = "write-barrier@awcp"

// OpenRead is our extension, announced in VERSION: OPEN and the first
// bytes of the file in one round trip. The request is OPEN's body (path,
// pflags, attrs) and a uint32 length; the EXTENDED_REPLY holds the handle
// (string), the open file's attributes (ATTRS) and, if the file was opened
// for reading, its first bytes up to that length (string: fewer only at
// the end of the file). A failed open is a STATUS, as for OPEN.
const OpenRead = "open-read@awcp"

// OpenNamed is our extension, announced in VERSION: OPEN under a handle the
// client names, so that the client can use the handle before the answer
// comes (a file created while its writes are already on their way). The
// request is the handle, a string that starts with NamedPrefix (the
// server's own handles never do), then OPEN's body (path, pflags, attrs);
// the answer is a STATUS. WRITE, FSTAT, FSETSTAT and CLOSE on the handle
// may follow at once: they run after the open, and fail as on an unknown
// handle if it failed. Other requests on it must wait for the answer. A
// name already open is refused.
const OpenNamed = "open-named@awcp"

// RmdirInOrder is our extension, announced in VERSION: RMDIR of a
// directory runs after every REMOVE and RMDIR of a name in it sent before
// it. Our server runs requests on different paths side by side; with
// this, a client that removed a directory's files may send its RMDIR
// without waiting for their answers first (rm -rf).
const RmdirInOrder = "rmdir-in-order@awcp"

// RemoveAfterOpen is our extension, announced in VERSION: REMOVE of a
// path runs after an OpenNamed of that path sent before it has been
// handled. The named open runs by its handle, not its path; with this, a
// client that created a file behind may remove it without waiting for
// the create's answer first (git's index.lock, a build's temporary files).
const RemoveAfterOpen = "remove-after-open@awcp"

// List is our extension, announced in VERSION: a directory's entries in
// one round trip instead of OPENDIR, READDIR and CLOSE. The request is the
// directory's path; the answer a NAME (as READDIR's, with empty long
// names) holding every entry but "." and "..", in name order — or, for a
// directory of more than ListMax entries, a STATUS FAILURE, after which
// the client lists it the plain way.
const List = "list@awcp"

// ListRead is our extension, announced in VERSION: a page of a
// directory's entries in name order, with their attributes and the whole
// contents of its small regular files, in one round trip — what a walk of
// the tree (git status, grep -r, a build) will ask of the directory,
// fetched before it asks. The request is the directory's path, then three
// uint32: the index of the first entry wanted, the size up to which a
// regular file comes with its contents (the server may lower it), and the
// answer's size the client takes (the server may lower it). The
// EXTENDED_REPLY holds a uint32 count of the directory's entries, a uint32
// count of those in this page, and for each: its name (string), its ATTRS,
// and a byte, 1 followed by its contents (string) or 0. ATTRS of a file
// with contents are its descriptor's, stated after they were read. A page
// holds at least one entry unless none is left; the client asks for the
// next from the index after the last.
const ListRead = "list-read@awcp"

// TreeRead is our extension, announced in VERSION: pages of several
// directories and of every directory below them, breadth first, in one
// answer — a walk of the lent tree in a few round trips instead of one
// per level of it. The request is two uint32 as ListRead's (small and
// budget), a uint32 count of directories, and for each its path (string)
// and the index of its first entry wanted (uint32). The EXTENDED_REPLY
// holds a uint32 count of records, each: the index of the request's
// directory it lies under (uint32), its path below that one (string, ""
// for the directory itself), a status (uint32), and if that is OK a page
// as ListRead's answer lays it out. A directory whose page is short of its
// entries, a subdirectory listed without a record of its own, and a
// directory of the request without one are the client's to ask for again.
const TreeRead = "tree-read@awcp"

// Room is our extension, announced in VERSION: how much more the session
// may write before the server refuses it. The request has no body; the
// EXTENDED_REPLY holds two uint64: the bytes left under the export's
// write limit (RoomUnbounded if it has none) and the bytes free for the
// server on the file system that takes the session's writes; then, from
// servers that know it, three uint32: the user and group a file the
// session creates is given, and flags (RoomDirGroup). A client
// that writes behind (answering write(2) before the server does) sends
// what would pass either one as a plain request, and waits for its
// answer, so that the refusal reaches the writer.
const Room = "room@awcp"

// RoomDirGroup is a flag of a Room answer's owner: a new file takes its
// directory's group, whatever the directory's set-group-ID bit (BSD).
const RoomDirGroup = 1

// RoomUnbounded is the bytes left of an export without a write limit.
const RoomUnbounded = ^uint64(0)

// Watch is our extension, announced in VERSION: the server tells the
// client which paths of the export changed other than by the session's
// own requests. The request has no body; it is answered once something
// changed, with an EXTENDED_REPLY holding a byte of flags (WatchOverflow,
// WatchExact), a uint32 count and that many paths (strings, relative to
// the export). One request waits at a time; the client sends the next
// once it has the answer. A STATUS OP_UNSUPPORTED means the export cannot
// be watched.
const Watch = "watch@awcp"

// The flags of a Watch answer.
const (
	// WatchOverflow: too much changed, or what changed is not known; drop
	// every cache. The list is then empty.
	WatchOverflow = 1
	// WatchExact: the server tells every change to the export made other
	// than by this session, in this answer or a later one, for as long as
	// its answers carry the flag; the client may keep what it caches
	// until told. An answer that drops it is an overflow too.
	WatchExact = 2
)

// ListMax is the most entries a List answer carries.
const ListMax = 512

// NamedPrefix starts every handle a client names (OpenNamed).
const NamedPrefix = "n"

// Packet types.
const (
	Init          = 1
	Version       = 2
	Open          = 3
	Close         = 4
	Read          = 5
	Write         = 6
	Lstat         = 7
	Fstat         = 8
	Setstat       = 9
	Fsetstat      = 10
	Opendir       = 11
	Readdir       = 12
	Remove        = 13
	Mkdir         = 14
	Rmdir         = 15
	Realpath      = 16
	Stat          = 17
	Rename        = 18
	Readlink      = 19
	Symlink       = 20
	Status        = 101
	Handle        = 102
	Data          = 103
	Name          = 104
	Attrs         = 105
	Extended      = 200
	ExtendedReply = 201
)

// Status codes.
const (
	OK               = 0
	EOF              = 1
	NoSuchFile       = 2
	PermissionDenied = 3
	Failure          = 4
	BadMessage       = 5
	OpUnsupported    = 8
)

// Attribute flags.
const (
	AttrSize        = 0x1
	AttrUIDGID      = 0x2
	AttrPermissions = 0x4
	AttrACModTime   = 0x8
	AttrExtended    = 0x80000000
)

// Open flags (pflags).
const (
	FlagRead   = 0x1
	FlagWrite  = 0x2
	FlagAppend = 0x4
	FlagCreat  = 0x8
	FlagTrunc  = 0x10
	FlagExcl   = 0x20
)

// NlinkAttr is the extended attribute our server adds with the link count,
// which v3 lacks; clients that do not know it ignore it.
const NlinkAttr = "nlink@awcp"

// TimesAttr is the extended attribute our server adds with what v3's whole
// seconds of mtime cannot tell: "MTIME_NSEC CTIME_SEC CTIME_NSEC", in
// decimal. A file rewritten in the same second, or with its mtime put
// back, has a new mtime or ctime here, so a client keeping the file's
// pages knows they are stale.
const TimesAttr = "times@awcp"

// ErrMalformed is a packet shorter than what it says it holds.
var ErrMalformed = errors.New("sftp: malformed packet")

// Decoder reads a packet; the first error sticks and zero values follow.
type Decoder struct {
	B   []byte
	Err error
}

// Take is the next n bytes.
func (d *Decoder) Take(n int) []byte {
	if d.Err != nil || n < 0 || len(d.B) < n {
		d.Err = ErrMalformed
		return nil
	}
	v := d.B[:n]
	d.B = d.B[n:]
	return v
}

func (d *Decoder) U32() uint32 {
	if v := d.Take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *Decoder) U64() uint64 {
	if v := d.Take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// Bytes is a length-prefixed string, not copied.
func (d *Decoder) Bytes() []byte { return d.Take(int(d.U32())) }

// Str is a length-prefixed string.
func (d *Decoder) Str() string { return string(d.Bytes()) }

// The SSH subsystems our server serves beside "sftp": the git transport's
// upload-pack and receive-pack (sshd/git.go), which the executor asks for
// by these names.
const (
	SubsystemGitUpload  = "awcp-git-upload-pack"
	SubsystemGitReceive = "awcp-git-receive-pack"
)

// GitHaveRef is the ref a lent repository shows to pushes beside the
// result branch: the commit it was lent at. A push sends only what the
// refs it is shown lack, so without it the executor's push of a one-line
// change sent the whole tree back (64 MiB for a 64 MiB workspace, counted
// against --max-write-bytes). A push may move it; the delegator reads the
// base from its own record, never from a ref a push can reach.
const GitHaveRef = "refs/awcp/have"
