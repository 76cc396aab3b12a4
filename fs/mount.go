// Package fs is the executor's view of a delegated directory: a go-fuse
// filesystem over an SFTP client, mounted in-process.
//
// # Connection
//
// The client dials the delegator's embedded SSH server with the START's
// certificate and pins the host key START carries; nothing else from START
// is interpreted. Keepalives run on the connection: when the delegator is
// away for longer than the bound, the connection is closed and every call
// fails with EIO instead of hanging.
//
// # Caching
//
// The kernel caches entries and attributes for EntryTimeout/AttrTimeout
// (default 1s), so changes on the delegator's side show within that time.
// What the mount itself keeps — a directory's listing (listing), files
// read ahead of a reader (readAhead) — is used no longer than that, and
// not at all once the mount has changed anything since it was read.
// Where the delegator's watch is exact (watch.go), the kernel keeps
// entries, negative entries, attributes and pages until told they
// changed, for up to watchedFor (keepFor).
package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/awcp/awcp/fs/sftpc"
	"github.com/awcp/awcp/internal/bufconn"
	"github.com/awcp/awcp/internal/mountinfo"
	"github.com/awcp/awcp/internal/untrusted"
)

// Options configures a mount.
type Options struct {
	// Addr is the delegator's SSH server, host:port. Required: with Dial
	// set, it names the delegator in errors and logs only.
	Addr string
	// Dial, if set, gives the connection to the delegator instead of a
	// TCP dial of Addr: the reverse live mount's, which waits for a
	// connection the delegator opened (control/tunnel.go). It is called
	// again at every reconnection, with a context that ends with the
	// mount; an error is taken as transient (try again within the bound)
	// unless the context is done.
	Dial func(ctx context.Context) (net.Conn, error)
	// User is the login name (the delegation id). Required.
	User string
	// Export is the directory to mount on the delegator's side, as START's
	// exportLocator names it: relative to where the SFTP session starts,
	// or absolute. Required: the mount never falls back to the server's
	// root, which a plain SFTP server (OpenSSH's) makes the whole machine.
	Export string
	// Signer is the certificate signer from START's credential. Required.
	Signer gossh.Signer
	// HostKey is the delegator's host key, pinned. Required unless
	// HostKeyCallback is set: never trust-on-first-use by default.
	HostKey gossh.PublicKey
	// HostKeyCallback checks the host key where there is none to pin (a
	// delegator that sends none: known_hosts, or an operator's explicit
	// choice to accept any). HostKey wins if both are set.
	HostKeyCallback gossh.HostKeyCallback
	// ReadOnly mounts read-only: writes fail with EROFS, and are counted
	// (Mount.Refused).
	ReadOnly bool
	// LentTo, if set, is the local user the mount is lent to (the
	// executor's agent, running as a uid of its own): it may use the
	// mount (allow_other, which only root may set), and every file shows
	// as its own, so that tools that check ownership (git's
	// safe.directory) take the work dir for the agent's. The delegator's
	// owners mean nothing here: ownership is not delegated.
	LentTo *Owner
	// Name shows in /proc/self/mountinfo as the source.
	Name string
	// EntryTimeout and AttrTimeout are the kernel cache times. Default 1s.
	EntryTimeout, AttrTimeout time.Duration
	// KeepAlive is the interval of SSH keepalives; a connection that does
	// not answer within 3 of them is closed. Default 5s.
	KeepAlive time.Duration
	// DialTimeout bounds connecting. Default 15s.
	DialTimeout time.Duration
	// ReconnectBound is how long a call waits for the delegator, counted
	// from the call, before it fails with EIO: for a lost connection to
	// come back, or for the keepalives to notice a silent one (which takes
	// three to four KeepAlive intervals, so KeepAlive is cut to a quarter
	// of the bound). Default 30s.
	ReconnectBound time.Duration
	// Logger default slog.Default().
	Logger *slog.Logger
	// Debug logs every FUSE request.
	Debug bool
	// Metrics receives the FUSE requests and the connection's outages.
	// Default: none.
	Metrics Metrics
	// NoWatch leaves the delegator's reports of its changes unasked
	// (watch.go): caches then hold until their timeouts, as against a
	// server without them. For the tests of the caches themselves.
	NoWatch bool
}

