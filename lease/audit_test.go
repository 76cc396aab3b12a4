package lease

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// An audit log keeps its newest records up to its bound, counts what it
// dropped, and goes when the delegation has been over longer than the
// retention; the delegation's record stays.
func TestAuditLogBoundAndPrune(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "ctl.db"), false)
	for _, id := range []string{"dlg_old", "dlg_live"} {
		if err := s.CreateDelegation(&Delegation{Lease: Lease{ID: id, AccessMode: "ro"}}); err != nil {
			t.Fatal(err)
		}
	}
	var recs []AuditRecord
	for i := range 25 {
		recs = append(recs, AuditRecord{Data: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	if _, err := s.AppendAudit("dlg_old", recs[:15], 0, AuditSummary{Operations: 15}, AuditLimits{Records: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendAudit("dlg_old", recs[15:], 2, AuditSummary{Operations: 27}, AuditLimits{Records: 10}); err != nil {
		t.Fatal(err)
	}
	got, sum, err := s.AuditAfter("dlg_old", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 || string(got[0].Data) != `{"n":15}` || string(got[9].Data) != `{"n":24}` {
		t.Fatalf("kept %d records, first %s: want the newest 10", len(got), got[0].Data)
	}
	if sum == nil || sum.Operations != 27 || sum.Dropped != 17 {
		t.Fatalf("summary %+v, want 27 operations, 17 dropped (2 before the store)", sum)
	}
	if after, _, _ := s.AuditAfter("dlg_old", got[4].Seq, 0); len(after) != 5 {
		t.Fatalf("%d records after the fifth, want 5", len(after))
	}
	if _, err := s.AppendAudit("dlg_live", recs[:1], 0, AuditSummary{Operations: 1}, AuditLimits{Records: 10}); err != nil {
		t.Fatal(err)
	}

	if _, err := s.FireDelegation("dlg_old", Cancel, "", nil); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneAudit(time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("pruned %d (%v) of logs ended within the retention", n, err)
	}
	if n, err := s.PruneAudit(time.Now().Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want the ended delegation's log only", n, err)
	}
	if recs, sum, _ := s.AuditAfter("dlg_old", 0, 0); len(recs) != 0 || sum != nil {
		t.Fatalf("the pruned log still holds %d records", len(recs))
	}
	if recs, _, _ := s.AuditAfter("dlg_live", 0, 0); len(recs) != 1 {
		t.Fatalf("the live delegation's log lost its records")
	}
	if _, err := s.Delegation("dlg_old"); err != nil {
		t.Fatalf("the delegation's record went with its log: %v", err)
	}
}

// A log is bounded in bytes as well as records, and its cheap records go
// before any other: 320 listings after a read of a secret, under a bound
// of 300 records, leave the read in the log; large records under a byte
// bound leave no more than the bound.
func TestAuditLogKeepsWhatMatters(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "ctl.db"), false)
	read := AuditRecord{Data: []byte(`{"op":"read","path":".aws/credentials"}`)}
	var recs []AuditRecord
	recs = append(recs, read)
	for range 320 {
		recs = append(recs, AuditRecord{Data: []byte(`{"op":"list","path":"."}`), Cheap: true})
	}
	// In batches, as the delegator writes them.
	for i := 0; i < len(recs); i += 50 {
		if _, err := s.AppendAudit("dlg_cheap", recs[i:min(i+50, len(recs))], 0, AuditSummary{}, AuditLimits{Records: 300}); err != nil {
			t.Fatal(err)
		}
	}
	got, sum, err := s.AuditAfter("dlg_cheap", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 300 || string(got[0].Data) != string(read.Data) || sum.Dropped != 21 {
		t.Fatalf("kept %d records (first %s), dropped %d: want 300 with the read first, 21 listings dropped", len(got), got[0].Data, sum.Dropped)
	}
	if limited, _, _ := s.AuditAfter("dlg_cheap", 0, 5); len(limited) != 5 || string(limited[0].Data) != string(read.Data) {
		t.Fatalf("the first 5 records: %d, the read not first", len(limited))
	}

	big := AuditRecord{Data: make([]byte, 1<<20)}
	for range 20 {
		if _, err := s.AppendAudit("dlg_big", []AuditRecord{big}, 0, AuditSummary{}, AuditLimits{Records: 1000, Bytes: 4 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	got, _, _ = s.AuditAfter("dlg_big", 0, 0)
	var n int
	for _, r := range got {
		n += len(r.Data)
	}
	if n > 4<<20 {
		t.Fatalf("the log holds %d bytes under a bound of 4 MiB", n)
	}
}

// PruneDelegations removes what ended before the cut, with its audit
// log, and never a live delegation however old.
func TestPruneDelegations(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "ctl.db"), false)
	now := s.Now()
	mk := func(id string, ended bool, endedAt time.Time) {
		d := &Delegation{Lease: Lease{ID: id, AccessMode: "ro"}, LocalDir: "/x/" + id}
		if err := s.CreateDelegation(d); err != nil {
			t.Fatal(err)
		}
		if ended {
			if _, err := s.FireDelegation(id, Cancel, "test", func(d *Delegation) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if _, err := s.UpdateDelegation(id, func(d *Delegation) error { d.EndedAt = endedAt; return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("old", true, now.Add(-8*24*time.Hour))
	mk("recent", true, now.Add(-time.Hour))
	mk("live", false, time.Time{})
	if _, err := s.AppendAudit("old", []AuditRecord{{Data: []byte(`{"n":1}`)}}, 0, AuditSummary{Operations: 1}, AuditLimits{}); err != nil {
		t.Fatal(err)
	}
	gone, err := s.PruneDelegations(now.Add(-7 * 24 * time.Hour))
	if err != nil || len(gone) != 1 || gone[0] != "old" {
		t.Fatalf("pruned %v, %v; want [old]", gone, err)
	}
	if _, err := s.Delegation("old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("old is still there: %v", err)
	}
	if sum, _ := s.AuditSummaryOf("old"); sum != nil {
		t.Errorf("old's audit log is still there: %+v", sum)
	}
	if gone, _ := s.PruneDelegations(now.Add(time.Hour)); len(gone) != 1 || gone[0] != "recent" {
		t.Errorf("pruning everything ended removed %v; want [recent] (live stays)", gone)
	}
}
