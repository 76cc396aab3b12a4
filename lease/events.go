package lease

// A delegation's event stream, as the executor keeps it for its SSE
// endpoint: events numbered from 1 in a bucket of their own, progress
// events kept to the last few.

import (
	"encoding/binary"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// StoredEvent is one event of a delegation's stream with its sequence number
// (the SSE id), starting at 1.
type StoredEvent struct {
	Seq  uint64
	Data []byte
}

func appendEvents(tx *bolt.Tx, id string, events [][]byte) (uint64, error) {
	b, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists([]byte(id))
	if err != nil {
		return 0, err
	}
	var seq uint64
	for _, data := range events {
		if seq, err = b.NextSequence(); err != nil {
			return 0, err
		}
		if err := b.Put(seqKey(seq), data); err != nil {
			return 0, err
		}
	}
	return seq, nil
}

func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}

// AppendEvents adds events to the stream of a live assignment and returns
// the last sequence number. It fails once the assignment is terminal, so no
// event ever follows a terminal one.
func (s *Store) AppendEvents(id string, events [][]byte) (uint64, error) {
	var seq uint64
	err := s.update(func(tx *bolt.Tx) (err error) {
		seq, err = appendLive(tx, id, events)
		return err
	})
	return seq, err
}

// appendLive appends events to id's stream, unless its assignment is
// terminal.
func appendLive(tx *bolt.Tx, id string, events [][]byte) (uint64, error) {
	a, err := get[Assignment](tx, bucketAssignments, id)
	if err != nil {
		return 0, err
	}
	if a.State.Terminal() {
		return 0, fmt.Errorf("delegation %s: %w", id, &TransitionError{From: a.State, Event: "APPEND_EVENT"})
	}
	return appendEvents(tx, id, events)
}

// AppendProgress is AppendEvents for progress events, of which only the
// last keep are kept: older ones are deleted as new ones come, so that an
// agent that prints without end fills no disk. A reader that comes back
// after more than keep of them finds the run it missed gone (the
// sequence numbers jump), and can say so.
func (s *Store) AppendProgress(id string, events [][]byte, keep int) (uint64, error) {
	var seq uint64
	err := s.update(func(tx *bolt.Tx) error {
		var err error
		if seq, err = appendLive(tx, id, events); err != nil {
			return err
		}
		idx, err := tx.Bucket(bucketProgress).CreateBucketIfNotExists([]byte(id))
		if err != nil {
			return err
		}
		for s := seq - uint64(len(events)) + 1; s <= seq; s++ {
			if err := idx.Put(seqKey(s), nil); err != nil {
				return err
			}
		}
		// The count is kept under a key that sorts after every sequence
		// number (they start with a zero byte).
		var n uint64
		if v := idx.Get(progressCount); len(v) == 8 {
			n = binary.BigEndian.Uint64(v)
		}
		n += uint64(len(events))
		evs := tx.Bucket(bucketEvents).Bucket([]byte(id))
		c := idx.Cursor()
		for k, _ := c.First(); keep > 0 && n > uint64(keep) && len(k) == 8; k, _ = c.First() {
			if err := evs.Delete(k); err != nil {
				return err
			}
			if err := c.Delete(); err != nil {
				return err
			}
			n--
		}
		return idx.Put(progressCount, seqKey(n))
	})
	return seq, err
}

// storedEvent is the event at key k with data v, copied: v is only valid
// inside its transaction.
func storedEvent(k, v []byte) StoredEvent {
	return StoredEvent{Seq: binary.BigEndian.Uint64(k), Data: append([]byte(nil), v...)}
}

// recordsAfter is b's records (by sequence number) above after, at most
// limit of them (0: no limit), copied out of the transaction.
func recordsAfter(b *bolt.Bucket, after uint64, limit int) []StoredEvent {
	var out []StoredEvent
	c := b.Cursor()
	for k, v := c.Seek(seqKey(after + 1)); k != nil; k, v = c.Next() {
		out = append(out, storedEvent(k, v))
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out
}

// EventsAfter returns the events of id with a sequence number above after,
// at most limit of them (0: no limit).
func (s *Store) EventsAfter(id string, after uint64, limit int) ([]StoredEvent, error) {
	var out []StoredEvent
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents).Bucket([]byte(id))
		if b == nil {
			return nil
		}
		out = recordsAfter(b, after, limit)
		return nil
	})
	return out, err
}

// LastEvents returns the last n events of id, oldest first.
func (s *Store) LastEvents(id string, n int) ([]StoredEvent, error) {
	var out []StoredEvent
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents).Bucket([]byte(id))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Last(); k != nil && len(out) < n; k, v = c.Prev() {
			out = append(out, storedEvent(k, v))
		}
		return nil
	})
	slices.Reverse(out)
	return out, err
}