func (o Options) withDefaults() Options {
	if o.EntryTimeout <= 0 {
		o.EntryTimeout = time.Second
	}
	if o.AttrTimeout <= 0 {
		o.AttrTimeout = time.Second
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 5 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 15 * time.Second
	}
	if o.ReconnectBound <= 0 {
		o.ReconnectBound = 30 * time.Second
	}
	o.KeepAlive = min(o.KeepAlive, o.ReconnectBound/4)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Name == "" {
		o.Name = "awcp"
	}
	return o
}

func (o Options) validate() error {
	if o.Addr == "" || o.User == "" || o.Export == "" || o.Signer == nil || (o.HostKey == nil && o.HostKeyCallback == nil) {
		return errors.New("fs: Addr, User, Export, Signer and HostKey (or HostKeyCallback) are required")
	}
	return nil
}

// filesystem is what every node shares.
type filesystem struct {
	conn  *conn // the live connection
	room  room  // what may still be written behind (room.go)
	log   *slog.Logger
	entry time.Duration
	attr  time.Duration

	// watchedGen is the connection whose watch runs (watch.go); 0 while
	// none does.
	watchedGen atomic.Uint64
	// exactGen is the connection whose watch is exact (wire.WatchExact):
	// while it is the live one, the kernel keeps entries, attributes and
	// pages until the watch says they changed. 0 while none is.
	exactGen atomic.Uint64
	// prefetch reads files read at scattered offsets whole (prefetch.go).
	prefetch *prefetcher
	// invalidated counts the watch's invalidations. An answer read while
	// it moved may predate a change reported meanwhile (the kernel takes
	// the answer after the invalidation meant for it), so it is kept only
	// as long as without the watch.
	invalidated atomic.Uint64

	closing sync.WaitGroup // remote handles being closed in the background
	// closingSet is the handles released with writes perhaps on the wire,
	// until closed on the delegator (awaitClosing).
	closingMu  sync.Mutex
	closingSet map[*fileHandle]struct{}

	// changes moves before and after every request of this mount that
	// changes the tree (a write: before and after it is queued). A
	// directory listing or a read ahead asked for while it stood still is
	// current.
	changes atomic.Uint64

	listings listingRing
	// dirsAhead is the listings read ahead of a walk (listahead.go), and
	// forgets counts the nodes the kernel forgot.
	dirsAhead *listAhead
	forgets   atomic.Uint64
	root      *node // the mount's root, whose attributes the tree's pages lack
	// warm is the tree fetched ahead of the agent (warm.go).
	warm      warmStore
	warmStart sync.Once
	warmed    chan struct{} // closed once the tree was fetched ahead, or the walk gave up
	ahead     readAhead

	// freed counts the requests that may free space (remove, rmdir,
	// rename, truncate): each voids the statvfs answer kept (statfs).
	freed  atomic.Uint64
	statfs statfsCache

	refused  refusals // a read-only mount's refused writes (readonly.go)
	changed  changeLog
	readOnly bool // Options.ReadOnly

	// owner is 1 + the uid the delegator gives the files this mount
	// makes — its user's — once one was made; 0 before.
	owner atomic.Uint64
	// lentTo is whom every file shows as owned by (Options.LentTo); nil
	// shows the delegator's owners.
	lentTo *Owner

	// longNegatives are the names the kernel was told are missing for
	// longer than the configured timeout (negatives), by their directory's
	// node: a dropped tree forgets its entries through the names it knows,
	// but a name found missing is known to the kernel only. Without this,
	// a file the owner made while the connection was down stayed missing
	// for the hour of an exact watch.
	negMu         sync.Mutex
	longNegatives map[negativeEntry]struct{}
	// notifyEntry has the kernel forget name in directory node parent;
	// set once mounted.
	notifyEntry func(parent uint64, name string)
}

