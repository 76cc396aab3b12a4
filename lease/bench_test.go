package lease

import (
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkAppendEvent is one progress event written durably.
func BenchmarkAppendEvent(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "fs.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateAssignment(&Assignment{Lease: Lease{ID: "dlg_b"}}, 1); err != nil {
		b.Fatal(err)
	}
	ev := [][]byte{[]byte(`{"delegationId":"dlg_b","type":"status","status":"progress","message":"compiling"}`)}
	for b.Loop() {
		if _, err := s.AppendEvents("dlg_b", ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSharedTransition is a delegator transition with the store opened
// per call, as the CLI and daemon share it.
func BenchmarkSharedTransition(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "ctl.db"), Options{Shared: true})
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		id := "dlg_" + strconv.Itoa(i)
		i++
		if err := s.CreateDelegation(&Delegation{Lease: Lease{ID: id, AccessMode: "ro"}}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.FireDelegation(id, Cancel, "", nil); err != nil {
			b.Fatal(err)
		}
	}
}
