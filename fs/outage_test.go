package fs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/awcp/awcp/sshd/sshdtest"
)

// The reconnect bound runs from the call: a lookup made 1 s into a silent
// outage fails with EIO within the bound, although the keepalives notice
// the outage only 3–4 s in (a bound counted from then would fail it 8–9 s
// after the call). 1.5 s is allowed for a loaded machine — a full `make
// test` under -race once took 2 s more than an idle one. Once the
// delegator answers again the mount works.
func TestOutageBoundFromTheCall(t *testing.T) {
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
	thaw := gate.Freeze()
	defer thaw()
	time.Sleep(time.Second)
	start := time.Now()
	_, err := os.Stat(filepath.Join(f.mnt, "never-seen"))
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
	if b, err := os.ReadFile(filepath.Join(f.dir, "after")); err != nil || string(b) != "y" {
		t.Fatalf("on the delegator's side after the outage: %q %v", b, err)
	}
}