// learnOwner records a's owner, that of a file or directory just made
// here, as the delegator's user.
func (f *filesystem) learnOwner(a sftpc.Attrs) { f.owner.Store(uint64(a.UID) + 1) }

// mayRemoveIn reports whether the delegator's user may remove what a
// directory owned by uid with mode holds: it is root, or it owns the
// directory, which has the owner's write and search bits. False while that
// user is not known.
func (f *filesystem) mayRemoveIn(uid, mode uint32) bool {
	owner := f.owner.Load()
	if owner == 0 {
		if uid, _, told := f.room.creator(syscall.S_IFDIR, 0); told {
			owner = uint64(uid) + 1
		} else {
			return false
		}
	}
	return owner == 1 || (uint64(uid)+1 == owner && mode&0o300 == 0o300)
}

// changing marks a change to the tree starting, to the nodes ns (the
// file or directory changed, and the directories whose names change); call
// what it returns when the change is answered. Each of ns, and its
// directory, keeps the count of its latest change (node.changedAt): what
// was read of it at a lower count — a listing, a file read ahead — is
// still current. (The directory, because the kernel may forget a node, and
// its stamp with it, before its entry in a listing expires.)
func (f *filesystem) changing(ns ...*node) func() { return f.changingIn(nil, nil, ns...) }

// changingIn is changing, for a change that makes, removes or renames the
// names of directory dir (nil: none): dir's listing is changed for those
// names alone (node.entryChanged), where a directory among ns is changed
// for all of its names.
func (f *filesystem) changingIn(dir *node, names []string, ns ...*node) func() {
	stamp := func() {
		all := ns
		if dir != nil {
			all = append([]*node{dir}, ns...)
		}
		v := f.warm.change(&f.changes, all)
		if dir != nil {
			f.warm.voidNode(dir)
			dir.entryChanged(v, names...)
			dir.stampWithParent(v)
		}
		for _, n := range ns {
			if n == nil {
				continue
			}
			f.warm.voidNode(n)
			n.entryChanged(v)
			n.stampWithParent(v)
		}
	}
	stamp()
	return stamp
}

// stampWithParent stamps n, and its directory for n's name there: its
// entry there is of n as it was.
func (n *node) stampWithParent(v uint64) {
	n.stamp(v)
	if name, parent := n.Parent(); parent != nil {
		if pn, ok := parent.Operations().(*node); ok {
			pn.stamp(v)
			pn.entryChanged(v, name)
		}
	}
}

// hidden reports whether p, a path below a directory the mount reached,
// is hidden by the server's policy: it is refused without asking.
func (f *filesystem) hidden(p string) bool {
	client, _ := f.conn.liveAt()
	if client == nil {
		return false
	}
	return client.Hides().HiddenLeaf(strings.TrimPrefix(p, "/"))
}

// refusesGit reports whether the server of client refuses a change to
// p: one of git's control paths where the export protects them.
func refusesGit(client *sftpc.Client, p string) bool {
	return client != nil && client.Policy().ProtectGit && untrusted.GitControlled(strings.TrimPrefix(p, "/"))
}

// at reaches the delegator for one FUSE request: ctx ends a wait for the
// delegator when the caller is interrupted.
func (f *filesystem) at(ctx context.Context) reconnecting {
	return reconnecting{c: f.conn, ctx: ctx}
}

// watchedFor is how long the kernel keeps entries, attributes and
// negative entries while the watch is exact: the whole lease, in effect.
const watchedFor = time.Hour

// stamp is taken before a request asks the delegator, for keepFor.
func (f *filesystem) stamp() uint64 { return f.invalidated.Load() }

