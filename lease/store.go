package lease

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// Errors returned by Store.
var (
	// ErrNotFound: no record has that id.
	ErrNotFound = errors.New("no such delegation")
	// ErrExists: a record with that id is already stored.
	ErrExists = errors.New("delegation id already in use")
	// ErrBusy: CreateAssignment found the executor at its concurrency limit.
	ErrBusy = errors.New("maximum concurrent delegations reached")
)

// DirBusyError is returned by CreateDelegation when a live rw delegation
// already covers the directory (spec §6.5).
type DirBusyError struct {
	ID  string // the delegation holding the directory
	Dir string
}

func (e *DirBusyError) Error() string {
	return fmt.Sprintf("%s is already lent read-write by delegation %s", e.Dir, e.ID)
}

// AmbiguousError is returned by FindDelegation for a prefix of several ids.
type AmbiguousError struct {
	Prefix  string
	Matches int
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("%s is ambiguous: %d delegations start with it", e.Prefix, e.Matches)
}

var (
	bucketDelegations = []byte("delegations")
	bucketAssignments = []byte("assignments")
	bucketEvents      = []byte("events") // holds one sub-bucket per delegation
	bucketBlobs       = []byte("blobs")
	// bucketProgress holds, per delegation, the sequence numbers of its
	// progress events, oldest first (AppendProgress).
	bucketProgress = []byte("progress")
	progressCount  = []byte("n")
)

// Options configures a Store.
type Options struct {
	// Shared opens the bbolt file only for the length of each call, so that
	// several processes (a daemon and the CLI) take turns on it. Default
	// false: the file stays open, and locked, until Close.
	Shared bool
	// Timeout bounds the wait for another process's lock on the file.
	// Default 10s.
	Timeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Store keeps leases, their event streams and blobs in one bbolt file.
type Store struct {
	path string
	opts Options
	db   *bolt.DB // nil when Shared

	// When Shared, each call takes its turn on the file first: turn in
	// this process, then a lock on turnFile (the path with ".lock") among
	// processes. bbolt's own lock, which every open of the file takes,
	// is then free at once; waited for alone, it is polled every 50 ms,
	// and a daemon and the command line taking turns showed as 50 and
	// 100 ms steps in the time a delegation takes to start.
	turn     sync.Mutex // held across the call's open, transaction and close
	turnFile *os.File
	made     bool // the buckets exist: this process made sure once (under turn)
}

// Open opens or creates the store at path, creating its directory 0700 and
// the file 0600.
func Open(path string, opts Options) (*Store, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	s := &Store{path: path, opts: opts}
	if !opts.Shared {
		db, err := s.open()
		if err != nil {
			return nil, err
		}
		s.db = db
		return s, nil
	}
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open store lock: %w", err)
	}
	s.turnFile = f
	if err := s.with(false, func(*bolt.Tx) error { return nil }); err != nil { // made, and readable
		f.Close()
		return nil, err
	}
	return s, nil
}

// takeTurn locks the turn file among processes, polling briefly.
func (s *Store) takeTurn() error {
	fd := int(s.turnFile.Fd())
	deadline := time.Now().Add(s.opts.Timeout)
	wait := 250 * time.Microsecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR):
			return fmt.Errorf("lock store %s: %w", s.path, err)
		case time.Now().After(deadline):
			return fmt.Errorf("open store %s: another process holds it (is a daemon running with this state dir?)", s.path)
		}
		time.Sleep(wait)
		wait = min(wait*2, 4*time.Millisecond)
	}
}

func (s *Store) open() (*bolt.DB, error) {
	db, err := bolt.Open(s.path, 0o600, &bolt.Options{Timeout: s.opts.Timeout})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("open store %s: another process holds it (is a daemon running with this state dir?)", s.path)
		}
		return nil, fmt.Errorf("open store %s: %w", s.path, err)
	}
	if s.made {
		return db, nil // the buckets are there: no write (and sync) to read
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketDelegations, bucketAssignments, bucketEvents, bucketProgress, bucketBlobs, bucketAudit, bucketAuditMeta, bucketAuditCheap, bucketAuditSize} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init store %s: %w", s.path, err)
	}
	s.made = true // buckets are never removed
	return db, nil
}

