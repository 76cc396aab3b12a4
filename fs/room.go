package fs

import (
	"context"
	"math"
	"sync"
	"syscall"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
)

// A write sent behind returns to the writer before the delegator answers
// it, so a refusal that comes back — the export's write limit, the
// delegator's full disk — would reach the program late (its file's next
// open or fsync) or never: an agent's 2 MB write "succeeded" and 1 MB
// landed. So the mount keeps a reckoning of the room it may still write
// into, learnt from the delegator (wire.Room: the bytes left under the
// write limit, the bytes free where the writes go), and spends it on what
// it sends behind. A write the room does not surely hold is sent as a
// plain request: the writer waits for its answer, and a refusal fails the
// write(2) that caused it, as a local file system refuses at write(2).
// Far from both bounds — nearly always — nothing waits; near them, each
// write costs a round trip.
//
// What the mount does not count — another session's writes, a name's cost
// when it is not made behind, a truncate that grows a file, someone else
// filling the delegator's disk — is what roomMargin leaves for, or, past
// it, is refused late as before.
type room struct {
	mu      sync.Mutex // guards the fields below; never held across a request
	gen     uint64     // the connection left was learnt on; 0: not learnt
	left    int64      // what may still be spent behind
	askedAt time.Time  // the last answer's
	asking  chan struct{}
	spent   int64 // all that was ever spent (monotonic)
	pending int64 // spent by writes not queued yet
	// owner is who the delegator said a file made there belongs to
	// (sftpc.Room), if it said.
	owner sftpc.Room
}

// creator is the owner the delegator gives a file made in a directory
// whose mode and group are dirMode and dirGID, if it said who
// (sftpc.Room): its user, and its group — or the directory's, where the
// directory is set-group-ID or the delegator's system always does so.
func (r *room) creator(dirMode, dirGID uint32) (uid, gid uint32, ok bool) {
	r.mu.Lock()
	o := r.owner
	r.mu.Unlock()
	if !o.OwnerKnown || dirMode&syscall.S_IFMT != syscall.S_IFDIR {
		return 0, 0, false
	}
	if o.DirGroup || dirMode&syscall.S_ISGID != 0 {
		return o.UID, dirGID, true
	}
	return o.UID, o.GID, true
}

const (
	// roomMargin is kept unspent for what the mount does not count.
	roomMargin = 1 << 20
	// roomAskEvery is how often a mount without room asks again: until
	// then each write waits for its answer (one round trip), not for
	// that and another question.
	roomAskEvery = time.Second
)

// take spends n bytes of room for a change about to go out behind on
// connection gen; false: there is no room for it known, and it must go out
// as a plain request.
func (r *room) take(gen uint64, n int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen || r.left < n {
		return false
	}
	r.left -= n
	r.spent += n
	r.pending += n
	return true
}

// spend counts n bytes going out as a plain request: they are answered
// before the next question is asked, but not before a question already
// on the wire.
func (r *room) spend(n int64) {
	r.mu.Lock()
	r.left -= n
	r.spent += n
	r.pending += n
	r.mu.Unlock()
}

// queued says that n bytes taken or spent are in the write-behind queue
// (or answered): settling the queue settles them.
func (r *room) queued(n int64) {
	r.mu.Lock()
	r.pending -= n
	r.mu.Unlock()
}

// learn asks the delegator for the room, on the live connection, unless
// it was asked less than roomAskEvery ago and less than a large write's
// worth is left: each write would ask again. What was sent
// before is settled first, so that the answer counts it. What is spent
// meanwhile (by other writers) is counted against the answer, and so is
// what was spent but not queued when the settling began.
func (r *room) learn(ctx context.Context, c *conn) {
	client, gen := c.liveAt()
	if client == nil || !client.TellsRoom() {
		return
	}
	r.mu.Lock()
	if r.gen == gen && r.left < sftpc.MaxData && time.Since(r.askedAt) < roomAskEvery {
		r.mu.Unlock()
		return
	}
	if asking := r.asking; asking != nil {
		r.mu.Unlock()
		select {
		case <-asking:
		case <-ctx.Done():
		}
		return
	}
	asking := make(chan struct{})
	r.asking = asking
	spentBefore, pendingBefore := r.spent, r.pending
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.asking = nil
		r.mu.Unlock()
		close(asking)
	}()

	if err := c.writes.settle(ctx); err != nil {
		return
	}
	got, err := client.Room()
	if err != nil {
		return // a lost connection: the next one is asked again
	}
	left := clampRoom(min(got.Left, got.Free))
	r.mu.Lock()
	defer r.mu.Unlock()
	left -= r.spent - spentBefore + pendingBefore + roomMargin
	r.gen, r.left, r.askedAt = gen, max(left, 0), time.Now()
	if got.OwnerKnown {
		r.owner = got
	}
}

func clampRoom(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// roomFor reports whether a change of n bytes, about to go out on
// connection gen, may go behind; either way the room is spent.
func (f *filesystem) roomFor(ctx context.Context, gen uint64, n int64) bool {
	client, _ := f.conn.liveAt()
	if client == nil || !client.TellsRoom() {
		f.room.spend(n) // counted, though no bound is known
		return true
	}
	if f.room.take(gen, n) {
		return true
	}
	f.room.learn(ctx, f.conn)
	if f.room.take(gen, n) {
		return true
	}
	f.room.spend(n)
	return false
}

// nameCost is what the delegator counts against its write limit for each
// name made, beside the name's bytes (sshd's inodeCost).
const nameCost = 256