// keepFor is how long the kernel may keep an entry and attributes read
// since stamp s.
func (f *filesystem) keepFor(s uint64) (entry, attr time.Duration) {
	if f.exactSince(s) != 0 {
		return watchedFor, watchedFor
	}
	return f.entry, f.attr
}

// exactSince is the connection whose exact watch has reported nothing
// since stamp s, 0 if there is none: what was read since s is current
// until that watch says otherwise.
func (f *filesystem) exactSince(s uint64) uint64 {
	if g := f.exactNow(); g != 0 && f.invalidated.Load() == s {
		return g
	}
	return 0
}

func (f *filesystem) setEntryTimeouts(out *fuse.EntryOut, s uint64) {
	entry, _ := f.keepFor(s)
	out.SetEntryTimeout(entry)
	out.SetAttrTimeout(f.attrFor(s, &out.Attr))
}

// attrFor is how long the kernel may keep attributes a, read since stamp
// s.
func (f *filesystem) attrFor(s uint64, a *fuse.Attr) time.Duration {
	if linkedElsewhere(a) {
		return f.attr
	}
	_, attr := f.keepFor(s)
	return attr
}

// linkedElsewhere reports whether a is of a file with more than one link:
// one may be outside the export, and a change made through it is not
// reported (the kernel tells watches of the directory a file was changed
// through), so its attributes and pages are kept only as without the
// watch.
func linkedElsewhere(a *fuse.Attr) bool {
	return a.Mode&syscall.S_IFMT == syscall.S_IFREG && a.Nlink > 1
}

// exact reports whether the kernel may keep what it holds until told.
func (f *filesystem) exact() bool { return f.exactNow() != 0 }

// exactNow is the connection whose watch is exact, 0 if the current one's
// is not.
func (f *filesystem) exactNow() uint64 {
	if g := f.exactGen.Load(); g != 0 && g == f.conn.upGen() {
		return g
	}
	return 0
}

// Refused is what a read-only mount refused so far.
func (m *Mount) Refused() Refusals { return m.fsys.refused.snapshot() }

// Mount is a live mount of a delegation.
type Mount struct {
	Mountpoint string

	server *fuse.Server
	fsys   *filesystem
	conn   *conn
	log    *slog.Logger

	stopWatch context.CancelFunc
	watchMu   sync.Mutex     // guards watchDone and the start of a watch (watching.Add)
	watchDone bool           // set by Unmount: no watch starts after it
	watching  sync.WaitGroup // the connections' watches

	dev uint64 // the mount's device: its FUSE connection's number (abortFUSE)

	unmountOnce sync.Once
	unmountErr  error
}

// Dial connects to the delegator and opens an SFTP session.
func Dial(opts Options) (*gossh.Client, *sftpc.Client, error) {
	return dial(context.Background(), opts)
}

// errDial marks an error of Options.Dial: transient, like a TCP dial's.
type errDial struct{ err error }

func (e errDial) Error() string { return e.err.Error() }
func (e errDial) Unwrap() error { return e.err }

// errHandshake marks an error of the SSH handshake (dialFirst).
type errHandshake struct{ err error }

func (e errHandshake) Error() string { return e.err.Error() }
func (e errHandshake) Unwrap() error { return e.err }

