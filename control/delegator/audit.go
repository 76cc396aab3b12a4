package delegator

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"time"

	wire "github.com/awcp/awcp/sshd/sftpwire"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// AuditLog records what the executors do over the live mount: every
// operation the SSH server's sessions report (sshd.Op), kept in memory
// and written to the lease store by Run about once a second, in batches.
// Recording never waits for the disk: what has not been written yet is
// bounded per delegation (MaxRecords operations, maxPendingBytes of
// them), beyond which the oldest are dropped and counted. An executor
// chooses the names it uses, so the bound is in bytes as well as in
// operations.
type AuditLog struct {
	Store *lease.Store // required
	// MaxRecords is how many records of a delegation are kept, in memory
	// before they are written and in the store. Default 100000.
	MaxRecords int
	// MaxBytes bounds what a delegation's stored log holds. Default
	// DefaultMaxAuditBytes. Past either bound the oldest listings go
	// first, then the oldest of the rest (refusals, reads, writes,
	// deletes): a flood of cheap operations cannot push those out.
	MaxBytes int64
	// Retention is how long the log of an ended delegation is kept; the
	// delegation's record keeps its summary. Default 30 days.
	Retention time.Duration
	Logger    *slog.Logger

	once sync.Once
	kick chan struct{} // a delegation has much to write: write now

	mu   sync.Mutex                  // guards logs; never held across the store's I/O
	logs map[string]*delegationAudit // by delegation id

	// writing serializes the writes to the store (Run's and End's), so
	// that a delegation's batches land in order and its summary last.
	writing sync.Mutex
}

// delegationAudit is one delegation's records not written yet, and the
// summary of all of them.
type delegationAudit struct {
	pending      []sshd.Op // encoded when written, off the request's path
	pendingBytes int       // their size, roughly (opBytes)
	lost         uint64    // records dropped from pending since the last write
	sum          lease.AuditSummary
	read         map[uint64]struct{} // hashes of the paths read, up to maxDistinct
	written      map[uint64]struct{} // hashes of the paths written, up to maxDistinct
}

// maxDistinct bounds the paths a summary tells apart (by hash: 16 bytes
// each at most, whatever their length); past it, each read or write
// counts as a file of its own.
const maxDistinct = 1 << 16

// maxPendingBytes bounds what a delegation's records not yet written hold
// in memory: a flood of operations on long names drops the oldest of them
// rather than growing the delegator.
const maxPendingBytes = 8 << 20

// opBytes is about what op holds in memory.
func opBytes(op sshd.Op) int { return 96 + len(op.Path) + len(op.To) + len(op.Err) }

// DefaultMaxAuditRecords is AuditLog.MaxRecords's default.
const DefaultMaxAuditRecords = 100000

// DefaultMaxAuditBytes is AuditLog.MaxBytes's default: a delegation's log
// on disk is bounded by bytes, not only records (200 refused lookups of
// 1 MB paths grew the store by 246 MB).
const DefaultMaxAuditBytes = 64 << 20

// maxRecordedName is the longest path or message a record keeps; the rest
// is cut, and the record says how long it was.
const maxRecordedName = 4 << 10

