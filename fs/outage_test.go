package fs

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// freezeProxy forwards TCP to target; frozen, it forwards nothing either
// way and keeps every connection open, as a delegator stopped with SIGSTOP
// (or a network that drops every packet) would.
type freezeProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	thawed chan struct{} // closed while not frozen
	wg     sync.WaitGroup
}

func startFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, target: target, thawed: make(chan struct{})}
	close(p.thawed)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			conns = append(conns, c, s)
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.pipe(s, c) }()
			go func() { defer p.wg.Done(); p.pipe(c, s) }()
		}
	}()
	t.Cleanup(func() { p.thaw(); ln.Close(); p.wg.Wait() })
	return p
}

func (p *freezeProxy) addr() string { return p.ln.Addr().String() }

// pipe copies src to dst, holding what it read while frozen.
func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			thawed := p.thawed
			p.mu.Unlock()
			<-thawed
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				src.Close()
			}
			return
		}
	}
}

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.thawed = make(chan struct{})
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// The reconnect bound runs from the call: a lookup made 1 s into a silent
// outage fails with EIO within the bound (+1 s), although the keepalives
// notice the outage only 3–4 s in; once the delegator answers again the
// mount works.
func TestOutageBoundFromTheCall(t *testing.T) {
	const bound = 3 * time.Second
	var proxy *freezeProxy
	f := newMountWith(t, false, func(o *Options) {
		proxy = startFreezeProxy(t, o.Addr)
		o.Addr = proxy.addr()
		o.KeepAlive, o.ReconnectBound = time.Second, bound
	})
	if err := os.WriteFile(filepath.Join(f.mnt, "before"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	proxy.freeze()
	time.Sleep(time.Second)
	start := time.Now()
	_, err := os.Stat(filepath.Join(f.mnt, "never-seen"))
	took := time.Since(start)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("stat during the outage: %v, want EIO", err)
	}
	if took > bound+time.Second {
		t.Fatalf("a call made during the outage failed after %s; the bound is %s from the call", took.Round(100*time.Millisecond), bound)
	}
	proxy.thaw()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := os.WriteFile(filepath.Join(f.mnt, "after"), []byte("y"), 0o644)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount never worked again after the outage: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(f.dir, "after")); err != nil || string(b) != "y" {
		t.Fatalf("on the delegator's side after the outage: %q %v", b, err)
	}
}
