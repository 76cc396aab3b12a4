package lease

import (
	"cmp"
	"encoding/json"
	"errors"
	"os"
	"slices"
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
	// bucketAuditCheap holds one sub-bucket per delegation: its cheap
	// records (AuditRecord.Cheap), numbered with the others.
	bucketAuditCheap = []byte("audit-cheap")
	// bucketAuditSize holds, by delegation, what its log holds (auditSize).
	bucketAuditSize = []byte("audit-size")
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

// AuditRecord is one record of an audit log as the store keeps it, and
// whether it is cheap: one that is evicted before any other (a listing),
// so that a flood of cheap operations cannot push out a refusal, a read
// of a secret, a write or a delete.
type AuditRecord struct {
	Data  []byte
	Cheap bool
}

// AuditLimits bound one delegation's stored log; 0 is no bound.
type AuditLimits struct {
	Records int
	Bytes   int64
}

// auditSize is what a delegation's stored log holds, kept beside it.
type auditSize struct {
	Records, Cheap uint64
	Bytes          int64
}

// AppendAudit adds records to delegation id's audit log, keeping at most
// limits by dropping the oldest cheap records first, then the oldest of
// the rest, and stores sum as its summary. Its Dropped is what the log
// dropped before, lost (records the caller dropped before they reached the
// store) and what this drops. It returns the summary as stored.
func (s *Store) AppendAudit(id string, records []AuditRecord, lost uint64, sum AuditSummary, limits AuditLimits) (AuditSummary, error) {
	err := s.update(func(tx *bolt.Tx) error {
		main, err := tx.Bucket(bucketAudit).CreateBucketIfNotExists([]byte(id))
		if err != nil {
			return err
		}
		cheap, err := tx.Bucket(bucketAuditCheap).CreateBucketIfNotExists([]byte(id))
		if err != nil {
			return err
		}
		var prev AuditSummary
		if p, _ := auditSummary(tx, id); p != nil {
			prev = *p
		}
		size := storedSize(tx, id)
		for _, r := range records {
			seq, err := main.NextSequence() // one numbering for both tiers
			if err != nil {
				return err
			}
			b := main
			if r.Cheap {
				b = cheap
				size.Cheap++
			}
			if err := b.Put(seqKey(seq), r.Data); err != nil {
				return err
			}
			size.Records++
			size.Bytes += int64(len(r.Data))
		}
		sum.Dropped = prev.Dropped + lost
		over := func() bool {
			return (limits.Records > 0 && size.Records > uint64(limits.Records)) || (limits.Bytes > 0 && size.Bytes > limits.Bytes)
		}
		for over() && size.Records > 0 {
			b := main
			if size.Cheap > 0 {
				b = cheap
			}
			k, v := b.Cursor().First()
			if k == nil { // the sizes disagree with the buckets: trust the buckets
				if b == cheap {
					size.Cheap = 0
					continue
				}
				break
			}
			n := int64(len(v))
			if err := b.Delete(k); err != nil {
				return err
			}
			if b == cheap {
				size.Cheap--
			}
			size.Records--
			size.Bytes -= n
			sum.Dropped++
		}
		if err := putSize(tx, id, size); err != nil {
			return err
		}
		data, err := json.Marshal(sum)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketAuditMeta).Put([]byte(id), data)
	})
	return sum, err
}

func storedSize(tx *bolt.Tx, id string) auditSize {
	var size auditSize
	if data := tx.Bucket(bucketAuditSize).Get([]byte(id)); data != nil {
		json.Unmarshal(data, &size)
		return size
	}
	// A log an earlier release stored has no size yet: count it once.
	for _, top := range [][]byte{bucketAudit, bucketAuditCheap} {
		if b := tx.Bucket(top).Bucket([]byte(id)); b != nil {
			b.ForEach(func(_, v []byte) error {
				size.Records++
				size.Bytes += int64(len(v))
				if string(top) == string(bucketAuditCheap) {
					size.Cheap++
				}
				return nil
			})
		}
	}
	return size
}

func putSize(tx *bolt.Tx, id string, size auditSize) error {
	data, err := json.Marshal(size)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketAuditSize).Put([]byte(id), data)
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
		for _, top := range [][]byte{bucketAudit, bucketAuditCheap} {
			if b := tx.Bucket(top).Bucket([]byte(id)); b != nil {
				out = append(out, recordsAfter(b, after, limit)...)
			}
		}
		// The two tiers share one numbering: in order, the first limit.
		slices.SortFunc(out, func(a, b StoredEvent) int { return cmp.Compare(a.Seq, b.Seq) })
		if limit > 0 && len(out) > limit {
			out = out[:limit]
		}
		return nil
	})
	return out, sum, err
}

// DeleteAudit removes delegation id's audit log and summary.
func (s *Store) DeleteAudit(id string) error {
	return s.update(func(tx *bolt.Tx) error { return deleteAudit(tx, id) })
}

func deleteAudit(tx *bolt.Tx, id string) error {
	for _, top := range [][]byte{bucketAuditMeta, bucketAuditSize} {
		if err := tx.Bucket(top).Delete([]byte(id)); err != nil {
			return err
		}
	}
	for _, top := range [][]byte{bucketAudit, bucketAuditCheap} {
		if err := tx.Bucket(top).DeleteBucket([]byte(id)); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return err
		}
	}
	return nil
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

// prunable reports whether a delegation is one PruneDelegations(before)
// removes: ended before before, and no staged result of it waiting for a
// decision.
func (s *Store) prunable(before time.Time) func(d *Delegation) bool {
	now := s.Now()
	return func(d *Delegation) bool {
		waiting := d.Staged != nil && d.Staged.State == StagedPending && now.Before(d.Staged.Until)
		return d.State.Terminal() && d.EndedAt.Before(before) && !waiting
	}
}

// PrunableDelegations are the ids PruneDelegations(before) would remove.
func (s *Store) PrunableDelegations(before time.Time) ([]string, error) {
	old := s.prunable(before)
	all, err := s.Delegations()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, d := range all {
		if old(d) {
			ids = append(ids, d.ID)
		}
	}
	return ids, nil
}

// PruneDelegations removes the delegations that ended before before, with
// their audit logs, and returns their ids. Live ones are never removed.
// Nothing is written when nothing is that old, so every command may call
// it (the reference keeps a delegator's records a week).
func (s *Store) PruneDelegations(before time.Time) ([]string, error) {
	old := s.prunable(before)
	all, err := s.Delegations()
	if err != nil || !slices.ContainsFunc(all, old) {
		return nil, err
	}
	var gone, stagedDirs []string
	err = s.update(func(tx *bolt.Tx) error {
		gone, stagedDirs = nil, nil
		all, err := list[*Delegation](tx, bucketDelegations)
		if err != nil {
			return err
		}
		for _, d := range all {
			if !old(d) {
				continue
			}
			if err := tx.Bucket(bucketDelegations).Delete([]byte(d.ID)); err != nil {
				return err
			}
			if err := deleteAudit(tx, d.ID); err != nil {
				return err
			}
			gone = append(gone, d.ID)
			if d.Staged != nil {
				stagedDirs = append(stagedDirs, d.Staged.Dir)
			}
		}
		return nil
	})
	if err == nil {
		for _, dir := range stagedDirs {
			os.RemoveAll(dir)
		}
	}
	return gone, err
}
