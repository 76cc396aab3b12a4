// Package sftpc is the mount's SFTP v3 client. Unlike pkg/sftp's client,
// whose every call waits for its answer, it lets the caller start a
// request and wait for it later: the mount sends writes without waiting
// (write-behind) and sends a request and the one that reads its result
// back to back (SETSTAT then LSTAT), one round trip for both.
//
// Requests go out in the order they are started. Whether the server runs
// them in that order is the server's business: ours (package sshd) runs the
// requests that name the same handle or path in order, which is what the
// mount's back-to-back pairs rely on, and nothing else.
package sftpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"sync/atomic"

	gossh "golang.org/x/crypto/ssh"

	wire "github.com/awcp/awcp/sshd/sftpwire"
)

// Status codes the mount tells apart.
const (
	StatusNoSuchFile       = wire.NoSuchFile
	StatusPermissionDenied = wire.PermissionDenied
	StatusFailure          = wire.Failure
	StatusBadMessage       = wire.BadMessage
	StatusOpUnsupported    = wire.OpUnsupported
)

// Open flags (pflags).
const (
	OpenRead   = wire.FlagRead
	OpenWrite  = wire.FlagWrite
	OpenCreate = wire.FlagCreat
	OpenTrunc  = wire.FlagTrunc
	OpenExcl   = wire.FlagExcl
)

// MaxData is the most data one READ or WRITE carries: our server answers
// reads of up to 1 MiB and takes writes as large, so one FUSE request of
// the kernel's largest size is one SFTP request.
const MaxData = 1 << 20

// maxPacket bounds an incoming packet: a 1 MiB DATA and its header, or a
// NAME page of a few hundred entries.
const maxPacket = MaxData + 64<<10

var (
	// ErrConnLost is the error of every request once the session ended.
	ErrConnLost = errors.New("sftp: connection lost")
	errBadReply = wire.ErrMalformed
)

// StatusError is a STATUS reply other than OK (and EOF, which is io.EOF).
type StatusError struct {
	Code uint32
	Msg  string
}

func (e *StatusError) Error() string { return fmt.Sprintf("sftp: %s (status %d)", e.Msg, e.Code) }

// Is lets errors.Is(err, fs.ErrNotExist) and fs.ErrPermission work.
func (e *StatusError) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Code == wire.NoSuchFile
	case fs.ErrPermission:
		return e.Code == wire.PermissionDenied
	}
	return false
}

// Client is one SFTP session. It is safe for concurrent use.
type Client struct {
	ch   gossh.Channel
	root string // the server's directory every path is under (Within); "" for none

	// Requests are encoded into out, in the order they are started, and
	// written to the channel by the sender goroutine: the caller does not
	// wait for the channel write (an SSH packet's encryption and a
	// syscall), and requests started while one is written go out together,
	// several to an SSH packet.
	wmu   sync.Mutex
	chmu  sync.Mutex    // held across a channel write; taken under wmu
	out   []byte        // encoded requests not yet taken by the sender
	spare []byte        // the sender's last buffer, for out to reuse
	kick  chan struct{} // out became non-empty
	ended chan struct{} // closed by fail: the sender stops

	// Writes sent behind (StartWriteBehind) that nobody waits for are
	// held in out while earlier ones are unanswered, as Nagle's algorithm
	// holds small segments: a burst of small writes then goes out several
	// to an SSH packet, and comes back answered several to a packet, where
	// each would otherwise cost both sides a packet, a syscall and a
	// wake-up. Held requests go out when the last behind request in
	// flight is answered, when they fill a packet, when any other request
	// is started, or when one of them is waited for. bmu guards these;
	// it is taken under wmu, and alone by the receive loop, which must
	// not wait for wmu (held by a caller whose write waits for window).
	bmu          sync.Mutex
	held         bool // out holds requests no kick was sent for
	behindQueued int  // behind requests in out
	behindSent   int  // behind requests taken by the sender, unanswered

	mu    sync.Mutex // guards next, calls and err
	next  uint32
	calls map[uint32]*Call
	err   error // why the session ended; nil while it runs

	wg sync.WaitGroup // the receive loop and the request discarder

	writeBarrier bool              // the server announced wire.WriteBarrier
	openRead     bool              // the server announced wire.OpenRead
	openNamed    bool              // the server announced wire.OpenNamed
	rmdirInOrder bool              // the server announced wire.RmdirInOrder
	rmAfterOpen  bool              // the server announced wire.RemoveAfterOpen
	list         bool              // the server announced wire.List
	listRead     bool              // the server announced wire.ListRead
	treeRead     bool              // the server announced wire.TreeRead
	watch        bool              // the server announced wire.Watch
	room         bool              // the server announced wire.Room
	policy       wire.ExportPolicy // the server announced wire.Policy: what it may refuse
	hide         *wire.Matcher     // policy.Hide, ready

	named atomic.Uint64 // handles named by StartOpenNamed so far
}

