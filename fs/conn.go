package fs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/awcp/awcp/fs/sftpc"
)

// conn is the connection to the delegator, re-dialled when it is lost. A
// call made while it is down waits for the next connection, up to the
// bound, and then fails; a refused login (the lease ended) ends it for good.
type conn struct {
	opts    Options
	log     *slog.Logger
	metrics Metrics // never nil

	mu     sync.Mutex // guards the fields below; never held across a dial
	ssh    *gossh.Client
	client *sftpc.Client
	gen    uint64        // bumped at every new connection
	up     chan struct{} // closed when the current outage ends (or for good)
	downAt time.Time     // start of the current outage; zero while up
	dead   error         // set when no connection will come again

	// onUp, if set, is told of every connection made after it was set
	// (watch.go); it is called without mu held.
	onUp func(client *sftpc.Client, gen uint64)

	stop context.CancelFunc
	ctx  context.Context
	wg   sync.WaitGroup // the re-dialler and the keepalive
	done chan struct{}  // closed when dead

	writes writeBehind // writes sent and not yet answered, across connections

	// heard is when the live connection last answered a keepalive (or was
	// made), in Unix nanoseconds: a call that outlives its bound on a
	// connection heard from since it began is slow, not cut off.
	heard atomic.Int64
}

var (
	// errGone is the error of calls once the connection is gone for good.
	errGone = errors.New("the delegator is gone")
	// errUnreachable is the error of a call that waited the whole bound.
	errUnreachable = errors.New("the delegator has been unreachable for longer than the reconnect bound")
)

func newConn(opts Options) (*conn, error) {
	sshc, client, err := dialFirst(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{opts: opts, log: opts.Logger, metrics: opts.Metrics, ssh: sshc, client: client, gen: 1,
		up: closedChan(), stop: cancel, ctx: ctx, done: make(chan struct{})}
	if c.metrics == nil {
		c.metrics = noMetrics{}
	}
	c.watch(sshc, 1)
	return c, nil
}

// firstDialPatience is how long a mount's first dial tries again after
// the delegator's server closed it during the handshake.
const firstDialPatience = 10 * time.Second

// dialFirst is Dial for a mount's first connection. A server bounds the
// handshakes it takes from one address at a time (sshd's preauth bounds,
// OpenSSH's MaxStartups) and closes those past it: an executor starting
// many mounts at once meets that. Such a close (a reset, or the end of
// the stream, before authentication) is tried again, with backoff and
// jitter, for firstDialPatience; a refusal of the login, or of the
// export, is not.
func dialFirst(opts Options) (*gossh.Client, *sftpc.Client, error) {
	deadline := time.Now().Add(firstDialPatience)
	backoff := 20 * time.Millisecond
	for {
		sshc, client, err := Dial(opts)
		if err == nil || !closedInHandshake(err) || time.Now().Add(backoff).After(deadline) {
			return sshc, client, err
		}
		time.Sleep(backoff + rand.N(backoff))
		backoff = min(2*backoff, time.Second)
	}
}

// closedInHandshake reports whether err is the server closing a
// connection before authentication.
func closedInHandshake(err error) bool {
	var h errHandshake
	return errors.As(err, &h) && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET))
}

func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// watch starts the keepalive of connection gen and notices its end.
func (c *conn) watch(sshc *gossh.Client, gen uint64) {
	c.heard.Store(time.Now().UnixNano())
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		keepAlive(c.ctx, sshc, c.opts.KeepAlive, c.log, func() { c.heard.Store(time.Now().UnixNano()) })
		sshc.Close()
		c.lost(gen)
	}()
}

// keepAlive returns when the connection ends, stops answering for three
// intervals, or ctx is done; answered is called at each answer.
func keepAlive(ctx context.Context, sshc *gossh.Client, every time.Duration, log *slog.Logger, answered func()) {
	ended := make(chan struct{})
	go func() { sshc.Wait(); close(ended) }()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ended:
			return
		case <-t.C:
		}
		replied := make(chan error, 1)
		go func() {
			_, _, err := sshc.SendRequest("keepalive@openssh.com", true, nil)
			replied <- err
		}()
		select {
		case err := <-replied:
			if err != nil {
				return
			}
			answered()
		case <-time.After(3 * every):
			log.Warn("fs: the delegator stopped answering")
			return
		case <-ctx.Done():
			return
		case <-ended:
			return
		}
	}
}

// notify has onUp told of every connection from now on, the current one
// (if up) at once.
func (c *conn) notify(onUp func(client *sftpc.Client, gen uint64)) {
	c.mu.Lock()
	c.onUp = onUp
	client, gen := c.client, c.gen
	up := c.dead == nil && c.downAt.IsZero()
	c.mu.Unlock()
	if up {
		onUp(client, gen)
	}
}

// upGen is the current connection's generation, 0 while it is down.
func (c *conn) upGen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead != nil || !c.downAt.IsZero() {
		return 0
	}
	return c.gen
}

// live returns the current client, or nil if the connection is down.
func (c *conn) live() *sftpc.Client {
	client, _ := c.liveAt()
	return client
}

