//go:build linux

package delegator

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// The change list is the net effect: what was made and removed again is
// not listed, what was removed and made again is modified, a rename is a
// deletion and an addition — but over what was there (sed -i's way) a
// modification — and what failed changed nothing.
func TestNetChanges(t *testing.T) {
	ops := []Op{
		{Kind: sshd.OpCreate, Path: "new.txt"}, {Kind: sshd.OpWrite, Path: "new.txt"},
		{Kind: sshd.OpWrite, Path: "README.md"}, {Kind: sshd.OpWrite, Path: "README.md"},
		{Kind: sshd.OpCreate, Path: "tmp.txt"}, {Kind: sshd.OpRemove, Path: "tmp.txt"},
		{Kind: sshd.OpRemove, Path: "go.sum"}, {Kind: sshd.OpCreate, Path: "go.sum"},
		{Kind: sshd.OpRename, Path: "src/old.go", To: "src/new.go"},
		{Kind: sshd.OpMkdir, Path: "docs"}, {Kind: sshd.OpRmdir, Path: "build"},
		{Kind: sshd.OpSetattr, Path: "run.sh"}, {Kind: sshd.OpLink, Path: "a", To: "b"},
		{Kind: sshd.OpRead, Path: "main.go"}, {Kind: sshd.OpList, Path: "."},
		{Kind: sshd.OpRemove, Path: "secret.pem", Refused: true, Err: "hidden"},
		{Kind: sshd.OpWrite, Path: "ro.txt", Err: "permission denied"},
		// sed -i: a new file written, then renamed over the old one.
		{Kind: sshd.OpCreate, Path: "sedXYZ"}, {Kind: sshd.OpWrite, Path: "sedXYZ"},
		{Kind: sshd.OpRename, Path: "sedXYZ", To: "conf.ini", Replaced: true},
	}
	want := "M README.md|A b|D build/|M conf.ini|A docs/|M go.sum|A new.txt|M run.sh|A src/new.go|D src/old.go"
	var cs changeSet
	for _, op := range ops {
		cs.apply(op)
	}
	if got := strings.Join(cs.lines(), "|"); got != want {
		t.Fatalf("changes\n %s\nwant\n %s", got, want)
	}
}

// The executor picks the names: however many it changes, the list holds
// at most maxChangeBytes of them and counts the rest.
func TestChangeListIsBounded(t *testing.T) {
	var cs changeSet
	name := strings.Repeat("n", 4000)
	const ops = 2 * maxChangeBytes / 4000
	for i := range ops {
		cs.apply(Op{Kind: sshd.OpCreate, Path: fmt.Sprintf("%s%d", name, i)})
	}
	if cs.bytes > maxChangeBytes || len(cs.state)+cs.unlisted != ops || cs.unlisted < ops/3 {
		t.Fatalf("%d paths listed (%d bytes), %d unlisted, of %d", len(cs.state), cs.bytes, cs.unlisted, ops)
	}
	// Removing listed ones frees room.
	cs.apply(Op{Kind: sshd.OpRemove, Path: name + "0"})
	if _, ok := cs.state[name+"0"]; ok || cs.bytes > maxChangeBytes-4000 {
		t.Fatalf("a created and removed path is still listed (%d bytes)", cs.bytes)
	}
}

// BenchmarkLiveChanges: the change list of a delegation whose executor
// created 20,000 files of 4 KB names (an 80 MB log) is made a page at a
// time and holds 4 MiB of names: the heap grows by a few MiB, not by the
// log.
func BenchmarkLiveChanges(b *testing.B) {
	store, err := lease.Open(filepath.Join(b.TempDir(), "delegator.db"), lease.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	const id, ops = "dlg_changes", 20000
	if err := store.CreateDelegation(&lease.Delegation{Lease: lease.Lease{ID: id, AccessMode: "rw"}}); err != nil {
		b.Fatal(err)
	}
	// The stored log keeps every record (its byte bound would drop the
	// oldest of these long names): what is measured is the list's bound.
	a := &AuditLog{Store: store, MaxRecords: ops, MaxBytes: 1 << 30}
	rec := a.For(id)
	long := strings.Repeat("n", 4000)
	for i := range ops {
		rec.Record(sshd.Op{Kind: sshd.OpCreate, Path: fmt.Sprintf("%s%d", long, i)})
		if i%1000 == 999 {
			a.flush() // as Run would, about once a second
		}
	}
	a.End(id)
	base := liveHeap()
	var peak uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
	}()
	b.ResetTimer()
	var listed int
	var notes []string
	for range b.N {
		changes, n, err := liveChanges(store, id)
		if err != nil {
			b.Fatal(err)
		}
		listed, notes = len(changes), n
	}
	b.StopTimer()
	close(stop)
	<-sampled
	if listed == 0 || listed*4000 > maxChangeBytes || len(notes) != 1 {
		b.Fatalf("%d listed, notes %q", listed, notes)
	}
	b.ReportMetric(float64(peak-min(base, peak))/(1<<20), "MiB-heap-peak-growth")
	b.ReportMetric(float64(listed), "paths-listed")
}
