//go:build linux

package delegator

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// snapshotsPeer is an executor as the reference's may be: it sends several
// snapshot events, the second recommended, each a ZIP of the environment
// (workspace/hello.txt holding the snapshot's number), then a done naming
// them all and recommending the second.
type snapshotsPeer struct {
	n    int
	all  bool // each snapshot says it is the one recommended
	same bool // each snapshot holds hello.txt as lent: no change
}

func snapshotZip(content string) string {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	h := &zip.FileHeader{Name: "workspace/hello.txt", Method: zip.Deflate}
	h.SetMode(0o644)
	w, _ := zw.CreateHeader(h)
	io.WriteString(w, content)
	zw.Close()
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func (h *snapshotsPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	parts := strings.Split(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/awcp":
		acceptAsHead(w, r)
	case len(parts) == 5 && parts[4] == "events":
		id := parts[3]
		w.Header().Set("Content-Type", "text/event-stream")
		var ids []string
		for i := 1; i <= h.n; i++ {
			snap := fmt.Sprintf("snap_%d", i)
			ids = append(ids, fmt.Sprintf("%q", snap))
			fmt.Fprintf(w, `data: {"delegationId":%q,"type":"snapshot","timestamp":"2026-11-27T00:00:00Z","snapshotId":%q,"summary":"attempt %d","highlights":["hello.txt"],"snapshotBase64":%q,"recommended":%v}`+"\n\n",
				id, snap, i, snapshotZip(map[bool]string{false: fmt.Sprintf("attempt %d\n", i), true: "owner\n"}[h.same]), i == 2 || h.all)
		}
		fmt.Fprintf(w, `data: {"delegationId":%q,"type":"done","timestamp":"2026-11-27T00:00:00Z","summary":"s","snapshotIds":[%s],"recommendedSnapshotId":"snap_2"}`+"\n\n",
			id, strings.Join(ids, ","))
	default:
		io.WriteString(w, `{"ok":true}`)
	}
}

// snapshotsRun lends a directory holding hello.txt to a snapshotsPeer
// sending n snapshots, in snapshot mode mode, and runs the delegation to
// its end, which must be completed. staged and spool are the delegator's
// directories.
func snapshotsRun(t *testing.T, n int, mode string) (dlg *Delegator, end *lease.Delegation, dir, staged, spool string) {
	t.Helper()
	return snapshotsRunWith(t, &snapshotsPeer{n: n}, mode)
}

func snapshotsRunWith(t *testing.T, peer *snapshotsPeer, mode string) (dlg *Delegator, end *lease.Delegation, dir, staged, spool string) {
	t.Helper()
	srv := httptest.NewServer(peer)
	t.Cleanup(srv.Close)
	staged, spool = t.TempDir(), t.TempDir()
	dlg, _ = newArchiveDelegator(t, nil, func(o *Options) { o.StagedDir, o.SpoolDir = staged, spool })
	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("owner\n"), 0o644)
	d, err := dlg.Create(ExportRequest{Dir: dir, Peer: srv.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive, Snapshot: mode})
	if err != nil {
		t.Fatal(err)
	}
	end, err = dlg.Run(t.Context(), d.ID)
	if err != nil || end.State != lease.Completed {
		t.Fatalf("ended %v %v", end, err)
	}
	return dlg, end, dir, staged, spool
}

