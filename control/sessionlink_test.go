package control

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"
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