// Policy is what the server announced it refuses beyond its access mode
// (wire.Policy): requests it may refuse must wait for its answer.
func (c *Client) Policy() wire.ExportPolicy { return c.policy }

// Hides is the policy's hide patterns, ready; nil if it has none.
func (c *Client) Hides() *wire.Matcher { return c.hide }

// WriteBarrier reports whether the server runs a handle's FSTAT, FSETSTAT
// and CLOSE after the WRITEs on it sent before them (wire.WriteBarrier).
func (c *Client) WriteBarrier() bool { return c.writeBarrier }

// Open starts an SFTP session on a new channel of sshc.
func Open(sshc *gossh.Client) (*Client, error) {
	ch, reqs, err := sshc.OpenChannel("session", nil)
	if err != nil {
		return nil, fmt.Errorf("open the sftp channel: %w", err)
	}
	c := &Client{ch: ch, calls: map[uint32]*Call{}, kick: make(chan struct{}, 1), ended: make(chan struct{})}
	c.wg.Add(1)
	go func() { defer c.wg.Done(); gossh.DiscardRequests(reqs) }()
	if err := c.handshake(); err != nil {
		ch.Close()
		c.wg.Wait()
		return nil, err
	}
	return c, nil
}

func (c *Client) handshake() error {
	ok, err := c.ch.SendRequest("subsystem", true, gossh.Marshal(struct{ Name string }{"sftp"}))
	if err == nil && !ok {
		err = errors.New("refused")
	}
	if err != nil {
		return fmt.Errorf("start the sftp subsystem: %w", err)
	}
	var init encoder
	init.U32(5)
	init.Byte(wire.Init)
	init.U32(3)
	if _, err := c.ch.Write(init); err != nil {
		return fmt.Errorf("sftp init: %w", err)
	}
	r := bufio.NewReaderSize(c.ch, 64<<10)
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("sftp version: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if hdr[4] != wire.Version || n < 5 || n > 64<<10 {
		return errors.New("sftp version: malformed reply")
	}
	body := make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		return fmt.Errorf("sftp version: %w", err)
	}
	d := decoder{B: body}
	if v := d.U32(); v != 3 {
		return fmt.Errorf("sftp version %d, want 3", v)
	}
	// Of the extensions announced only ours is looked for: the server is
	// ours, and has the others used (posix-rename, hardlink, fsync, statvfs).
	for len(d.B) > 0 && d.Err == nil {
		switch name, data := d.Str(), d.Str(); name {
		case wire.WriteBarrier:
			c.writeBarrier = true
		case wire.OpenRead:
			c.openRead = true
		case wire.OpenNamed:
			c.openNamed = true
		case wire.RmdirInOrder:
			c.rmdirInOrder = true
		case wire.RemoveAfterOpen:
			c.rmAfterOpen = true
		case wire.List:
			c.list = true
		case wire.ListRead:
			c.listRead = true
		case wire.TreeRead:
			c.treeRead = true
		case wire.Watch:
			c.watch = true
		case wire.Room:
			c.room = true
		case wire.Policy:
			c.policy = wire.DecodePolicy(data)
			c.hide = wire.NewMatcher(c.policy.Hide)
		}
	}
	c.wg.Add(2)
	go func() { defer c.wg.Done(); c.receive(r) }()
	go func() { defer c.wg.Done(); c.send() }()
	return nil
}

// send writes the requests queued in out until the session ends.
func (c *Client) send() {
	for {
		select {
		case <-c.kick:
		case <-c.ended:
			return
		}
		c.wmu.Lock()
		if len(c.out) == 0 { // taken by a large write
			c.wmu.Unlock()
			continue
		}
		if err := c.flush(nil); err != nil {
			c.fail(fmt.Errorf("%w: %v", ErrConnLost, err))
			return
		}
	}
}