// dial is Dial, given up when ctx ends.
func dial(ctx context.Context, opts Options) (*gossh.Client, *sftpc.Client, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, nil, err
	}
	config := &gossh.ClientConfig{
		User:            opts.User,
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(currentSigner(opts.Signer))},
		HostKeyCallback: opts.HostKeyCallback,
	}
	if opts.HostKey != nil {
		config.HostKeyCallback = gossh.FixedHostKey(opts.HostKey)
		config.HostKeyAlgorithms = []string{opts.HostKey.Type()}
	}
	var tcp net.Conn
	var err error
	if opts.Dial != nil {
		dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
		tcp, err = opts.Dial(dctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			err = errDial{err}
		}
	} else {
		tcp, err = (&net.Dialer{Timeout: opts.DialTimeout}).DialContext(ctx, "tcp", opts.Addr)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the delegator at %s: %w", opts.Addr, err)
	}
	// The handshake, too, is bounded: a server that accepts and says
	// nothing must not hold the mount up.
	tcp.SetDeadline(time.Now().Add(opts.DialTimeout))
	// x/crypto/ssh would read the socket 16 KiB at a time (bufconn).
	c, chans, reqs, err := gossh.NewClientConn(bufconn.New(tcp), opts.Addr, config)
	if err != nil {
		tcp.Close()
		return nil, nil, fmt.Errorf("connect to the delegator at %s: %w", opts.Addr, errHandshake{err})
	}
	tcp.SetDeadline(time.Time{})
	conn := gossh.NewClient(c, chans, reqs)
	client, err := sftpc.Open(conn)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("start sftp: %w", err)
	}
	if err := within(client, opts.Export); err != nil {
		client.Close()
		conn.Close()
		return nil, nil, err
	}
	return conn, client, nil
}

// within makes client's paths relative to the export directory: its
// canonical path as the server resolves it (REALPATH), which must be a
// directory. Every connection resolves it again: a delegator that comes
// back finds it where it is then.
func within(client *sftpc.Client, export string) error {
	dir, err := client.RealPath(export)
	if err == nil && !path.IsAbs(dir) {
		err = fmt.Errorf("the server resolved it to %q, not an absolute path", dir)
	}
	if err != nil {
		return fmt.Errorf("the export directory %q: %w", export, err)
	}
	a, err := client.Lstat(dir)
	if err == nil && !a.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		return fmt.Errorf("the export directory %q (%s): %w", export, dir, err)
	}
	client.Within(dir)
	return nil
}

// New mounts the delegation at mountpoint, which must be an existing
// directory, and checks that the mount took (the device id changed, as
// spec §5.2 says).
func New(mountpoint string, opts Options) (*Mount, error) {
	opts = opts.withDefaults()
	before, err := deviceOf(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("mountpoint: %w", err)
	}
	c, err := newConn(opts)
	if err != nil {
		return nil, err
	}
	fsys := &filesystem{conn: c, log: opts.Logger, entry: opts.EntryTimeout, attr: opts.AttrTimeout, prefetch: newPrefetcher(), dirsAhead: newListAhead(), warmed: make(chan struct{}),
		lentTo: opts.LentTo, readOnly: opts.ReadOnly}
	root := &node{fsys: fsys}
	fsys.root = root
	// Negative entries are cached as long as positive ones: tools probe
	// for many files that do not exist (git does, a lot). Our own creates
	// replace the negative entry in the kernel at once.
	entry, attr, neg := opts.EntryTimeout, opts.AttrTimeout, opts.EntryTimeout
	mopts := fuse.MountOptions{
		FsName:        opts.Name,
		Name:          "awcp",
		MaxWrite:      sftpc.MaxData, // one FUSE write or read is one SFTP request
		MaxReadAhead:  kernelReadAhead,
		DisableXAttrs: true,
		// Our reads answer from memory: splicing them through a pipe is a
		// copy more (and go-fuse logs each 1 MiB read it cannot splice).
		DisableSplice: true,
		// The mount drops a file's pages itself where they may be stale
		// (node.told): the kernel would drop those of every file this
		// mount wrote, at the next stat.
		ExplicitDataCacheControl: true,
		Debug:                    opts.Debug,
		AllowOther:               opts.LentTo != nil,
	}
	server, err := mountFUSE(mountpoint, root, &fs.Options{
		MountOptions:    mopts,
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &neg,
		// Not 0, which stat(2) callers take for "no inode" (ls -i prints
		// "?"); children get go-fuse's numbers, far above it.
		RootStableAttr: &fs.StableAttr{Ino: 1},
	}, opts.Metrics, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		raw = negatives{raw, fsys}
		if opts.ReadOnly {
			raw = readOnly{raw, &fsys.refused} // readonly.go: refused here, to be counted
		}
		return raw
	})
	if err != nil {
		c.close()
		return nil, fmt.Errorf("mount: %w", err)
	}
	m := &Mount{Mountpoint: mountpoint, server: server, conn: c, log: opts.Logger, fsys: fsys}
	fsys.negMu.Lock()
	fsys.notifyEntry = func(parent uint64, name string) { server.EntryNotify(parent, name) }
	fsys.negMu.Unlock()
	after, err := deviceOf(mountpoint)
	m.dev = after
	if err != nil || after == before {
		m.Unmount()
		return nil, fmt.Errorf("mount at %s did not take (device %d before, %d after: %v)", mountpoint, before, after, err)
	}
	if err := widenReadAhead(after); err != nil {
		// Not root, or no sysfs: reads work, sequential ones are slower.
		m.log.Debug("fs: kernel read-ahead left at its default", "err", err)
	}
	if !opts.NoWatch {
		m.startWatching(&root.Inode)
	}
	return m, nil
}

