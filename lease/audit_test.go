package lease

import (
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
	var recs [][]byte
	for i := range 25 {
		recs = append(recs, []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	if _, err := s.AppendAudit("dlg_old", recs[:15], 0, AuditSummary{Operations: 15}, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendAudit("dlg_old", recs[15:], 2, AuditSummary{Operations: 27}, 10); err != nil {
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
	if _, err := s.AppendAudit("dlg_live", recs[:1], 0, AuditSummary{Operations: 1}, 10); err != nil {
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