// liveAt is live with the connection's number.
func (c *conn) liveAt() (*sftpc.Client, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead != nil || !c.downAt.IsZero() {
		return nil, 0
	}
	return c.client, c.gen
}

// get returns the current client, waiting for a reconnection if the
// connection is down: at most until the bound has passed since the call
// began (since) or since the outage did, whichever came first. A call made
// during a silent outage (the delegator frozen, its TCP connection open)
// blocks on its answer until the keepalives notice (three unanswered, by
// default 15–20 s) and then waits here only for what is left of its bound.
func (c *conn) get(ctx context.Context, since time.Time) (*sftpc.Client, uint64, error) {
	for {
		c.mu.Lock()
		client, gen, up, dead, downAt := c.client, c.gen, c.up, c.dead, c.downAt
		c.mu.Unlock()
		if dead != nil {
			return nil, 0, dead
		}
		if downAt.IsZero() {
			return client, gen, nil
		}
		wait := time.Until(minTime(downAt, since).Add(c.opts.ReconnectBound))
		if wait <= 0 {
			return nil, 0, errUnreachable
		}
		t := time.NewTimer(wait)
		select {
		case <-up:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, 0, ctx.Err()
		}
		t.Stop()
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// lost reports that connection gen failed; the first report starts the
// re-dialler.
func (c *conn) lost(gen uint64) {
	if c.ctx.Err() != nil {
		return // closing: the end is ours, not a loss
	}
	c.mu.Lock()
	if gen != c.gen || !c.downAt.IsZero() || c.dead != nil {
		c.mu.Unlock()
		return
	}
	c.downAt = time.Now()
	c.up = make(chan struct{})
	old := c.client
	c.mu.Unlock()
	old.Close()
	c.metrics.MountLost()
	c.log.Warn("fs: connection to the delegator lost; re-dialling")
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.redial(gen) }()
}

// redial dials with backoff until it gets through, the login is refused
// (the lease is over), or the mount is closing.
func (c *conn) redial(gen uint64) {
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-c.ctx.Done():
			c.end(errGone)
			return
		case <-time.After(backoff):
		}
		sshc, client, err := dial(c.ctx, c.opts)
		if err == nil {
			c.mu.Lock()
			c.ssh, c.client, c.gen = sshc, client, gen+1
			outage := time.Since(c.downAt)
			c.downAt = time.Time{}
			close(c.up)
			onUp := c.onUp
			c.mu.Unlock()
			c.metrics.MountBack(outage)
			c.log.Info("fs: reconnected to the delegator", "outage", outage.Round(time.Millisecond))
			c.watch(sshc, gen+1)
			if onUp != nil {
				onUp(client, gen+1)
			}
			return
		}
		if c.ctx.Err() != nil {
			c.end(errGone)
			return
		}
		if !transient(err) {
			c.log.Warn("fs: the delegator refused the connection; the lease is over", "err", err)
			c.end(errGone)
			return
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// transient tells a delegator that is not there (yet) from one that
// refuses us: a network error, or a connection cut during the handshake,
// is worth another try; a refused certificate or a wrong host key is not.
func transient(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.As(err, new(errDial)) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, os.ErrDeadlineExceeded)
}

func (c *conn) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead != nil {
		return
	}
	c.dead = err
	select {
	case <-c.up:
	default:
		close(c.up)
	}
	close(c.done)
}

// close ends the connection for good and waits for its goroutines.
func (c *conn) close() {
	c.stop()
	c.mu.Lock()
	client, sshc := c.client, c.ssh
	c.mu.Unlock()
	client.Close()
	sshc.Close()
	c.wg.Wait()
	c.end(errGone)
}

// connErr reports an error that means the connection, not the request,
// failed: the call is worth retrying on the next connection.
func connErr(err error) bool {
	return errors.Is(err, sftpc.ErrConnLost) || errors.Is(err, net.ErrClosed)
}

// do runs op, a request naming paths, on a live client once what it must
// not overtake is settled (writeBehind.settleFor), and once more on the
// next connection if the connection failed under it.
func do[T any](ctx context.Context, c *conn, paths []string, op func(*sftpc.Client) (T, error)) (T, error) {
	since := time.Now()
	if err := c.writes.settleFor(ctx, paths...); err != nil {
		var zero T
		return zero, err
	}
	return retriedSince(ctx, c, since, op)
}

// retried is do without settling first.
func retried[T any](ctx context.Context, c *conn, op func(*sftpc.Client) (T, error)) (T, error) {
	return retriedSince(ctx, c, time.Now(), op)
}

// retriedSince is retried of a call that began at since. Each attempt is
// bounded too: one still unanswered when the reconnect bound from since
// has passed, on a connection not heard from since the call began, gives
// the connection up (its requests then fail at once) rather than wait for
// the keepalives, whose notice under load came seconds past the bound.
func retriedSince[T any](ctx context.Context, c *conn, since time.Time, op func(*sftpc.Client) (T, error)) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		client, gen, err := c.get(ctx, since)
		if err != nil {
			return zero, err
		}
		bound := time.AfterFunc(time.Until(since.Add(c.opts.ReconnectBound)), func() {
			if c.heard.Load() < since.UnixNano() {
				c.log.Warn("fs: a call went unanswered for the reconnect bound; the connection is given up")
				c.lost(gen)
			}
		})
		v, err := op(client)
		bound.Stop()
		if err == nil || !connErr(err) || attempt == 1 {
			return v, err
		}
		c.lost(gen)
	}
}