// kernelReadAhead is how far ahead the kernel reads a file being read
// sequentially: four requests of sftpc.MaxData in flight keep the
// connection busy while the reader consumes the previous ones.
const kernelReadAhead = 4 << 20

// widenReadAhead sets the mount's kernel read-ahead window to kernelReadAhead.
// The FUSE INIT reply can only lower the backing device's default of
// 128 KiB, so without this a 1 MiB read(2) reaches us as 128 KiB requests
// with one or two in flight, each a round trip to the delegator (a cold
// sequential read ran at half the speed). Only root may write sysfs.
func widenReadAhead(dev uint64) error {
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(dev), unix.Minor(dev))
	return os.WriteFile(p, []byte(strconv.Itoa(kernelReadAhead>>10)), 0)
}

// Done is closed when the connection to the delegator has ended for good
// (the lease is over, or the mount is closing).
func (m *Mount) Done() <-chan struct{} { return m.conn.done }

// Unmount detaches the mount and closes the connection. If open files make
// the kernel refuse (EBUSY), it detaches lazily: the tree is gone from the
// namespace either way, and nothing below the mountpoint is ever deleted
// through it.
//
// It always returns, and the FUSE connection is over when it does: a
// connection still serving after unmountGrace (a process holding a file
// there, or a thread of this one waiting on its own mount, which would
// keep the process from ever exiting) is aborted through fusectl, and its
// requests fail.
func (m *Mount) Unmount() error {
	m.unmountOnce.Do(func() {
		detached := make(chan error, 1)
		go func() { detached <- m.detach() }()
		var err error
		select {
		case err = <-detached:
		case <-time.After(unmountGrace):
			m.log.Warn("fs: the mount is still in use; aborting its FUSE connection", "mountpoint", m.Mountpoint)
			if aerr := abortFUSE(m.dev); aerr != nil {
				m.log.Warn("fs: cannot abort the FUSE connection", "mountpoint", m.Mountpoint, "err", aerr)
			}
			select {
			case err = <-detached:
			case <-time.After(unmountGrace):
				// A request is held by a call to the delegator: end the
				// connection under it.
				m.conn.close()
				err = <-detached
			}
		}
		// Files unlinked behind whose removes are still unanswered:
		// wait for them (and send them again if the connection is down,
		// up to the reconnect bound) rather than leave them in doubt.
		m.fsys.prefetch.stop() // stores no more; its read ends with the connection
		m.conn.writes.settle(context.Background())
		// The closes of files released since (close(2) does not wait
		// for them) are sent once their writes are settled; a delegator
		// that does not answer them is not waited for past the grace:
		// ending the connection ends them.
		closed := make(chan struct{})
		go func() {
			m.fsys.closing.Wait()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(unmountGrace):
			m.log.Warn("fs: the delegator does not answer the closes of files; ending the connection", "mountpoint", m.Mountpoint)
			m.conn.close()
			<-closed
		}
		if m.stopWatch != nil {
			m.watchMu.Lock()
			m.watchDone = true
			m.watchMu.Unlock()
			m.stopWatch()
			m.watching.Wait()
		}
		m.conn.close()
		m.fsys.prefetch.wait()
		m.fsys.warm.drop() // its share of the process's bound back
		m.unmountErr = err
	})
	return m.unmountErr
}

