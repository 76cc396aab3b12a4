package lease

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestAppendProgressKeepsTheLast: of an assignment's progress events only
// the last keep stay; the others (status, done) are never dropped, and
// sequence numbers go on, so a reader sees the jump.
func TestAppendProgressKeepsTheLast(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "x.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := &Assignment{Lease: Lease{ID: "d1", TTLSeconds: 60}, WorkDir: "/w", StartBy: time.Now().Add(time.Minute)}
	if err := s.CreateAssignment(a, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvents("d1", [][]byte{[]byte("running")}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		batch := [][]byte{[]byte(fmt.Sprintf("p%d", 2*i)), []byte(fmt.Sprintf("p%d", 2*i+1))}
		if _, err := s.AppendProgress("d1", batch, 5); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.EventsAfter("d1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Data))
	}
	want := "[1:running 17:p15 18:p16 19:p17 20:p18 21:p19]"
	if fmt.Sprint(got) != want {
		t.Fatalf("events %v, want %s", got, want)
	}
	if err := s.DeleteAssignment("d1"); err != nil {
		t.Fatal(err)
	}
}