// Close releases the file.
func (s *Store) Close() error {
	if s.turnFile != nil {
		return s.turnFile.Close()
	}
	if s.db == nil {
		return nil
	}
	return s.db.Close()
}

// Now is the store's clock.
func (s *Store) Now() time.Time { return s.opts.Now() }

func (s *Store) update(fn func(tx *bolt.Tx) error) error { return s.with(true, fn) }
func (s *Store) view(fn func(tx *bolt.Tx) error) error   { return s.with(false, fn) }

func (s *Store) with(write bool, fn func(tx *bolt.Tx) error) error {
	db := s.db
	if db == nil {
		s.turn.Lock()
		defer s.turn.Unlock()
		if err := s.takeTurn(); err != nil {
			return err
		}
		defer unix.Flock(int(s.turnFile.Fd()), unix.LOCK_UN)
		var err error
		if db, err = s.open(); err != nil {
			return err
		}
		defer db.Close()
	}
	if write {
		return db.Update(fn)
	}
	return db.View(fn)
}

type record interface{ lease() *Lease }

func get[T any](tx *bolt.Tx, bucket []byte, id string) (*T, error) {
	data := tx.Bucket(bucket).Get([]byte(id))
	if data == nil {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	v := new(T)
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", id, err)
	}
	return v, nil
}

func put(tx *bolt.Tx, bucket []byte, id string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", id, err)
	}
	return tx.Bucket(bucket).Put([]byte(id), data)
}

func list[T record](tx *bolt.Tx, bucket []byte) ([]T, error) {
	var out []T
	err := tx.Bucket(bucket).ForEach(func(k, data []byte) error {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("decode %s: %w", k, err)
		}
		out = append(out, v)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].lease().CreatedAt.Before(out[j].lease().CreatedAt) })
	return out, err
}

// change loads a record, lets fn modify it, optionally fires an event on it,
// and stores it, all in one transaction.
func change[T any, PT interface {
	*T
	record
}](s *Store, bucket []byte, id string, ev Event, note string, fn func(PT) error) (PT, error) {
	var out PT
	err := s.update(func(tx *bolt.Tx) error {
		v, err := get[T](tx, bucket, id)
		if err != nil {
			return err
		}
		p := PT(v)
		if ev != "" {
			if err := p.lease().fire(ev, note, s.opts.Now()); err != nil {
				return err
			}
		}
		if fn != nil {
			if err := fn(p); err != nil {
				return err
			}
		}
		out = p
		return put(tx, bucket, id, p)
	})
	return out, err
}

// CreateDelegation stores a new delegation in state created. A live
// delegation that writes in place (WritesInPlace) of the same or an
// overlapping directory makes it fail with *DirBusyError when d writes in
// place too; staged ones write only their staging areas.
func (s *Store) CreateDelegation(d *Delegation) error {
	d.State = Created
	d.CreatedAt = s.opts.Now()
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDelegations)
		if b.Get([]byte(d.ID)) != nil {
			return fmt.Errorf("%s: %w", d.ID, ErrExists)
		}
		if d.WritesInPlace() {
			live, err := list[*Delegation](tx, bucketDelegations)
			if err != nil {
				return err
			}
			for _, o := range live {
				if !o.State.Terminal() && o.WritesInPlace() && Overlaps(o.WriteArea(), d.WriteArea()) {
					return &DirBusyError{ID: o.ID, Dir: o.WriteArea()}
				}
			}
		}
		return put(tx, bucketDelegations, d.ID, d)
	})
}

// Overlaps reports whether one of two clean absolute paths contains the other.
func Overlaps(a, b string) bool {
	within := func(p, dir string) bool {
		return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
	}
	return within(a, b) || within(b, a)
}

// Delegation returns the delegation with id.
func (s *Store) Delegation(id string) (*Delegation, error) {
	var d *Delegation
	err := s.view(func(tx *bolt.Tx) (err error) {
		d, err = get[Delegation](tx, bucketDelegations, id)
		return err
	})
	return d, err
}