// reconnecting is how the tree reaches the delegator: every call goes to
// the live connection and survives one reconnection. ctx is the FUSE
// request's: a call waiting for the delegator ends when the caller is
// interrupted.
type reconnecting struct {
	c   *conn
	ctx context.Context
}

func unit(err error) (struct{}, error) { return struct{}{}, err }

func (r reconnecting) run(paths []string, op func(*sftpc.Client) error) error {
	_, err := do(r.ctx, r.c, paths, func(cl *sftpc.Client) (struct{}, error) { return unit(op(cl)) })
	return err
}

func (r reconnecting) Lstat(p string) (sftpc.Attrs, error) {
	return do(r.ctx, r.c, []string{p}, func(cl *sftpc.Client) (sftpc.Attrs, error) { return cl.Lstat(p) })
}

func (r reconnecting) ReadDir(p string) ([]sftpc.Entry, error) {
	return do(r.ctx, r.c, []string{p}, func(cl *sftpc.Client) ([]sftpc.Entry, error) { return cl.ReadDir(p) })
}

func (r reconnecting) OpenFile(p string, pflags, perm uint32) (*sftpc.File, error) {
	return do(r.ctx, r.c, []string{p}, func(cl *sftpc.Client) (*sftpc.File, error) { return cl.OpenFile(p, pflags, perm) })
}

// OpenRead is sftpc's OpenRead: the open, the file's first n bytes and its
// attributes in one round trip.
func (r reconnecting) OpenRead(p string, pflags, perm uint32, n int) (*sftpc.File, sftpc.Opened, error) {
	type opened struct {
		f *sftpc.File
		o sftpc.Opened
	}
	v, err := do(r.ctx, r.c, []string{p}, func(cl *sftpc.Client) (opened, error) {
		f, o, err := cl.OpenRead(p, pflags, perm, n)
		return opened{f, o}, err
	})
	return v.f, v.o, err
}

func (r reconnecting) ReadLink(p string) (string, error) {
	return do(r.ctx, r.c, []string{p}, func(cl *sftpc.Client) (string, error) { return cl.ReadLink(p) })
}

// StatVFS waits for every remove: the space they free shows in it.
func (r reconnecting) StatVFS(p string) (sftpc.StatVFS, error) {
	return do(r.ctx, r.c, []string{"/"}, func(cl *sftpc.Client) (sftpc.StatVFS, error) { return cl.StatVFS(p) })
}

// then sends first and, right behind it, an LSTAT of p, and returns the
// attributes if first succeeded. Our server runs requests naming the same
// path in order, so the LSTAT sees first's effect: one round trip. paths
// are what first names.
func (r reconnecting) then(p string, paths []string, first func(*sftpc.Client) *sftpc.Call) (sftpc.Attrs, error) {
	return do(r.ctx, r.c, paths, func(cl *sftpc.Client) (sftpc.Attrs, error) {
		return first(cl).Then(cl.StartLstat(p))
	})
}

// Mkdir makes directory p with perm and returns its attributes.
func (r reconnecting) Mkdir(p string, perm uint32) (sftpc.Attrs, error) {
	return r.then(p, []string{p}, func(cl *sftpc.Client) *sftpc.Call { return cl.StartMkdir(p, perm) })
}

// Setstat sets what set.Flags names on p and returns p's attributes.
func (r reconnecting) Setstat(p string, set sftpc.Attrs) (sftpc.Attrs, error) {
	return r.then(p, []string{p}, func(cl *sftpc.Client) *sftpc.Call { return cl.StartSetstat(p, set) })
}

func (r reconnecting) Remove(p string) error {
	return r.run([]string{p}, func(cl *sftpc.Client) error { return cl.Remove(p) })
}

func (r reconnecting) RemoveDirectory(p string) error {
	return r.run([]string{p}, func(cl *sftpc.Client) error { return cl.RemoveDirectory(p) })
}

func (r reconnecting) PosixRename(from, to string) error {
	return r.run([]string{from, to}, func(cl *sftpc.Client) error { return cl.PosixRename(from, to) })
}

// Symlink makes link point at target and returns link's attributes.
func (r reconnecting) Symlink(target, link string) (sftpc.Attrs, error) {
	return r.then(link, []string{link}, func(cl *sftpc.Client) *sftpc.Call { return cl.StartSymlink(target, link) })
}

// Link makes to a hard link of from and returns its attributes.
func (r reconnecting) Link(from, to string) (sftpc.Attrs, error) {
	return r.then(to, []string{from, to}, func(cl *sftpc.Client) *sftpc.Call { return cl.StartLink(from, to) })
}

// generation is the number of the current connection.
func (c *conn) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}