// flush writes the queued requests to the channel, then tail (the rest of
// a large write's data, sent from the caller's buffer). It is called with
// wmu held and releases it once it holds chmu, so that what is taken from
// out reaches the channel in the order it was taken.
func (c *Client) flush(tail []byte) error {
	buf := c.out
	c.out, c.spare = c.spare[:0], nil
	c.bmu.Lock()
	c.held = false
	c.behindSent += c.behindQueued
	c.behindQueued = 0
	c.bmu.Unlock()
	c.chmu.Lock()
	c.wmu.Unlock()
	var err error
	if len(buf) > 0 {
		_, err = c.ch.Write(buf)
	}
	if err == nil && len(tail) > 0 {
		_, err = c.ch.Write(tail)
	}
	c.chmu.Unlock()
	if cap(buf) <= maxSpare {
		c.wmu.Lock()
		if c.spare == nil {
			c.spare = buf[:0]
		}
		c.wmu.Unlock()
	}
	return err
}

// maxQueued is the largest payload copied into the send queue. A larger
// one (a 1 MiB write) is written by its caller, from its buffer: the copy
// would cost more than the wait, which the data's size dominates anyway.
const maxQueued = 64 << 10

// maxOut bounds the send queue: past it, the caller writes the queue
// itself, so that requests started faster than the channel takes them
// (writes waiting for the server's window) wait instead of piling up.
const maxOut = 1 << 20

// behindBatch is how much held behind requests may fill before they go
// out: about an SSH packet (the channel cuts writes into 32 KiB packets).
const behindBatch = 30 << 10

// maxSpare bounds the send buffer kept for reuse.
const maxSpare = maxOut + maxQueued + 64<<10

// Close ends the session; requests still waiting fail with ErrConnLost.
func (c *Client) Close() error {
	c.fail(ErrConnLost)
	c.wg.Wait()
	return nil
}

// Err is why the session ended, nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail ends the session with err (the first reason sticks) and completes
// every waiting request with it.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	calls := c.calls
	c.calls = map[uint32]*Call{}
	c.mu.Unlock()
	close(c.ended)
	c.ch.Close()
	for _, call := range calls {
		call.err = err
		close(call.done)
	}
}

// Call is a request in flight.
type Call struct {
	done   chan struct{}
	behind *Client // set for a write sent behind: waiting for it sends it
	typ    byte    // the reply's type
	body   []byte  // the reply after its id
	dst    []byte  // READ: the reply's data goes here
	n      int     // READ: bytes of data in dst
	err    error   // the session's end, if it ended first
}

// Done is closed when the reply has come (or the session ended). It does
// not send a held write: polling it must not cost a packet; Err does.
func (c *Call) Done() <-chan struct{} { return c.done }

// push sends c now if it is a write held behind earlier ones.
func (c *Call) push() {
	if c.behind == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	cl := c.behind
	cl.bmu.Lock()
	if cl.held {
		cl.kickLocked()
	}
	cl.bmu.Unlock()
}

// wait returns the reply, or the session's end.
func (c *Call) wait() (byte, decoder, error) {
	c.push()
	<-c.done
	if c.err != nil {
		return 0, decoder{}, c.err
	}
	return c.typ, decoder{B: c.body}, nil
}

// Err waits for a request answered by STATUS and returns its error.
func (c *Call) Err() error {
	typ, d, err := c.wait()
	if err != nil {
		return err
	}
	return statusOf(typ, d)
}

// Attrs waits for a request answered by ATTRS.
func (c *Call) Attrs() (Attrs, error) {
	typ, d, err := c.wait()
	if err != nil {
		return Attrs{}, err
	}
	if typ != wire.Attrs {
		return Attrs{}, statusOf(typ, d)
	}
	a := wire.DecodeAttrs(&d)
	return a, d.Err
}

// Then waits for c and for stat, an LSTAT or FSTAT sent right behind it,
// and returns stat's attributes if c succeeded: a change and its result in
// one round trip, where the server runs the two in order (ours does, for
// requests on one path or handle).
func (c *Call) Then(stat *Call) (Attrs, error) {
	err := c.Err()
	a, serr := stat.Attrs()
	if err != nil {
		return Attrs{}, err
	}
	return a, serr
}

func (c *Call) handle() (string, error) {
	typ, d, err := c.wait()
	if err != nil {
		return "", err
	}
	if typ != wire.Handle {
		return "", statusOf(typ, d)
	}
	h := d.Str()
	return h, d.Err
}

// statusOf is the error of a reply that should be a STATUS.
func statusOf(typ byte, d decoder) error {
	if typ != wire.Status {
		return errBadReply
	}
	code, msg := d.U32(), d.Str()
	switch {
	case d.Err != nil:
		return errBadReply
	case code == wire.OK:
		return nil
	case code == wire.EOF:
		return io.EOF
	}
	return &StatusError{Code: code, Msg: msg}
}

