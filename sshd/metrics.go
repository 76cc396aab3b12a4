package sshd

import (
	"encoding/binary"
	"time"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// Metrics is what the server reports of its SFTP sessions; the daemon's
// registry (internal/metrics) implements it. Operation and status names
// are fixed sets: nothing a client sends becomes a label.
type Metrics interface {
	// SFTPHandling is a request about to be handled; its SFTPRequest
	// follows once it is answered. Answers go out before SFTPRequest is
	// called, so what a client was answered is counted once no request is
	// being handled.
	SFTPHandling()
	// SFTPRequest is one request handled, by operation, and how long it took.
	SFTPRequest(op string, took time.Duration)
	// SFTPBytes is file data read ("read") or written ("write").
	SFTPBytes(op string, n int)
	// SFTPError is a request answered with an error status.
	SFTPError(status string)
}

type noMetrics struct{}

func (noMetrics) SFTPHandling()                     {}
func (noMetrics) SFTPRequest(string, time.Duration) {}
func (noMetrics) SFTPBytes(string, int)             {}
func (noMetrics) SFTPError(string)                  {}

var opNames = map[byte]string{
	wire.Open: "open", wire.Close: "close", wire.Read: "read", wire.Write: "write",
	wire.Lstat: "lstat", wire.Fstat: "fstat", wire.Setstat: "setstat", wire.Fsetstat: "fsetstat",
	wire.Opendir: "opendir", wire.Readdir: "readdir", wire.Remove: "remove", wire.Mkdir: "mkdir",
	wire.Rmdir: "rmdir", wire.Realpath: "realpath", wire.Stat: "stat", wire.Rename: "rename",
	wire.Readlink: "readlink", wire.Symlink: "symlink",
}

// extensionNames are the extended requests the server answers, by the
// label they are counted under; any other is "extended".
var extensionNames = map[string]string{
	"posix-rename@openssh.com": "posix-rename",
	"hardlink@openssh.com":     "hardlink",
	"fsync@openssh.com":        "fsync",
	"statvfs@openssh.com":      "statvfs",
	wire.OpenRead:              "open-read",
	wire.OpenNamed:             "open-named",
	wire.List:                  "list",
	wire.ListRead:              "list-read",
	wire.TreeRead:              "tree-read",
	wire.Policy:                "policy",
	wire.Room:                  "room",
}

// opName is the label of request pkt (type, id, then the body).
func opName(pkt []byte) string {
	if name, ok := opNames[pkt[0]]; ok {
		return name
	}
	if pkt[0] != wire.Extended || len(pkt) < 9 {
		return "other"
	}
	n := binary.BigEndian.Uint32(pkt[5:9])
	if uint64(n) > uint64(len(pkt)-9) {
		return "extended"
	}
	if name, ok := extensionNames[string(pkt[9:9+n])]; ok {
		return name
	}
	return "extended"
}

var statusNames = map[uint32]string{
	wire.NoSuchFile: "no_such_file", wire.PermissionDenied: "permission_denied", wire.Failure: "failure",
	wire.BadMessage: "bad_message", wire.OpUnsupported: "op_unsupported",
}

func statusName(code uint32) string {
	if name, ok := statusNames[code]; ok {
		return name
	}
	return "other"
}