// unmountGrace is how long Unmount waits for the kernel to let go of the
// mount before it aborts the connection. A variable for the tests.
var unmountGrace = 5 * time.Second

// detach unmounts, lazily where the kernel refuses (EBUSY: a process still
// has a file or its cwd there), and waits for the FUSE server to stop.
func (m *Mount) detach() error {
	var err error
	if mountinfo.IsMountpoint(m.Mountpoint) { // else unmounted from outside
		if err = m.server.Unmount(); err != nil {
			m.log.Warn("fs: unmount busy; detaching lazily", "mountpoint", m.Mountpoint, "err", err)
			if lerr := syscall.Unmount(m.Mountpoint, syscall.MNT_DETACH); lerr == nil {
				err = nil
			}
		}
	}
	m.server.Wait()
	return err
}

// abortFUSE aborts the FUSE connection of device dev (fusectl's abort
// file): every request waiting on it fails at once, and the server's reads
// end. fusectl is mounted if it is not (as root).
func abortFUSE(dev uint64) error {
	const ctl = "/sys/fs/fuse/connections"
	// fusectl names a connection by the kernel's dev_t: major<<20 | minor.
	name := strconv.FormatUint(uint64(unix.Major(dev))<<20|uint64(unix.Minor(dev)), 10)
	abort := filepath.Join(ctl, name, "abort")
	if !mountinfo.IsMountpoint(ctl) {
		if merr := syscall.Mount("fusectl", ctl, "fusectl", 0, ""); merr != nil && !errors.Is(merr, syscall.EBUSY) {
			return fmt.Errorf("mount fusectl: %w", merr)
		}
	}
	return os.WriteFile(abort, []byte("1"), 0)
}

// Wait blocks until the mount is gone (unmounted here or from outside).
func (m *Mount) Wait() { m.server.Wait() }

func deviceOf(p string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return 0, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return 0, fmt.Errorf("%s is not a directory", p)
	}
	return st.Dev, nil
}

// Unmount detaches whatever is mounted at p: `awcp-fs umount`.
func Unmount(p string) error {
	if err := syscall.Unmount(p, 0); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return syscall.Unmount(p, syscall.MNT_DETACH)
		}
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	return nil
}

// Mounted lists the mountpoints of awcp FUSE mounts.
func Mounted() ([]string, error) { return mountinfo.Points("fuse.awcp") }

// currentSigner is the signer a connection authenticates with: s, or the
// one s holds now, where it can change (a renewed session's certificate:
// control/executor's renewableSigner) — one whole signer per connection,
// never a key of one and a signature of another.
func currentSigner(s gossh.Signer) gossh.Signer {
	if c, ok := s.(interface{ Current() gossh.Signer }); ok {
		return c.Current()
	}
	return s
}

// CertSigner builds the signer for START's credential: an OpenSSH private
// key and the certificate for it.
func CertSigner(privateKey, certificate string) (gossh.Signer, error) {
	key, err := gossh.ParsePrivateKey([]byte(privateKey))
	if err != nil {
		return nil, fmt.Errorf("credential.privateKey: %w", err)
	}
	pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(certificate))
	if err != nil {
		return nil, fmt.Errorf("credential.certificate: %w", err)
	}
	cert, ok := pub.(*gossh.Certificate)
	if !ok {
		return nil, errors.New("credential.certificate is not a certificate")
	}
	return gossh.NewCertSigner(cert, key)
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
