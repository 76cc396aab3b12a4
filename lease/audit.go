package lease

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

var (
	// bucketAudit holds one sub-bucket per delegation: its audit log,
	// records by sequence number, oldest first.
	bucketAudit = []byte("audit")
	// bucketAuditMeta holds, by delegation, its AuditSummary.
	bucketAuditMeta = []byte("audit-meta")
)

// AuditSummary is what a delegation's audit log adds up to: what the
// executor read, wrote, created and deleted in the directory lent, and
// what the export refused it.
type AuditSummary struct {
	FilesRead    int   `json:"filesRead"`
	FilesWritten int   `json:"filesWritten"`
	Created      int   `json:"created"` // files and directories
	Deleted      int   `json:"deleted"` // files and directories
	BytesRead    int64 `json:"bytesRead"`
	BytesWritten int64 `json:"bytesWritten"`
	Refused      int   `json:"refused"`
	// Operations is how many were recorded, Dropped how many of the
	// oldest of them the log no longer holds (it is bounded).
	Operations uint64 `json:"operations"`
	Dropped    uint64 `json:"dropped,omitempty"`
	// FromDiff is set for the archive transport, whose summary comes from
	// the result's changes: the whole directory was sent, and there are
	// no operations to record.
	FromDiff bool `json:"fromDiff,omitempty"`
}

// AppendAudit adds records to delegation id's audit log, keeping at most
// max of them (0: no bound) by dropping the oldest, and stores sum as its
// summary. Its Dropped is what the log dropped before, lost (records the
// caller dropped before they reached the store) and what this drops.
// It returns the summary as stored.
func (s *Store) AppendAudit(id string, records [][]byte, lost uint64, sum AuditSummary, max int) (AuditSummary, error) {
	err := s.update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketAudit).CreateBucketIfNotExists([]byte(id))
		if err != nil {
			return err
		}
		var prev AuditSummary
		if p, _ := auditSummary(tx, id); p != nil {
			prev = *p
		}
		for _, r := range records {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(seqKey(seq), r); err != nil {
				return err
			}
		}
		sum.Dropped = prev.Dropped + lost
		if max > 0 {
			// Deleting under a cursor moves it on: take the first again.
			c := b.Cursor()
			for k, _ := c.First(); k != nil && b.Sequence()-binary.BigEndian.Uint64(k)+1 > uint64(max); k, _ = c.First() {
				if err := c.Delete(); err != nil {
					return err
				}
				sum.Dropped++
			}
		}
		data, err := json.Marshal(sum)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketAuditMeta).Put([]byte(id), data)
	})
	return sum, err
}

// AuditSummaryOf is delegation id's audit summary as stored; nil if it has
// no log.
func (s *Store) AuditSummaryOf(id string) (*AuditSummary, error) {
	var sum *AuditSummary
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		sum, err = auditSummary(tx, id)
		return err
	})
	return sum, err
}

func auditSummary(tx *bolt.Tx, id string) (*AuditSummary, error) {
	data := tx.Bucket(bucketAuditMeta).Get([]byte(id))
	if data == nil {
		return nil, nil
	}
	sum := new(AuditSummary)
	return sum, json.Unmarshal(data, sum)
}

// AuditAfter returns delegation id's audit records with a sequence number
// above after, at most limit of them (0: no limit), and its summary (nil
// if it has no log).
func (s *Store) AuditAfter(id string, after uint64, limit int) ([]StoredEvent, *AuditSummary, error) {
	var out []StoredEvent
	var sum *AuditSummary
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		if sum, err = auditSummary(tx, id); err != nil {
			return err
		}
		b := tx.Bucket(bucketAudit).Bucket([]byte(id))
		if b == nil {
			return nil
		}
		out = recordsAfter(b, after, limit)
		return nil
	})
	return out, sum, err
}

// DeleteAudit removes delegation id's audit log and summary.
func (s *Store) DeleteAudit(id string) error {
	return s.update(func(tx *bolt.Tx) error { return deleteAudit(tx, id) })
}

func deleteAudit(tx *bolt.Tx, id string) error {
	if err := tx.Bucket(bucketAuditMeta).Delete([]byte(id)); err != nil {
		return err
	}
	err := tx.Bucket(bucketAudit).DeleteBucket([]byte(id))
	if errors.Is(err, berrors.ErrBucketNotFound) {
		err = nil
	}
	return err
}

// PruneAudit removes the audit logs of delegations that ended before
// before, and returns how many it removed. The delegations' records (and
// the summaries they hold) stay.
func (s *Store) PruneAudit(before time.Time) (int, error) {
	n := 0
	err := s.update(func(tx *bolt.Tx) error {
		var old []string
		err := tx.Bucket(bucketAuditMeta).ForEach(func(k, _ []byte) error {
			d, err := get[Delegation](tx, bucketDelegations, string(k))
			if err != nil || (d.State.Terminal() && d.EndedAt.Before(before)) {
				old = append(old, string(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, id := range old {
			if err := deleteAudit(tx, id); err != nil {
				return err
			}
		}
		n = len(old)
		return nil
	})
	return n, err
}
