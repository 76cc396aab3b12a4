package fs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/awcp/awcp/sshd/sshdtest"
)

// A name the agent keeps asking for and the owner then makes is seen
// through the mount soon after, whatever happened to the delegator while
// the kernel held it as absent: restarted, frozen, its connection reset.
// (The soak's agent waited for ever for a file named stop.)
func TestOwnersNewFileSeenAfterFaults(t *testing.T) {
	slow(t)
	for _, fault := range []string{"restart", "freeze", "reset", "made while down"} {
		t.Run(fault, func(t *testing.T) {
			var gate *sshdtest.ReplyGate
			f := newMountWith(t, false, func(o *Options) {
				gate = sshdtest.NewReplyGate(t, o.Addr)
				o.Addr = gate.Addr
				o.KeepAlive, o.ReconnectBound = 500*time.Millisecond, 10*time.Second
				o.EntryTimeout, o.AttrTimeout = time.Second, time.Second
			})
			waitExact(t, f)
			stop := filepath.Join(f.mnt, "stop")
			asking := make(chan struct{})
			seen := make(chan time.Time, 1)
			go func() {
				defer close(seen)
				for {
					select {
					case <-asking:
						return
					default:
					}
					if _, err := os.Stat(stop); err == nil {
						seen <- time.Now()
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
			defer close(asking)
			time.Sleep(200 * time.Millisecond)
			switch fault {
			case "restart":
				f.restartServer(t, 200*time.Millisecond)
			case "freeze":
				thaw := gate.Freeze()
				time.Sleep(2 * time.Second)
				thaw()
			case "reset":
				gate.Reset()
			}
			made := time.Now()
			if fault == "made while down" {
				// Made while no connection (no watch) was there to tell.
				f.stopServer()
				owner(t, f.dir, "touch stop")
				time.Sleep(300 * time.Millisecond)
				f.restartServer(t, 0)
			} else {
				time.Sleep(2 * time.Second) // reconnected, and the kernel asked again
				waitExact(t, f)
				made = time.Now()
				owner(t, f.dir, "touch stop")
			}
			select {
			case at, ok := <-seen:
				if !ok {
					t.Fatal("stopped asking")
				}
				t.Logf("seen %s after it was made", at.Sub(made).Round(time.Millisecond))
			case <-time.After(5 * time.Second):
				t.Fatalf("after a %s, a file the owner made is still absent through the mount 5 s later", fault)
			}
		})
	}
}
