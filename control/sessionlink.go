package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// A session's channel may drop — the network, a restart of the editor's
// gateway — while the session goes on: its agent keeps working, and
// nothing may be lost or delivered twice. A SessionLink is one end of it
// across its connections. Each end numbers the ACP messages it sends,
// keeps them until the other end acknowledges them, and after a new
// connection sends again those the other end has not received:
//
//   - every AckEvery messages received, an end sends $/awcp/ack
//     {"received": N} (not numbered, not passed on);
//   - the gateway asks for a new connection with the number it has
//     received in SessionReceivedHeader, and the executor's first line on
//     it is $/awcp/resume {"received": N}, its own number;
//   - each end then sends again what it sent after the other's number.
//   - a gateway that takes over a session another gateway held (it died;
//     the editor came back with session/load) has none of its numbers: it
//     asks with SessionReceivedHeader "fresh", and the executor's resume
//     line adds "from": the number before the first message it still
//     keeps, all of which it sends again. The new end counts on from there
//     (Rebase); the editor may see again the few messages the old gateway
//     had received and not yet acknowledged.
//
// An end that is more than MaxUnacked messages ahead of the other's
// acknowledgements cannot resume, and says so.
const (
	// SessionReceivedHeader carries, on a channel request, how many
	// messages the gateway has received of the session.
	SessionReceivedHeader = "AWCP-Session-Received"
	// FreshReceived is SessionReceivedHeader's value from a gateway that
	// takes a session over.
	FreshReceived = "fresh"
	// AckEvery is how many messages an end receives between its acks;
	// fewer are acknowledged AckIdle after the first of them.
	AckEvery = 16
	AckIdle  = 50 * time.Millisecond
	// MaxUnacked and MaxUnackedBytes bound what an end keeps for a
	// resumption: an agent that floods an editor who is away costs its
	// executor this much memory at most, then the session ends.
	MaxUnacked      = 1 << 14
	MaxUnackedBytes = 64 << 20

	methodAck    = "$/awcp/ack"
	methodResume = "$/awcp/resume"
	methodBye    = "$/awcp/bye"
)

// SessionChannel is a new connection of a session's channel, as the
// executor's endpoint hands it to the relay: the connection, and how many
// messages the gateway says it has received.
type SessionChannel struct {
	Conn     io.ReadWriteCloser
	Received uint64
	Fresh    bool // the gateway is a new one (FreshReceived)
}

// ErrLinkDown is Read's error when the connection failed: Attach another
// and read on, or give the session up.
var ErrLinkDown = errors.New("the session's channel is down")

type numbered struct {
	seq  uint64
	m    *RPCMessage
	size int64
}

// SessionLink is one end of a session's channel, across its connections.
//
// No write is made under mu: a peer that stops reading (or a link that
// died without a reset) blocks a write until its connection is closed,
// and Attach, which closes it, must not wait for that write first.
// writeMu orders what is sent — a replay before what follows it.
type SessionLink struct {
	readMu  sync.Mutex // one reader at a time
	writeMu sync.Mutex // one sender at a time: numbered messages go out in order

	mu       sync.Mutex
	conn     io.ReadWriteCloser // the live connection; nil while down
	rpc      *RPCConn
	gen      uint64     // connections attached so far
	sent     uint64     // messages sent
	unacked  []numbered // sent and not yet acknowledged
	held     int64      // their size
	received uint64     // messages received
	acked    uint64     // the received count last acknowledged
	ackArmed bool       // an ackIdle is due
	closed   bool       // Close was called: the session is over
	attached chan struct{}
}

// NewSessionLink returns a link with no connection yet.
func NewSessionLink() *SessionLink { return &SessionLink{attached: make(chan struct{})} }

// Received is how many messages this end has received.
func (l *SessionLink) Received() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.received
}

// Attached is closed once a connection is attached after this call.
func (l *SessionLink) Attached() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attached
}

// Attach makes conn the live connection: the other end has received
// peerReceived messages of this one's. With resume, this end first says
// how many it has received (the executor's side does). What the other
// end has not received is sent again. A previous connection is closed.
// rpc, if not nil, is conn's reader already in use (ReadResume's).
func (l *SessionLink) Attach(conn io.ReadWriteCloser, rpc *RPCConn, peerReceived uint64, resume bool) error {
	return l.attach(conn, rpc, peerReceived, resume, false)
}

