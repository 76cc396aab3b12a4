package control

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// A session's link across a drop: what either end sent while the
// connection was failing or down reaches the other end once, in order,
// after it is attached again — none lost, none twice.
func TestSessionLinkResumes(t *testing.T) {
	gw, ex := NewSessionLink(), NewSessionLink()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// connect is a reconnection as the gateway and the executor's
	// endpoint make it, over TCP (whose buffers the replays need).
	connect := func() {
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if err := ex.Attach(b, nil, gw.Received(), true); err != nil { // the count the request's header carries
			t.Fatal(err)
		}
		n, rc, err := ReadResume(a)
		if err != nil {
			t.Fatal(err)
		}
		if err := gw.Attach(a, rc, n, false); err != nil {
			t.Fatal(err)
		}
	}
	connect()
	msg := func(i int) *RPCMessage {
		return &RPCMessage{Method: "m", Params: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
	}
	got := map[*SessionLink][]string{}
	read := func(l *SessionLink, n int) {
		t.Helper()
		for range n {
			m, err := l.Read()
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			got[l] = append(got[l], string(m.Params))
		}
	}
	for i := 1; i <= 20; i++ {
		gw.Send(msg(i))
	}
	read(ex, 20)
	for i := 1; i <= 3; i++ {
		ex.Send(msg(100 + i))
	}
	read(gw, 3)

	// The connection fails; both ends go on sending meanwhile.
	gw.Drop()
	if _, err := ex.Read(); err != ErrLinkDown {
		t.Fatalf("the executor's end after the drop: %v", err)
	}
	for i := 21; i <= 25; i++ {
		gw.Send(msg(i))
		ex.Send(msg(100 + i))
	}
	connect()
	read(ex, 5)
	read(gw, 5)
	want := func(from, to int) (s []string) {
		for i := from; i <= to; i++ {
			s = append(s, fmt.Sprintf(`{"i":%d}`, i))
		}
		return s
	}
	if fmt.Sprint(got[ex]) != fmt.Sprint(want(1, 25)) {
		t.Errorf("the executor received %v", got[ex])
	}
	if fmt.Sprint(got[gw]) != fmt.Sprint(append(want(101, 103), want(121, 125)...)) {
		t.Errorf("the gateway received %v", got[gw])
	}
}

// A peer that stops reading (or a link that died without a reset) blocks
// a send; the gateway's new connection must still take over at once, and
// carry every message, in order, once.
func TestSessionLinkPeerThatNeverReads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (net.Conn, net.Conn) {
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	stalled, ours := pair() // stalled is never read
	defer stalled.Close()
	ex := NewSessionLink()
	if err := ex.Attach(ours, nil, 0, false); err != nil {
		t.Fatal(err)
	}
	const n, size = 300, 100 << 10 // 30 MiB: far past the sockets' buffers
	payload := json.RawMessage(`"` + strings.Repeat("x", size) + `"`)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range n {
			if err := ex.Send(&RPCMessage{Method: "m", ID: json.RawMessage(fmt.Sprint(i + 1)), Params: payload}); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // the sender is blocked on the stalled peer by now

	fresh, theirs := pair()
	defer fresh.Close()
	got := make(chan error, 1)
	go func() { // the gateway reads the new connection as it attaches it
		rc := NewRPCConn(fresh, fresh)
		for i := 1; i <= n; i++ {
			m, err := rc.Read()
			if err != nil {
				got <- fmt.Errorf("message %d: %v", i, err)
				return
			}
			if string(m.ID) != fmt.Sprint(i) {
				got <- fmt.Errorf("message %d came as %s: out of order or twice", i, m.ID)
				return
			}
		}
		got <- nil
	}()
	attached := make(chan error, 1)
	go func() { attached <- ex.Attach(theirs, nil, 0, false) }()
	select {
	case err := <-attached:
		if err != nil {
			t.Fatal(err)
		}
	// A deadlock never ends; the bounds are far past the time it takes
	// (the attach sends again the 30 MiB kept — under -race, beside the
	// other packages' tests on two cores, one run took past 10 s).
	case <-time.After(60 * time.Second):
		t.Fatal("a new connection waited for a send blocked on the old one")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the messages did not all come on the new connection")
	}
	<-sent
}

// A hostile peer forges its counts: it says it has received more than was
// ever sent, acknowledges the largest count there is and then goes back
// to zero. It can only lose what was meant for it: the link neither
// panics nor counts its held bytes below zero, and goes on carrying
// messages both ways in order.
func TestSessionLinkForgedCounts(t *testing.T) {
	gw := NewSessionLink()
	for i := range 5 {
		gw.Send(&RPCMessage{Method: "m", Params: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	a, b := net.Pipe()
	defer b.Close()
	peer := NewRPCConn(b, b)
	done := make(chan error, 1)
	go func() { done <- gw.Attach(a, nil, ^uint64(0), false) }() // "received" all there ever could be
	if err := <-done; err != nil {
		t.Fatalf("attach: %v", err)
	}
	read := make(chan *RPCMessage, 1)
	go func() {
		m, err := gw.Read() // takes the acks on its way
		if err != nil {
			m = &RPCMessage{Method: err.Error()}
		}
		read <- m
	}()
	for _, forged := range []string{`{"received":18446744073709551615}`, `{"received":0}`, `{"received":3}`} {
		if err := peer.Write(&RPCMessage{Method: methodAck, Params: json.RawMessage(forged)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := peer.Write(&RPCMessage{Method: "from-peer", Params: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-read:
		if m.Method != "from-peer" {
			t.Fatalf("after the forged counts the link read %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the link read nothing after the forged counts")
	}
	gw.mu.Lock()
	held, kept := gw.held, len(gw.unacked)
	gw.mu.Unlock()
	if held < 0 || kept != 0 {
		t.Errorf("after the forged counts the link holds %d messages, %d bytes", kept, held)
	}
	go gw.Send(&RPCMessage{Method: "after", Params: json.RawMessage(`{}`)})
	if m, err := peer.Read(); err != nil || m.Method != "after" {
		t.Fatalf("the peer then read %+v, %v", m, err)
	}
}
