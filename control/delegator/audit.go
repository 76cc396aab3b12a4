package delegator

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// AuditLog records what the executors do over the live mount: every
// operation the SSH server's sessions report (sshd.Op), kept in memory
// and written to the lease store by Run about once a second, in batches.
// Recording never waits for the disk: what has not been written yet is
// bounded per delegation (MaxRecords), beyond which the oldest are
// dropped and counted.
type AuditLog struct {
	Store *lease.Store // required
	// MaxRecords is how many records of a delegation are kept, in memory
	// before they are written and in the store. Default 100000.
	MaxRecords int
	// Retention is how long the log of an ended delegation is kept; the
	// delegation's record keeps its summary. Default 30 days.
	Retention time.Duration
	Logger    *slog.Logger

	mu   sync.Mutex
	logs map[string]*delegationAudit // by delegation id
	kick chan struct{}
}

// delegationAudit is one delegation's records not written yet, and the
// summary of all of them.
type delegationAudit struct {
	pending []sshd.Op // encoded when written, off the request's path
	lost    uint64    // records dropped from pending since the last write
	sum     lease.AuditSummary
	read    map[string]struct{} // paths read, up to maxDistinct
	written map[string]struct{} // paths written, up to maxDistinct
}

// maxDistinct bounds the paths a summary tells apart; past it, each read
// or write counts as a file of its own.
const maxDistinct = 1 << 16

// DefaultMaxAuditRecords is AuditLog.MaxRecords's default.
const DefaultMaxAuditRecords = 100000

func (a *AuditLog) maxRecords() int {
	if a.MaxRecords > 0 {
		return a.MaxRecords
	}
	return DefaultMaxAuditRecords
}

// For is the recorder of delegation id's sessions. The summary goes on
// from what the store holds (a delegation followed anew after a restart);
// that read is the caller's, never a session's.
func (a *AuditLog) For(id string) sshd.Recorder {
	a.mu.Lock()
	if a.logs == nil {
		a.logs, a.kick = map[string]*delegationAudit{}, make(chan struct{}, 1)
	}
	_, known := a.logs[id]
	a.mu.Unlock()
	if !known {
		da := &delegationAudit{read: map[string]struct{}{}, written: map[string]struct{}{}}
		if _, sum, err := a.Store.AuditAfter(id, ^uint64(0)-1, 1); err == nil && sum != nil {
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
	if da == nil { // flushed and forgotten: the delegation ended
		a.mu.Unlock()
		return
	}
	da.add(op)
	da.pending = append(da.pending, op)
	if over := len(da.pending) - a.maxRecords(); over > 0 {
		da.pending = da.pending[over:]
		da.lost += uint64(over)
	}
	n := len(da.pending)
	a.mu.Unlock()
	if n >= 1024 {
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
func distinct(seen map[string]struct{}, p string) int {
	if _, ok := seen[p]; ok {
		return 0
	}
	if len(seen) < maxDistinct {
		seen[p] = struct{}{}
	}
	return 1
}

// Run writes the records to the store until ctx ends, then once more.
// It also removes the logs of delegations ended longer than Retention ago.
func (a *AuditLog) Run(ctx context.Context) {
	a.mu.Lock()
	if a.kick == nil {
		a.logs, a.kick = map[string]*delegationAudit{}, make(chan struct{}, 1)
	}
	kick := a.kick
	a.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	a.prune()
	for {
		select {
		case <-ctx.Done():
			a.flush("")
			return
		case <-tick.C:
		case <-kick:
		case <-prune.C:
			a.prune()
		}
		a.flush("")
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

// flush writes the pending records of delegation only (every delegation
// if ""). The store is written without the lock held.
func (a *AuditLog) flush(only string) {
	type batch struct {
		id   string
		ops  []sshd.Op
		lost uint64
		sum  lease.AuditSummary
	}
	var batches []batch
	a.mu.Lock()
	for id, da := range a.logs {
		if (only != "" && id != only) || (len(da.pending) == 0 && only == "") {
			continue
		}
		batches = append(batches, batch{id: id, ops: da.pending, lost: da.lost, sum: da.sum})
		da.pending, da.lost = nil, 0
	}
	a.mu.Unlock()
	for _, b := range batches {
		if err := a.Store.AppendAudit(b.id, encode(b.ops), b.lost, b.sum, a.maxRecords()); err != nil {
			a.logger().Warn("audit: write the log", "delegation", b.id, "records", len(b.ops), "err", err)
		}
	}
}

// encode is ops as the store keeps them: JSON, one record each.
func encode(ops []sshd.Op) [][]byte {
	out := make([][]byte, 0, len(ops))
	for _, op := range ops {
		if data, err := json.Marshal(op); err == nil {
			out = append(out, data)
		}
	}
	return out
}

// End writes what delegation id's sessions did, now that it is revoked,
// stops recording it, and returns its summary.
func (a *AuditLog) End(id string) *lease.AuditSummary {
	a.flush(id)
	a.mu.Lock()
	da, ok := a.logs[id]
	delete(a.logs, id)
	a.mu.Unlock()
	if !ok {
		return nil
	}
	if len(da.pending) > 0 { // recorded between the flush and the delete
		a.Store.AppendAudit(id, encode(da.pending), da.lost, da.sum, a.maxRecords())
	}
	sum := da.sum
	if _, stored, err := a.Store.AuditAfter(id, ^uint64(0)-1, 1); err == nil && stored != nil {
		sum.Dropped = stored.Dropped
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
var DefaultHide = sshd.DefaultHide