// In staged mode every snapshot the executor sends is kept for review,
// the one recommended marked; the directory is untouched. One is
// discarded, another (not the recommended one) applied: the directory
// holds what that one holds, and the rest are discarded with it. Past
// MaxStagedSnapshots, the oldest not recommended goes.
func TestStagedKeepsEverySnapshot(t *testing.T) {
	for _, n := range []int{3, MaxStagedSnapshots + 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dlg, end, dir, _, _ := snapshotsRun(t, n, lease.SnapshotStaged)
			d := end
			if b, _ := os.ReadFile(filepath.Join(dir, "hello.txt")); string(b) != "owner\n" {
				t.Fatalf("the directory changed before any review: %q", b)
			}
			st := end.Staged
			if st == nil || st.State != lease.StagedPending || len(st.Snapshots) != min(n, MaxStagedSnapshots) {
				t.Fatalf("staged %+v, want %d snapshots pending", st, min(n, MaxStagedSnapshots))
			}
			if c := st.Chosen(); c == nil || c.ID != "snap_2" || c.Summary != "attempt 2" {
				t.Fatalf("the recommended snapshot is %+v, want snap_2", c)
			}
			if n > MaxStagedSnapshots {
				if st.Find("snap_1") != nil || st.Find(fmt.Sprintf("snap_%d", n)) == nil {
					t.Errorf("past the bound, the oldest not recommended should go: %v", st.Snapshots)
				}
				if files, _ := filepath.Glob(filepath.Join(st.Dir, "snapshot-*.zip")); len(files) != MaxStagedSnapshots {
					t.Errorf("%d snapshot files kept on disk, want %d", len(files), MaxStagedSnapshots)
				}
				return
			}
			r, _, err := dlg.OpenResult(d.ID, "")
			if err != nil {
				t.Fatal(err)
			}
			var diff bytes.Buffer
			r.Diff(&diff)
			r.Close()
			if !strings.Contains(diff.String(), "-owner\n+attempt 2\n") {
				t.Errorf("the recommended snapshot's diff:\n%s", diff.String())
			}
			if err := dlg.DiscardResult(d.ID, "snap_1"); err != nil {
				t.Fatal(err)
			}
			if _, err := dlg.ApplyResult(context.Background(), d.ID, "snap_1", "", false); err == nil {
				t.Error("a discarded snapshot was applied")
			}
			out, err := dlg.ApplyResult(context.Background(), d.ID, "snap_3", "", false)
			if err != nil || len(out.Report.Modified) != 1 {
				t.Fatalf("apply snap_3: %+v %v", out, err)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "hello.txt")); string(b) != "attempt 3\n" {
				t.Errorf("hello.txt after applying snap_3: %q", b)
			}
			rec, _ := dlg.store.Delegation(d.ID)
			for _, s := range rec.Staged.Snapshots {
				want := lease.StagedDiscarded
				if s.ID == "snap_3" {
					want = lease.StagedApplied
				}
				if s.Status != want {
					t.Errorf("%s is %s, want %s", s.ID, s.Status, want)
				}
			}
			if _, err := os.Stat(rec.Staged.Dir); !os.IsNotExist(err) {
				t.Errorf("the staged result is still on disk after the apply: %v", err)
			}
		})
	}
}

// An executor that says every snapshot it sends is the recommended one
// still gets no more than MaxStagedSnapshots kept, in the record and on
// disk: the oldest go.
func TestStagedSnapshotsBoundedWhateverTheyClaim(t *testing.T) {
	n := MaxStagedSnapshots + 5
	_, end, _, _, _ := snapshotsRunWith(t, &snapshotsPeer{n: n, all: true}, lease.SnapshotStaged)
	st := end.Staged
	if st == nil || len(st.Snapshots) != MaxStagedSnapshots {
		t.Fatalf("staged %+v, want %d snapshots kept", st, MaxStagedSnapshots)
	}
	if st.Find("snap_1") != nil || st.Find(fmt.Sprintf("snap_%d", n)) == nil {
		t.Errorf("the oldest should go: %v", st.Snapshots)
	}
	if files, _ := filepath.Glob(filepath.Join(st.Dir, "snapshot-*.zip")); len(files) != MaxStagedSnapshots {
		t.Errorf("%d snapshot files kept on disk, want %d", len(files), MaxStagedSnapshots)
	}
}