// AttachFresh is the executor's Attach for a gateway that takes the
// session over (FreshReceived): of what is still kept, what keep says is
// the new gateway's is sent again, the resume line saying from which
// number; the rest (say, answers to the old editor's requests) is
// dropped, and what is kept numbered on as if it were all that was sent.
// Nil keep sends everything kept.
func (l *SessionLink) AttachFresh(conn io.ReadWriteCloser, keep func(*RPCMessage) bool) error {
	if keep != nil {
		l.writeMu.Lock() // no send numbers a message meanwhile
		l.mu.Lock()
		kept := l.unacked[:0]
		l.held = 0
		for _, n := range l.unacked {
			if keep(n.m) {
				kept = append(kept, n)
				l.held += n.size
			}
		}
		clear(l.unacked[len(kept):])
		for i := range kept {
			kept[i].seq = l.sent - uint64(len(kept)) + 1 + uint64(i)
		}
		l.unacked = kept
		l.mu.Unlock()
		l.writeMu.Unlock()
	}
	return l.attach(conn, nil, 0, true, true)
}

// Rebase starts a link that takes a session over where the executor's
// resume line says (ReadResume): it has received peerReceived of this
// end's messages (this end's next is numbered after them), and sends
// again all it keeps from message from+1.
func (l *SessionLink) Rebase(peerReceived, from uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent, l.received, l.acked = peerReceived, from, from
}

func (l *SessionLink) attach(conn io.ReadWriteCloser, rpc *RPCConn, peerReceived uint64, resume, fresh bool) error {
	// The old connection goes first: a send blocked on it returns.
	l.mu.Lock()
	if old := l.conn; old != nil {
		old.Close()
		l.conn, l.rpc = nil, nil
	}
	l.mu.Unlock()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if rpc == nil {
		rpc = NewRPCConn(conn, conn)
	}
	l.mu.Lock()
	resumed := map[string]uint64{"received": l.received}
	if fresh {
		peerReceived = l.sent - uint64(len(l.unacked))
		resumed["from"] = peerReceived
	}
	l.dropAcked(peerReceived)
	if len(l.unacked) > 0 && l.unacked[0].seq > peerReceived+1 {
		l.mu.Unlock()
		conn.Close()
		return fmt.Errorf("the other end has received %d messages; those after it up to %d are no longer kept", peerReceived, l.unacked[0].seq-1)
	}
	l.conn, l.rpc = conn, rpc
	l.gen++
	replay := make([]*RPCMessage, 0, len(l.unacked)+1)
	if resume {
		params, _ := json.Marshal(resumed)
		replay = append(replay, &RPCMessage{Method: methodResume, Params: params})
		l.acked = l.received
	}
	for _, n := range l.unacked {
		replay = append(replay, n.m)
	}
	close(l.attached)
	l.attached = make(chan struct{})
	l.mu.Unlock()
	for _, m := range replay { // a failure is the reader's to notice
		if rpc.Write(m) != nil {
			break
		}
	}
	return nil
}

// ReadResume reads the executor's first line on a new connection: how
// many messages it has received. The reader it returns is conn's, for
// Attach.
func ReadResume(conn io.ReadWriter) (uint64, *RPCConn, error) {
	r, rc, err := ReadResumeLine(conn)
	return r.Received, rc, err
}

// Resume is the executor's first line on a new connection: how many
// messages it has received, and for a fresh gateway from which number it
// sends again.
type Resume struct {
	Received uint64 `json:"received"`
	From     uint64 `json:"from"`
}

// ReadResumeLine is ReadResume, with the line whole.
func ReadResumeLine(conn io.ReadWriter) (Resume, *RPCConn, error) {
	rc := NewRPCConn(conn, conn)
	m, err := rc.Read()
	if err != nil {
		return Resume{}, nil, err
	}
	if m.Method != methodResume {
		return Resume{}, nil, fmt.Errorf("the channel's first message is %q, not %s", m.Method, methodResume)
	}
	var r Resume
	if err := json.Unmarshal(m.Params, &r); err != nil {
		return Resume{}, nil, err
	}
	return r, rc, nil
}

func (l *SessionLink) dropAcked(n uint64) {
	i := 0
	for i < len(l.unacked) && l.unacked[i].seq <= n {
		l.held -= l.unacked[i].size
		i++
	}
	l.unacked = append(l.unacked[:0], l.unacked[i:]...)
}

// Send numbers m, keeps it until acknowledged, and writes it if a
// connection is live (a write that fails is the reader's to notice).
func (l *SessionLink) Send(m *RPCMessage) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	size := int64(len(m.ID) + len(m.Method) + len(m.Params) + len(m.Result) + len(m.Error))
	if len(l.unacked) >= MaxUnacked || l.held+size > MaxUnackedBytes {
		n, held := len(l.unacked), l.held
		l.mu.Unlock()
		return fmt.Errorf("the other end is %d messages (%d bytes) behind: the session cannot go on", n, held)
	}
	l.sent++
	l.held += size
	l.unacked = append(l.unacked, numbered{l.sent, m, size})
	rpc := l.rpc
	l.mu.Unlock()
	if rpc != nil {
		rpc.Write(m)
	}
	return nil
}

