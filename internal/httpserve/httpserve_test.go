package httpserve

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// LimitListener holds at most n connections: the next waits for a close.
func TestLimitListener(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Listener = LimitListener(srv.Listener, 2)
	srv.Start()
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		bufio.NewReader(c).ReadString('\n')
	}
	third, err := net.Dial("tcp", addr) // lands in the backlog
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	io.WriteString(third, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if line, _ := bufio.NewReader(third).ReadString('\n'); line != "" {
		t.Fatalf("a third connection was served while two were open: %q", line)
	}
	conns[0].Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(third).ReadString('\n'); !strings.Contains(line, "200") {
		t.Fatalf("the third connection after a close: %q %v", line, err)
	}
	conns[1].Close()
}

// Every server of ours (the executor's, the metrics listener, the
// delegator's local socket) answers a request it refuses without reading
// its body at once, and closes the connection: a client trickling the
// body it announced holds nothing.
func TestRefusalWithUnreadBodyCloses(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusMethodNotAllowed)
	}))
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	io.WriteString(c, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx")
	done := make(chan string, 1)
	go func() {
		br := bufio.NewReader(c)
		line, _ := br.ReadString('\n')
		io.Copy(io.Discard, br)
		done <- line
	}()
	for {
		select {
		case line := <-done:
			if !strings.Contains(line, "405") {
				t.Fatalf("answer %q, want 405", line)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("the connection was held %s after a refusal", took)
			}
			return
		case <-time.After(100 * time.Millisecond):
			if time.Since(start) > 5*time.Second {
				t.Fatal("a refused trickler still holds its connection after 5 s")
			}
			io.WriteString(c, "x")
		}
	}
}