// EndedDelegations returns those of ids whose delegation has ended, or is
// not in the store, read in one transaction.
func (s *Store) EndedDelegations(ids []string) ([]string, error) {
	var ended []string
	err := s.view(func(tx *bolt.Tx) error {
		for _, id := range ids {
			d, err := get[Delegation](tx, bucketDelegations, id)
			switch {
			case errors.Is(err, ErrNotFound):
				ended = append(ended, id)
			case err != nil:
				return err
			case d.State.Terminal():
				ended = append(ended, id)
			}
		}
		return nil
	})
	return ended, err
}

// Delegations returns every delegation, oldest first.
func (s *Store) Delegations() ([]*Delegation, error) {
	var out []*Delegation
	err := s.view(func(tx *bolt.Tx) (err error) {
		out, err = list[*Delegation](tx, bucketDelegations)
		return err
	})
	return out, err
}

// FindDelegation returns the delegation whose id is idOrPrefix, else the
// only one whose id starts with it. No match is ErrNotFound; several are an
// *AmbiguousError. Keys are sorted, so one seek finds the candidates and
// only the match is decoded.
func (s *Store) FindDelegation(idOrPrefix string) (*Delegation, error) {
	var d *Delegation
	err := s.view(func(tx *bolt.Tx) error {
		prefix := []byte(idOrPrefix)
		c := tx.Bucket(bucketDelegations).Cursor()
		k, _ := c.Seek(prefix)
		if k == nil || len(prefix) == 0 || !bytes.HasPrefix(k, prefix) {
			return fmt.Errorf("delegation %q: %w", idOrPrefix, ErrNotFound)
		}
		id := string(k)
		if !bytes.Equal(k, prefix) { // a prefix: it must be the only one
			matches := 1
			for k, _ = c.Next(); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
				matches++
			}
			if matches > 1 {
				return &AmbiguousError{Prefix: idOrPrefix, Matches: matches}
			}
		}
		var err error
		d, err = get[Delegation](tx, bucketDelegations, id)
		return err
	})
	return d, err
}

// FireDelegation applies event ev to delegation id and then fn (which may be
// nil), and commits both together. A refused transition changes nothing and
// returns an error wrapping *TransitionError.
func (s *Store) FireDelegation(id string, ev Event, note string, fn func(*Delegation) error) (*Delegation, error) {
	return change[Delegation](s, bucketDelegations, id, ev, note, fn)
}

// UpdateDelegation applies fn to delegation id without a transition.
func (s *Store) UpdateDelegation(id string, fn func(*Delegation) error) (*Delegation, error) {
	return change[Delegation](s, bucketDelegations, id, "", "", fn)
}

// CreateAssignment stores a new assignment in state accepted, unless
// maxActive assignments are already active (ErrBusy) or the id is taken.
// The count and the insert are one transaction, so concurrent INVITEs
// cannot overshoot the limit.
func (s *Store) CreateAssignment(a *Assignment, maxActive int) error {
	now := s.opts.Now()
	a.State = Accepted
	a.CreatedAt = now
	a.AcceptedAt = now
	a.Transitions = []Transition{{From: Invited, To: Accepted, Event: ReceiveAccept, At: now, Note: "INVITE accepted"}}
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAssignments)
		if b.Get([]byte(a.ID)) != nil {
			return fmt.Errorf("%s: %w", a.ID, ErrExists)
		}
		active, err := activeAssignments(tx)
		if err != nil {
			return err
		}
		if active >= maxActive {
			return ErrBusy
		}
		return put(tx, bucketAssignments, a.ID, a)
	})
}

// ActiveAssignments counts the assignments that hold a slot.
func (s *Store) ActiveAssignments() (int, error) {
	var n int
	err := s.view(func(tx *bolt.Tx) (err error) {
		n, err = activeAssignments(tx)
		return err
	})
	return n, err
}

// activeAssignments counts, reading only each record's state: it runs for
// every INVITE and every (unauthenticated) GET /manifest, and a record
// holds its task's prompt.
func activeAssignments(tx *bolt.Tx) (int, error) {
	n := 0
	err := tx.Bucket(bucketAssignments).ForEach(func(k, data []byte) error {
		var rec struct {
			State State `json:"state"`
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("decode %s: %w", k, err)
		}
		if !rec.State.Terminal() {
			n++
		}
		return nil
	})
	return n, err
}

