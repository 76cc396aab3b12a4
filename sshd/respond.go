package sshd

import (
	"io"
	"log/slog"
	"sync"
)

// responder writes a session's responses from one goroutine: a worker
// queues its response and takes its next request instead of waiting for
// the channel write (an SSH packet's encryption and a syscall), and the
// small responses queued meanwhile go out joined, several to an SSH packet
// — a burst of writes is answered by a few packets, not one each.
type responder struct {
	w    io.Writer
	log  *slog.Logger
	flow flow // queued responses count against it until written

	mu     sync.Mutex
	queued []buf

	kick    chan struct{} // queued became non-empty
	stopped chan struct{} // stop was called
	done    chan struct{} // the goroutine returned
	broken  chan struct{} // a write failed: the rest is dropped
}

// joinBelow is the size under which responses are copied together into
// one channel write; the channel cuts writes into 32 KiB SSH packets.
const joinBelow = 32 << 10

func startResponder(w io.Writer, log *slog.Logger, fl flow) *responder {
	r := &responder{w: w, log: log, flow: fl, kick: make(chan struct{}, 1), stopped: make(chan struct{}),
		done: make(chan struct{}), broken: make(chan struct{})}
	go r.run()
	return r
}

func (r *responder) queue(b buf) {
	r.flow.take(cap(b)) // what it holds: a small answer may sit in a grown buffer
	r.mu.Lock()
	r.queued = append(r.queued, b)
	first := len(r.queued) == 1
	r.mu.Unlock()
	if first {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// stop writes what is queued and ends the goroutine. Nothing may be
// queued after it is called.
func (r *responder) stop() {
	close(r.stopped)
	<-r.done
}

func (r *responder) run() {
	defer close(r.done)
	var batch []buf
	var joined []byte
	var failed bool
	for {
		stopping := false
		select {
		case <-r.kick:
		case <-r.stopped:
			stopping = true
		}
		r.mu.Lock()
		batch, r.queued = r.queued, batch[:0]
		r.mu.Unlock()
		joined = joined[:0]
		for i, b := range batch {
			if len(joined) > 0 && len(joined)+len(b) > joinBelow {
				failed = r.write(joined, failed)
				joined = joined[:0]
			}
			if len(b) >= joinBelow {
				failed = r.write(b, failed)
			} else {
				joined = append(joined, b...)
			}
			r.flow.give(cap(b))
			putBuf(b)
			batch[i] = nil
		}
		if len(joined) > 0 {
			failed = r.write(joined, failed)
		}
		if stopping {
			return
		}
	}
}

// write writes p unless an earlier write failed: the session is ending
// (its reader sees that) and the rest is dropped.
func (r *responder) write(p []byte, failed bool) bool {
	if failed {
		return true
	}
	if _, err := r.w.Write(p); err != nil {
		r.log.Debug("sftp: write response", "err", err)
		close(r.broken)
		return true
	}
	return false
}