// start sends a request built by body and returns it in flight. dst, for
// a READ, is where the reply's data is read to.
func (c *Client) start(typ byte, dst []byte, body func(e *encoder)) *Call {
	return c.startWith(typ, dst, body, nil, false)
}

// startWith is start with a payload sent after what body builds (a
// WRITE's data), without copying it into the request buffer. A request
// sent behind may be held while other behind requests are unanswered.
func (c *Client) startWith(typ byte, dst []byte, body func(e *encoder), payload []byte, behind bool) *Call {
	call := &Call{done: make(chan struct{}), dst: dst}
	if behind {
		call.behind = c
	}
	c.wmu.Lock()
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		c.wmu.Unlock()
		call.err = c.err
		close(call.done)
		return call
	}
	c.next++
	id := c.next
	c.calls[id] = call
	c.mu.Unlock()
	start := len(c.out)
	e := encoder(c.out)
	e.U32(0) // length, set below
	e.Byte(typ)
	e.U32(id)
	body(&e)
	e.SetU32(start, uint32(len(e)-start-4+len(payload)))
	if behind {
		c.bmu.Lock()
		c.behindQueued++
		c.bmu.Unlock()
	}
	if len(payload) > maxQueued || len(e) > maxOut {
		// The caller writes: a large payload from its own buffer, or the
		// queue grown past maxOut. The channel sends at most a 32 KiB SSH
		// packet per write, so a large payload fills the header's packet
		// first.
		head := len(payload) // a small one goes out with the queue
		if len(payload) > maxQueued {
			head = max(0, 32<<10-len(e))
		}
		c.out = append(e, payload[:head]...)
		if err := c.flush(payload[head:]); err != nil {
			c.fail(fmt.Errorf("%w: %v", ErrConnLost, err))
		}
		return call
	}
	c.out = append(e, payload...)
	c.bmu.Lock()
	switch {
	case behind && c.behindSent > 0 && len(c.out) < behindBatch:
		// Goes out with the next kick: an answer, a full packet, another
		// request or a wait.
		if start == 0 {
			c.held = true
		}
	case start == 0 || c.held:
		c.kickLocked()
	}
	c.bmu.Unlock()
	c.wmu.Unlock()
	return call
}

// kickLocked has the sender take out; bmu is held.
func (c *Client) kickLocked() {
	c.held = false
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// answeredBehind counts the answer to a request sent behind; the last one
// in flight sends what was held behind it.
func (c *Client) answeredBehind() {
	c.bmu.Lock()
	c.behindSent--
	if c.behindSent == 0 && c.held {
		c.kickLocked()
	}
	c.bmu.Unlock()
}

// receive reads replies until the session ends and completes their calls.
func (c *Client) receive(r *bufio.Reader) {
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			c.fail(fmt.Errorf("%w: %v", ErrConnLost, err))
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		typ, id := hdr[4], binary.BigEndian.Uint32(hdr[5:])
		if n < 5 || n > maxPacket {
			c.fail(fmt.Errorf("%w: a reply of %d bytes", ErrConnLost, n))
			return
		}
		c.mu.Lock()
		call := c.calls[id]
		delete(c.calls, id)
		c.mu.Unlock()
		if call == nil {
			c.fail(fmt.Errorf("%w: a reply to no request (id %d)", ErrConnLost, id))
			return
		}
		if err := call.read(r, typ, n-5); err != nil {
			call.err = fmt.Errorf("%w: %v", ErrConnLost, err)
			close(call.done)
			c.fail(call.err)
			return
		}
		close(call.done)
		if call.behind != nil {
			c.answeredBehind()
		}
	}
}

// read takes the reply's rest (n bytes) off r: a READ's data straight into
// its destination, anything else into a buffer of its own.
func (call *Call) read(r io.Reader, typ byte, n int) error {
	call.typ = typ
	if typ == wire.Data && call.dst != nil {
		var l [4]byte
		if n < 4 {
			return errBadReply
		}
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return err
		}
		size := int(binary.BigEndian.Uint32(l[:]))
		if size != n-4 || size > len(call.dst) {
			return errBadReply
		}
		call.n = size
		_, err := io.ReadFull(r, call.dst[:size])
		return err
	}
	call.body = make([]byte, n)
	_, err := io.ReadFull(r, call.body)
	return err
}

// encoder builds a request.
type encoder = wire.Encoder

type decoder = wire.Decoder
