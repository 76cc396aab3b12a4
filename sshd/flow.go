package sshd

import "sync"

// The SFTP server's flow control. A client may pipeline as many requests
// as it likes and need never read an answer: a READ of 1 MiB is a 29-byte
// request whose answer the server holds until the client reads it. So the
// bytes a session holds — requests read and not yet handled, answers made
// and not yet written to the channel — are counted against two budgets,
// its connection's and the process's, and while either is spent the
// session reads no further request. The client then finds the SSH channel
// window closed, as TCP's does when a receiver stops reading: a stalled or
// hostile client stalls itself, and the server's memory stays bounded.

const (
	// connInFlight is what one SSH connection's sessions may hold at once:
	// a sequential read keeps 4–8 MiB of 1 MiB READs in flight, and writes
	// sent behind a few MiB more.
	connInFlight = 16 << 20
	// processInFlight is what all sessions of the process may hold at once.
	processInFlight = 128 << 20
	// sessionsPerConn is how many SFTP sessions one connection may run: the
	// mount needs one, OpenSSH's sftp one; each holds buffers of its own.
	sessionsPerConn = 4
)

// budget counts bytes held against a limit. Going over is allowed — a
// request already read must be handled and answered — but a reader waits
// for full to clear before it takes on more.
type budget struct {
	mu    sync.Mutex
	used  int64
	limit int64
	freed chan struct{} // closed, and replaced, when used drops under limit
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, freed: make(chan struct{})}
}

func (b *budget) take(n int) {
	b.mu.Lock()
	b.used += int64(n)
	b.mu.Unlock()
}

func (b *budget) give(n int) {
	b.mu.Lock()
	over := b.used >= b.limit
	b.used -= int64(n)
	if over && b.used < b.limit {
		close(b.freed)
		b.freed = make(chan struct{})
	}
	b.mu.Unlock()
}

// full reports whether the budget is spent and, if so, a channel closed
// once it no longer is.
func (b *budget) full() (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used >= b.limit, b.freed
}

// processBudget is shared by every session of the process.
var processBudget = newBudget(processInFlight)

// flow is what one session counts against: its connection's budget and the
// process's.
type flow struct{ conn, process *budget }

func newFlow(conn *budget) flow { return flow{conn: conn, process: processBudget} }

func (f flow) take(n int) {
	f.conn.take(n)
	f.process.take(n)
}

func (f flow) give(n int) {
	f.conn.give(n)
	f.process.give(n)
}

// wait returns once neither budget is spent, or false when done closes
// first.
func (f flow) wait(done <-chan struct{}) bool {
	for {
		connFull, connFreed := f.conn.full()
		procFull, procFreed := f.process.full()
		if !connFull && !procFull {
			return true
		}
		select {
		case <-connFreed:
		case <-procFreed:
		case <-done:
			return false
		}
	}
}
