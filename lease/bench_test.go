package lease

import (
	"path/filepath"
	"strconv"
	"strings"
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

// BenchmarkFindDelegation is a short-prefix look-up, as `awcp-ctl status
// ID` does, in a shared store of 300 delegations.
func BenchmarkFindDelegation(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "ctl.db"), Options{Shared: true})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 300 {
		id := "dlg" + strconv.Itoa(i) + "-5f0c9a2e"
		d := &Delegation{Lease: Lease{ID: id, AccessMode: "ro"}, LocalDir: "/tmp/" + id, Notes: []string{"a note to decode"}}
		if err := s.CreateDelegation(d); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if d, err := s.FindDelegation("dlg150-"); err != nil || d.ID != "dlg150-5f0c9a2e" {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkDelegationCensus is one scrape's count of a shared store of
// 2,000 delegations with 4 KB prompts, as a long-used delegator's metrics
// read it.
func BenchmarkDelegationCensus(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "ctl.db"), Options{Shared: true})
	if err != nil {
		b.Fatal(err)
	}
	prompt := strings.Repeat("p", 4096)
	for i := range 2000 {
		id := "dlg" + strconv.Itoa(i)
		if err := s.CreateDelegation(&Delegation{Lease: Lease{ID: id, AccessMode: "ro", Transport: "archive"}, Prompt: prompt}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if c, err := s.DelegationCensus(); err != nil || c[[2]string{"created", "archive"}] != 2000 {
			b.Fatal(c, err)
		}
	}
}

// BenchmarkSharedRead is one delegation read from a shared store, as a
// session's driver and a follower polling the record do.
func BenchmarkSharedRead(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "ctl.db"), Options{Shared: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.CreateDelegation(&Delegation{Lease: Lease{ID: "dlg_read", AccessMode: "ro"}}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Delegation("dlg_read"); err != nil {
			b.Fatal(err)
		}
	}
}