// A staged result waits for its decision as long as its retention, even
// past the record's own week; then it is removed, and its record says
// so. Pruning a record removes its staged result with it.
func TestStagedRetention(t *testing.T) {
	staged := t.TempDir()
	dlg, store := newArchiveDelegator(t, nil, func(o *Options) { o.StagedDir = staged })
	now := time.Now()
	mk := func(id string, ended time.Time, until time.Time) string {
		dir := filepath.Join(staged, id)
		os.MkdirAll(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "result.zip"), []byte("x"), 0o600)
		del := &lease.Delegation{Lease: lease.Lease{ID: id, AccessMode: control.AccessRW, State: lease.Completed}, LocalDir: t.TempDir(),
			Staged: &lease.Staged{Dir: dir, State: lease.StagedPending, Until: until}}
		if err := store.CreateDelegation(del); err != nil {
			t.Fatal(err)
		}
		store.UpdateDelegation(id, func(d *lease.Delegation) error { d.State, d.EndedAt = lease.Completed, ended; return nil })
		return dir
	}
	waiting := mk("dlg_waiting", now.Add(-10*24*time.Hour), now.Add(time.Hour))
	past := mk("dlg_past", now.Add(-2*time.Hour), now.Add(-time.Hour))
	old := mk("dlg_old", now.Add(-10*24*time.Hour), now.Add(-time.Hour))
	dlg.Tidy(t.Context(), false, now.Add(-7*24*time.Hour))

	if _, err := os.Stat(waiting); err != nil {
		t.Errorf("a result within its retention was removed with its week-old record: %v", err)
	}
	if d, err := store.Delegation("dlg_waiting"); err != nil || d.Staged.State != lease.StagedPending {
		t.Errorf("the waiting result's record: %+v %v", d, err)
	}
	if _, err := os.Stat(past); !os.IsNotExist(err) {
		t.Errorf("a result past its retention is still on disk: %v", err)
	}
	if d, err := store.Delegation("dlg_past"); err != nil || d.Staged.State != lease.StagedExpired {
		t.Errorf("the expired result's record: %+v %v", d, err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("a pruned record's result is still on disk: %v", err)
	}
	if _, err := store.Delegation("dlg_old"); err == nil {
		t.Error("the old record with an expired result was not pruned")
	}
}

// In discard mode the executor's result is dropped: the directory is as it
// was, nothing is kept, and the record says so.
func TestDiscardModeKeepsNothing(t *testing.T) {
	dlg, d, dir, staged, spool := snapshotsRun(t, 2, lease.SnapshotDiscard)
	if b, _ := os.ReadFile(filepath.Join(dir, "hello.txt")); string(b) != "owner\n" {
		t.Errorf("the directory changed: %q", b)
	}
	if ents, _ := os.ReadDir(staged); len(ents) != 0 {
		t.Errorf("kept after a discard: %v", ents)
	}
	if ents, _ := os.ReadDir(spool); len(ents) != 0 {
		t.Errorf("left in the spool: %v", ents)
	}
	rec, _ := dlg.store.Delegation(d.ID)
	if rec.Staged == nil || rec.Staged.State != lease.StagedDiscarded || !strings.Contains(strings.Join(rec.Notes, "\n"), "discard") {
		t.Errorf("the record: %+v, notes %q", rec.Staged, rec.Notes)
	}
	if _, err := dlg.ApplyResult(context.Background(), d.ID, "", "", false); err == nil {
		t.Error("a discarded result was applied")
	}
}

// A staged result with nothing to review does not wait for a decision:
// one whose agent changed nothing, and one of a delegation the executor
// refused before any result, are recorded empty, with why, and their
// areas removed.
func TestEmptyStagedResultIsSettled(t *testing.T) {
	dlg, end, _, _, _ := snapshotsRunWith(t, &snapshotsPeer{n: 1, same: true}, lease.SnapshotStaged)
	d, err := dlg.store.Delegation(end.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Staged == nil || d.Staged.State != lease.StagedEmpty || !strings.Contains(strings.Join(d.Notes, "\n"), "the agent changed nothing") {
		t.Errorf("a result with no change: %+v, notes %q", d.Staged, d.Notes)
	}
	if _, err := os.Stat(d.Staged.Dir); !os.IsNotExist(err) {
		t.Errorf("its area is still there: %v", err)
	}

	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"type":"ERROR","version":"1","delegationId":"x","code":"DECLINED","message":"busy"}`)
	}))
	defer refusing.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("owner\n"), 0o644)
	created, err := dlg.Create(ExportRequest{Dir: dir, Peer: refusing.URL, PlainHTTP: true, Prompt: "p", Transport: control.TransportArchive, Snapshot: lease.SnapshotStaged})
	if err != nil {
		t.Fatal(err)
	}
	dlg.Run(t.Context(), created.ID)
	d, err = dlg.store.Delegation(created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Staged == nil || d.Staged.State != lease.StagedEmpty || !strings.Contains(strings.Join(d.Notes, "\n"), "before the executor sent a result") {
		t.Errorf("a refused delegation's staged result: %+v, notes %q", d.Staged, d.Notes)
	}
}
