package sshdtest

import (
	"net"
	"testing"
	"time"
)

// SlowLink forwards TCP connections to addr, holding every chunk for half
// of rtt in each direction, in order: a network link's round trip, in the
// test's own process. What the mount sends behind without waiting races
// what follows it only across such a link; on loopback the race is lost
// in microseconds. It returns the address to dial.
func SlowLink(t testing.TB, addr string, rtt time.Duration) string {
	t.Helper()
	pump := func(dst, src net.Conn) { delayCopy(dst, src, rtt/2) }
	return newProxy(t, addr, pump, pump).addr
}

// delayCopy copies src to dst, each chunk written d after it was read.
func delayCopy(dst, src net.Conn, d time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.b); err != nil {
				src.Close()
				for range ch {
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	for {
		b := make([]byte, 64<<10)
		n, err := src.Read(b)
		if n > 0 {
			ch <- chunk{b[:n], time.Now().Add(d)}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-done
}
