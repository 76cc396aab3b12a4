package fs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/internal/mountinfo"
	"github.com/awcp/awcp/sshd/sshdtest"
)

// The reconnect bound runs from the call: a lookup made 1 s into a silent
// outage fails with EIO within the bound, although the keepalives notice
// the outage only 3–4 s in (a bound counted from then would fail it 8–9 s
// after the call). 1.5 s is allowed for a loaded machine — a full `make
// test` under -race once took 2 s more than an idle one. Once the
// delegator answers again the mount works.
func TestOutageBoundFromTheCall(t *testing.T) {
	slow(t)
	const bound = 6 * time.Second
	var gate *sshdtest.ReplyGate
	f := newMountWith(t, false, func(o *Options) {
		gate = sshdtest.NewReplyGate(t, o.Addr)
		o.Addr = gate.Addr
		o.KeepAlive, o.ReconnectBound = time.Second, bound
	})
	if err := os.WriteFile(filepath.Join(f.mnt, "before"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Landed before the outage: a call also waits for the writes still
	// on the wire when it is made, whose own bound runs from theirs.
	landed(t, filepath.Join(f.dir, "before"), "x")
	// A name the owner makes, reported to the mount: its lookup must
	// reach the delegator (the tree fetched at the start knew nothing
	// of it).
	if err := os.WriteFile(filepath.Join(f.dir, "theirs"), []byte("t"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * renotifyAfter)
	thaw := gate.Freeze()
	defer thaw()
	time.Sleep(time.Second)
	start := time.Now()
	_, err := os.Stat(filepath.Join(f.mnt, "theirs"))
	took := time.Since(start)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("stat during the outage: %v, want EIO", err)
	}
	if took > bound+1500*time.Millisecond {
		t.Fatalf("a call made during the outage failed after %s; the bound is %s from the call", took.Round(100*time.Millisecond), bound)
	}
	thaw()
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
	landed(t, filepath.Join(f.dir, "after"), "y")
}

// Unmount always ends the FUSE connection, even while a thread of the
// mount's own process waits on it and the delegator is silent: the
// thread's call fails soon after, so the process can exit. (An executor
// whose thread stat'ed its own mount at shutdown stayed a zombie until its
// connection was aborted by hand.)
func TestUnmountEndsRequestsHeldOnTheMount(t *testing.T) {
	slow(t)
	old := unmountGrace
	unmountGrace = time.Second
	t.Cleanup(func() { unmountGrace = old })
	var gate *sshdtest.ReplyGate
	f := newMountWith(t, false, func(o *Options) {
		gate = sshdtest.NewReplyGate(t, o.Addr)
		o.Addr = gate.Addr
		o.KeepAlive, o.ReconnectBound = 5*time.Second, time.Minute
	})
	// The mount answers before the freeze — a stat, which leaves nothing
	// behind it: a write's release and its replies would be waited for at
	// unmount up to the reconnect bound, by design, and what is tested
	// here is a request held.
	if err := os.WriteFile(filepath.Join(f.dir, "before"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.mnt, "before")); err != nil {
		t.Fatal(err)
	}
	thaw := gate.Freeze()
	defer thaw()
	held := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(f.mnt, "asked-while-frozen"))
		held <- err
	}()
	time.Sleep(300 * time.Millisecond) // the stat is at the delegator
	start := time.Now()
	unmounted := make(chan error, 1)
	go func() { unmounted <- f.mount.Unmount() }()
	select {
	case <-unmounted:
	case <-time.After(10 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("Unmount has not returned after 10 s; the goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	}
	select {
	case err := <-held:
		if err == nil {
			t.Fatal("the held stat succeeded against a frozen delegator")
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("a stat on the mount still waits %s after Unmount returned", time.Since(start).Round(time.Millisecond))
	}
	if mountinfo.IsMountpoint(f.mnt) {
		t.Fatal("still mounted")
	}
}