// Read returns the next message the other end sent, consuming acks. It
// returns ErrLinkDown when the live connection fails (or there is none),
// and a Close'd link's io.EOF.
func (l *SessionLink) Read() (*RPCMessage, error) {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	for {
		l.mu.Lock()
		rpc, gen, closed := l.rpc, l.gen, l.closed
		l.mu.Unlock()
		switch {
		case closed:
			return nil, io.EOF
		case rpc == nil:
			return nil, ErrLinkDown
		}
		m, err := rpc.Read()
		if errors.Is(err, ErrNotRPC) {
			// A line the other end sent that is no message, or an
			// ambiguous one: counted as received (the other end counted
			// it sent), handed up to be refused, the link kept.
			l.mu.Lock()
			l.received++
			l.mu.Unlock()
			return m, err
		}
		if err != nil {
			l.mu.Lock()
			closed = l.closed
			if l.gen == gen && l.conn != nil {
				l.conn.Close()
				l.conn, l.rpc = nil, nil
			}
			l.mu.Unlock()
			if closed {
				return nil, io.EOF
			}
			return nil, ErrLinkDown
		}
		if m.Method == methodBye {
			return nil, io.EOF // the other end ended the session
		}
		if m.Method == methodAck || m.Method == methodResume {
			var p struct {
				Received uint64 `json:"received"`
			}
			if json.Unmarshal(m.Params, &p) == nil {
				l.mu.Lock()
				l.dropAcked(p.Received)
				l.mu.Unlock()
			}
			continue
		}
		l.mu.Lock()
		l.received++
		var ack *RPCMessage
		if l.received-l.acked >= AckEvery {
			params, _ := json.Marshal(map[string]uint64{"received": l.received})
			ack, l.acked = &RPCMessage{Method: methodAck, Params: params}, l.received
		}
		if ack == nil && !l.ackArmed {
			// Acknowledged soon even when fewer than AckEvery follow:
			// what a gateway has received is not sent again to the
			// one that takes the session over after it.
			l.ackArmed = true
			time.AfterFunc(AckIdle, l.ackIdle)
		}
		l.mu.Unlock()
		if ack != nil {
			rpc.Write(ack) // unnumbered: its place among the sends does not matter
		}
		return m, nil
	}
}

// ackIdle acknowledges what was received since the last ack, AckIdle
// after the first of it.
func (l *SessionLink) ackIdle() {
	l.mu.Lock()
	l.ackArmed = false
	rpc := l.rpc
	if rpc == nil || l.closed || l.received == l.acked {
		l.mu.Unlock()
		return
	}
	params, _ := json.Marshal(map[string]uint64{"received": l.received})
	l.acked = l.received
	l.mu.Unlock()
	rpc.Write(&RPCMessage{Method: methodAck, Params: params}) // a failure is the reader's to notice
}

// WaitAttached reports whether a connection is live, waiting for one up
// to done.
func (l *SessionLink) WaitAttached(done <-chan struct{}) bool {
	l.mu.Lock()
	live, attached := l.conn != nil, l.attached
	l.mu.Unlock()
	if live {
		return true
	}
	select {
	case <-attached:
		return true
	case <-done:
		return false
	}
}

// Close ends the session from this end: the other end's Read returns
// io.EOF once it has read what was sent before, and so does this end's.
// The connection is half-closed after the goodbye and closed once the
// other end has closed its side (or after two seconds).
func (l *SessionLink) Close() {
	l.mu.Lock()
	conn, rpc := l.conn, l.rpc
	l.closed = true
	l.conn, l.rpc = nil, nil
	l.mu.Unlock()
	if conn == nil {
		return
	}
	// After any send under way: the goodbye is the last message. A send
	// blocked on a peer that does not read holds it back at most two
	// seconds: then the connection is closed under it.
	t := time.AfterFunc(2*time.Second, func() { conn.Close() })
	l.writeMu.Lock()
	rpc.Write(&RPCMessage{Method: methodBye})
	l.writeMu.Unlock()
	t.Stop()
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		// Closing with unread data would reset the connection, and the
		// goodbye with it.
		t := time.AfterFunc(2*time.Second, func() { conn.Close() })
		io.Copy(io.Discard, conn)
		t.Stop()
	}
	conn.Close()
}

// Drop closes the live connection, as a failure would: Read returns
// ErrLinkDown, and the link may be attached again.
func (l *SessionLink) Drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close()
		l.conn, l.rpc = nil, nil
	}
}