// cut is s at most maxRecordedName bytes long.
func cut(s string) string {
	if len(s) <= maxRecordedName {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", strings.ToValidUTF8(s[:maxRecordedName], ""), len(s))
}

// cheap reports an operation the log drops before any other: a listing.
// A refusal never is.
func cheap(op sshd.Op) bool { return op.Kind == sshd.OpList && !op.Refused }

func (a *AuditLog) maxRecords() int {
	if a.MaxRecords > 0 {
		return a.MaxRecords
	}
	return DefaultMaxAuditRecords
}

func (a *AuditLog) init() {
	a.once.Do(func() { a.logs, a.kick = map[string]*delegationAudit{}, make(chan struct{}, 1) })
}

// For is the recorder of delegation id's sessions. The summary goes on
// from what the store holds (a delegation followed anew after a restart);
// that read is the caller's, never a session's.
func (a *AuditLog) For(id string) sshd.Recorder {
	a.init()
	a.mu.Lock()
	_, known := a.logs[id]
	a.mu.Unlock()
	if !known {
		da := &delegationAudit{read: map[uint64]struct{}{}, written: map[uint64]struct{}{}}
		if sum, err := a.Store.AuditSummaryOf(id); err == nil && sum != nil {
			da.sum = *sum
		}
		a.mu.Lock()
		if _, ok := a.logs[id]; !ok {
			a.logs[id] = da
		}
		a.mu.Unlock()
	}
	return recorder{a: a, id: id}
}

type recorder struct {
	a  *AuditLog
	id string
}

// Record implements sshd.Recorder: it never blocks on I/O.
func (r recorder) Record(op sshd.Op) {
	a := r.a
	a.mu.Lock()
	da := a.logs[r.id]
	if da == nil { // the delegation ended
		a.mu.Unlock()
		return
	}
	da.add(op)
	op.Path, op.To, op.Err = cut(op.Path), cut(op.To), cut(op.Err)
	da.pending = append(da.pending, op)
	da.pendingBytes += opBytes(op)
	drop := 0
	for len(da.pending)-drop > a.maxRecords() || (da.pendingBytes > maxPendingBytes && drop < len(da.pending)-1) {
		da.pendingBytes -= opBytes(da.pending[drop])
		drop++
	}
	if drop > 0 {
		clear(da.pending[:drop]) // their strings go now; the array when append moves it
		da.pending = da.pending[drop:]
		da.lost += uint64(drop)
	}
	busy := len(da.pending) >= 1024 || da.pendingBytes >= maxPendingBytes/2
	a.mu.Unlock()
	if busy {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

// add counts op in the summary.
func (da *delegationAudit) add(op sshd.Op) {
	s := &da.sum
	s.Operations++
	if op.Refused {
		s.Refused++
		return
	}
	if op.Err != "" {
		return
	}
	switch op.Kind {
	case sshd.OpRead:
		s.BytesRead += op.Bytes
		s.FilesRead += distinct(da.read, op.Path)
	case sshd.OpWrite:
		s.BytesWritten += op.Bytes
		s.FilesWritten += distinct(da.written, op.Path)
	case sshd.OpCreate, sshd.OpMkdir, sshd.OpSymlink, sshd.OpLink:
		s.Created++
	case sshd.OpRemove, sshd.OpRmdir:
		s.Deleted++
	}
}

// distinct adds p to seen and returns 1 if it was not there.
func distinct(seen map[uint64]struct{}, p string) int {
	h := maphash.String(pathSeed, p)
	if _, ok := seen[h]; ok {
		return 0
	}
	if len(seen) < maxDistinct {
		seen[h] = struct{}{}
	}
	return 1
}

var pathSeed = maphash.MakeSeed()

// Run writes the records to the store until ctx ends, then once more.
// It also removes the logs of delegations ended longer than Retention ago.
func (a *AuditLog) Run(ctx context.Context) {
	a.init()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	a.prune()
	for {
		select {
		case <-ctx.Done():
			a.flush()
			return
		case <-tick.C:
		case <-a.kick:
		case <-prune.C:
			a.prune()
		}
		a.flush()
	}
}

func (a *AuditLog) prune() {
	keep := a.Retention
	if keep <= 0 {
		keep = 30 * 24 * time.Hour
	}
	if n, err := a.Store.PruneAudit(time.Now().Add(-keep)); err != nil {
		a.logger().Warn("audit: prune", "err", err)
	} else if n > 0 {
		a.logger().Info("audit: removed the logs of ended delegations", "count", n, "retention", keep)
	}
}

func (a *AuditLog) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

// batch is what a delegation has to write.
type batch struct {
	id   string
	ops  []sshd.Op
	lost uint64
	sum  lease.AuditSummary
}

// take empties da's pending records into a batch.
func (da *delegationAudit) take(id string) batch {
	b := batch{id: id, ops: da.pending, lost: da.lost, sum: da.sum}
	da.pending, da.pendingBytes, da.lost = nil, 0, 0
	return b
}

// write stores b; the caller holds a.writing.
func (a *AuditLog) write(b batch) (lease.AuditSummary, error) {
	maxBytes := a.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxAuditBytes
	}
	sum, err := a.Store.AppendAudit(b.id, encode(b.ops), b.lost, b.sum, lease.AuditLimits{Records: a.maxRecords(), Bytes: maxBytes})
	if err != nil {
		a.logger().Warn("audit: write the log", "delegation", b.id, "records", len(b.ops), "err", err)
	}
	return sum, err
}

// flush writes every delegation's pending records.
func (a *AuditLog) flush() {
	a.writing.Lock()
	defer a.writing.Unlock()
	var batches []batch
	a.mu.Lock()
	for id, da := range a.logs {
		if len(da.pending) > 0 || da.lost > 0 {
			batches = append(batches, da.take(id))
		}
	}
	a.mu.Unlock()
	for _, b := range batches {
		a.write(b)
	}
}

// encode is ops as the store keeps them: JSON, one record each.
func encode(ops []sshd.Op) []lease.AuditRecord {
	out := make([]lease.AuditRecord, 0, len(ops))
	for _, op := range ops {
		if data, err := json.Marshal(op); err == nil {
			out = append(out, lease.AuditRecord{Data: data, Cheap: cheap(op)})
		}
	}
	return out
}

// End writes what delegation id's sessions did, now that it is revoked,
// stops recording it, and returns its summary; nil if it was not recorded.
func (a *AuditLog) End(id string) *lease.AuditSummary {
	a.init()
	a.writing.Lock()
	defer a.writing.Unlock()
	a.mu.Lock()
	da, ok := a.logs[id]
	delete(a.logs, id)
	var b batch
	if ok {
		b = da.take(id)
	}
	a.mu.Unlock()
	if !ok {
		return nil
	}
	sum, err := a.write(b)
	if err != nil {
		return &b.sum
	}
	return &sum
}

// DiffSummary is the archive transport's summary, from what its result
// changed: the whole directory (less what was hidden) was sent.
func DiffSummary(rep *archive.Report) *lease.AuditSummary {
	return &lease.AuditSummary{
		FilesWritten: len(rep.Created) + len(rep.Modified),
		Created:      len(rep.Created),
		Deleted:      len(rep.Deleted),
		FromDiff:     true,
	}
}

// Op is one operation of an audit log, as the store holds it (JSON).
type Op = sshd.Op

// DefaultHide is the hide patterns of an export unless told otherwise.
var DefaultHide = wire.DefaultHide