// DelegationCensus counts the delegations by state and transport.
func (s *Store) DelegationCensus() (map[[2]string]int, error) { return s.census(bucketDelegations) }

// AssignmentCensus counts the assignments by state and transport.
func (s *Store) AssignmentCensus() (map[[2]string]int, error) { return s.census(bucketAssignments) }

// census reads only each record's state and transport: it runs at every
// scrape of the metrics.
func (s *Store) census(bucket []byte) (map[[2]string]int, error) {
	out := map[[2]string]int{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, data []byte) error {
			var rec struct {
				State     State  `json:"state"`
				Transport string `json:"transport"`
			}
			if err := json.Unmarshal(data, &rec); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			out[[2]string{string(rec.State), rec.Transport}]++
			return nil
		})
	})
	return out, err
}

// Assignment returns the assignment with id.
func (s *Store) Assignment(id string) (*Assignment, error) {
	var a *Assignment
	err := s.view(func(tx *bolt.Tx) (err error) {
		a, err = get[Assignment](tx, bucketAssignments, id)
		return err
	})
	return a, err
}

// Assignments returns every assignment, oldest first.
func (s *Store) Assignments() ([]*Assignment, error) {
	var out []*Assignment
	err := s.view(func(tx *bolt.Tx) (err error) {
		out, err = list[*Assignment](tx, bucketAssignments)
		return err
	})
	return out, err
}

// UpdateAssignment applies fn to assignment id without a transition.
func (s *Store) UpdateAssignment(id string, fn func(*Assignment) error) (*Assignment, error) {
	return change[Assignment](s, bucketAssignments, id, "", "", fn)
}

// FireAssignment applies ev to assignment id, then fn (may be nil), and
// appends events (nil ones skipped) to its stream, all in one transaction:
// the events a subscriber sees and the state a restart finds never
// disagree. It returns the sequence number given to the last event.
func (s *Store) FireAssignment(id string, ev Event, note string, fn func(*Assignment) error, events ...[]byte) (*Assignment, uint64, error) {
	var (
		out *Assignment
		seq uint64
	)
	err := s.update(func(tx *bolt.Tx) error {
		a, err := get[Assignment](tx, bucketAssignments, id)
		if err != nil {
			return err
		}
		if err := a.fire(ev, note, s.opts.Now()); err != nil {
			return err
		}
		if fn != nil {
			if err := fn(a); err != nil {
				return err
			}
		}
		var add [][]byte
		for _, e := range events {
			if e != nil {
				add = append(add, e)
			}
		}
		if len(add) > 0 {
			if seq, err = appendEvents(tx, id, add); err != nil {
				return err
			}
		}
		out = a
		return put(tx, bucketAssignments, id, a)
	})
	return out, seq, err
}

// DeleteAssignment removes an assignment and its events.
func (s *Store) DeleteAssignment(id string) error {
	return s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketAssignments).Delete([]byte(id)); err != nil {
			return err
		}
		err := tx.Bucket(bucketEvents).DeleteBucket([]byte(id))
		if errors.Is(err, berrors.ErrBucketNotFound) {
			err = nil
		}
		if err == nil {
			err = tx.Bucket(bucketProgress).DeleteBucket([]byte(id))
			if errors.Is(err, berrors.ErrBucketNotFound) {
				err = nil
			}
		}
		return err
	})
}

// PutBlob stores data under key, replacing what was there.
func (s *Store) PutBlob(key string, data []byte) error {
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketBlobs).Put([]byte(key), data) })
}

// Blob returns the data stored under key, or ErrNotFound.
func (s *Store) Blob(key string) ([]byte, error) {
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketBlobs).Get([]byte(key))
		if v == nil {
			return fmt.Errorf("blob %s: %w", key, ErrNotFound)
		}
		out = append([]byte(nil), v...)
		return nil
	})
	return out, err
}

// DeleteBlob removes key; a missing key is not an error.
func (s *Store) DeleteBlob(key string) error {
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketBlobs).Delete([]byte(key)) })
}
