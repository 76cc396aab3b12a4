package lease

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

func openStore(t *testing.T, path string, shared bool) *Store {
	t.Helper()
	s, err := Open(path, Options{Shared: shared, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestDelegationSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "ctl.db")
	s := openStore(t, path, false)
	d := &Delegation{Lease: Lease{ID: "dlg_one", AccessMode: "rw", Transport: "archive", TTLSeconds: 60},
		Peer: "http://peer", LocalDir: "/tmp/x"}
	if err := s.CreateDelegation(d); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []Event{SendInvite, ReceiveAccept, SendStart, SetupComplete} {
		if _, err := s.FireDelegation(d.ID, ev, "", nil); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
	}
	if _, err := s.UpdateDelegation(d.ID, func(d *Delegation) error { d.LastEventID = 7; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FireDelegation(d.ID, ReceiveDone, "", nil); err != nil {
		t.Fatal(err)
	}
	// A refused transition changes nothing.
	var te *TransitionError
	if _, err := s.FireDelegation(d.ID, Cancel, "", nil); !errors.As(err, &te) {
		t.Fatalf("cancel after done: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, path, false)
	got, err := s2.Delegation(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != Completed || got.LastEventID != 7 || got.Peer != "http://peer" || len(got.Transitions) != 5 {
		t.Fatalf("after reopen: %+v", got)
	}
	if got.Transitions[4].From != Running || got.Transitions[4].To != Completed || got.Transitions[4].At.IsZero() {
		t.Fatalf("last transition %+v", got.Transitions[4])
	}
	if got.EndedAt.IsZero() {
		t.Fatal("EndedAt not set on terminal state")
	}
}

func TestOneRWDelegationPerDirectory(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "ctl.db"), true)
	mk := func(id, dir, mode string) error {
		return s.CreateDelegation(&Delegation{Lease: Lease{ID: id, AccessMode: mode}, LocalDir: dir})
	}
	if err := mk("dlg_a", "/w/repo", "rw"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, id, dir, mode string
		busy                bool
	}{
		{name: "same dir rw", id: "dlg_b", dir: "/w/repo", mode: "rw", busy: true},
		{name: "subdir rw", id: "dlg_c", dir: "/w/repo/sub", mode: "rw", busy: true},
		{name: "parent rw", id: "dlg_d", dir: "/w", mode: "rw", busy: true},
		{name: "sibling with prefix", id: "dlg_e", dir: "/w/repo2", mode: "rw"},
		{name: "same dir ro", id: "dlg_f", dir: "/w/repo", mode: "ro"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mk(tt.id, tt.dir, tt.mode)
			var busy *DirBusyError
			if errors.As(err, &busy) != tt.busy {
				t.Fatalf("err = %v, want busy %v", err, tt.busy)
			}
			if tt.busy && busy.ID != "dlg_a" {
				t.Fatalf("busy names %s", busy.ID)
			}
		})
	}
	// Once dlg_a ends, the directory is free again.
	if _, err := s.FireDelegation("dlg_a", Cancel, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := mk("dlg_g", "/w/repo", "rw"); err != nil {
		t.Fatalf("after cancel: %v", err)
	}
}

func TestSharedStoreAcrossHandles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.db")
	a := openStore(t, path, true)
	b := openStore(t, path, true)
	if err := a.CreateDelegation(&Delegation{Lease: Lease{ID: "dlg_x", AccessMode: "ro"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.FireDelegation("dlg_x", SendInvite, "", nil); err != nil {
		t.Fatal(err)
	}
	d, err := a.Delegation("dlg_x")
	if err != nil || d.State != Invited {
		t.Fatalf("%v %v", d, err)
	}
}

// EndedDelegations names the ended and the unknown, not the live.
func TestEndedDelegations(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "ctl.db"), true)
	for _, id := range []string{"dlg_live", "dlg_over"} {
		if err := s.CreateDelegation(&Delegation{Lease: Lease{ID: id, AccessMode: "ro"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.FireDelegation("dlg_over", Cancel, "", nil); err != nil {
		t.Fatal(err)
	}
	ended, err := s.EndedDelegations([]string{"dlg_live", "dlg_over", "dlg_gone"})
	if err != nil || !slices.Equal(ended, []string{"dlg_over", "dlg_gone"}) {
		t.Fatalf("ended %v, %v", ended, err)
	}
}

func TestAssignmentLimitAndEvents(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "fs.db"), false)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CreateAssignment(&Assignment{Lease: Lease{ID: "dlg_" + string(rune('a'+i))}}, 2)
		}()
	}
	wg.Wait()
	ok, busy := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrBusy):
			busy++
		default:
			t.Fatal(err)
		}
	}
	if ok != 2 || busy != 3 {
		t.Fatalf("ok=%d busy=%d, want 2 and 3", ok, busy)
	}

	all, _ := s.Assignments()
	id := all[0].ID
	if _, _, err := s.FireAssignment(id, SendStart, "", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.FireAssignment(id, SetupComplete, "", nil, []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if seq, err := s.AppendEvents(id, [][]byte{[]byte(`{"n":2}`), []byte(`{"n":3}`)}); err != nil || seq != 3 {
		t.Fatalf("append: %d %v", seq, err)
	}
	if _, seq, err := s.FireAssignment(id, ReceiveDone, "", nil, []byte(`{"n":4}`)); err != nil || seq != 4 {
		t.Fatalf("done: %d %v", seq, err)
	}
	if _, err := s.AppendEvents(id, [][]byte{[]byte(`{"n":5}`)}); err == nil {
		t.Fatal("event appended after the terminal one")
	}
	evs, err := s.EventsAfter(id, 1, 0)
	if err != nil || len(evs) != 3 || evs[0].Seq != 2 || string(evs[2].Data) != `{"n":4}` {
		t.Fatalf("EventsAfter(1) = %+v, %v", evs, err)
	}
	if last, err := s.LastEvents(id, 2); err != nil || len(last) != 2 || last[0].Seq != 3 || string(last[1].Data) != `{"n":4}` {
		t.Fatalf("LastEvents(2) = %+v, %v", last, err)
	}
	if all, _ := s.LastEvents(id, 10); len(all) != 4 || all[0].Seq != 1 {
		t.Fatalf("LastEvents(10) = %+v", all)
	}
	// A terminal assignment frees its slot.
	if err := s.CreateAssignment(&Assignment{Lease: Lease{ID: "dlg_z"}}, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAssignment(id); err != nil {
		t.Fatal(err)
	}
	if evs, _ := s.EventsAfter(id, 0, 0); len(evs) != 0 {
		t.Fatal("events outlived their assignment")
	}
}

func TestSchedulerExpiresOnlyAllowedStates(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "ctl.db"), false)
	now := time.Now()
	mk := func(id string, events []Event, expires time.Time) {
		t.Helper()
		if err := s.CreateDelegation(&Delegation{Lease: Lease{ID: id, AccessMode: "ro"}}); err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if _, err := s.FireDelegation(id, ev, "", nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.UpdateDelegation(id, func(d *Delegation) error { d.ExpiresAt = expires; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	past, soon, later := now.Add(-time.Hour), now.Add(300*time.Millisecond), now.Add(time.Hour)
	mk("dlg_overdue_running", []Event{SendInvite, ReceiveAccept, SendStart, SetupComplete}, past)
	mk("dlg_overdue_started", []Event{SendInvite, ReceiveAccept, SendStart}, past)
	mk("dlg_overdue_created", nil, past)
	mk("dlg_soon_invited", []Event{SendInvite}, soon)
	mk("dlg_later_running", []Event{SendInvite, ReceiveAccept, SendStart, SetupComplete}, later)

	expired := make(chan string, 10)
	sch := NewScheduler(Scheduler{
		List: func() ([]Due, error) {
			ds, err := s.Delegations()
			var out []Due
			for _, d := range ds {
				out = append(out, Due{ID: d.ID, State: d.State, ExpiresAt: d.ExpiresAt})
			}
			return out, err
		},
		Expire: func(ctx context.Context, id string) error {
			_, err := s.FireDelegation(id, Expire, "lease expired", nil)
			expired <- id
			return err
		},
		MaxWait: 50 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sch.Run(ctx) }()
	defer func() { cancel(); <-done }()

	want := []string{"dlg_overdue_running", "dlg_soon_invited"}
	for i, w := range want {
		select {
		case id := <-expired:
			if id != w {
				t.Fatalf("expiry %d: got %s want %s", i, id, w)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("no expiry of %s", w)
		}
	}
	select {
	case id := <-expired:
		t.Fatalf("unexpected expiry of %s", id)
	case <-time.After(200 * time.Millisecond):
	}
	for id, st := range map[string]State{"dlg_overdue_started": Started, "dlg_overdue_created": Created, "dlg_later_running": Running, "dlg_soon_invited": Expired} {
		d, _ := s.Delegation(id)
		if d.State != st {
			t.Errorf("%s: state %s, want %s", id, d.State, st)
		}
	}
}

func TestFindDelegation(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "ctl.db"), true)
	for i, id := range []string{"ab12-one", "ab34-two"} {
		d := &Delegation{Lease: Lease{ID: id, AccessMode: "ro", Transport: "archive", TTLSeconds: 60},
			LocalDir: filepath.Join("/tmp", id, string(rune('a'+i)))}
		if err := s.CreateDelegation(d); err != nil {
			t.Fatal(err)
		}
	}
	var amb *AmbiguousError
	tests := []struct {
		name, arg, want string
		check           func(error) bool
	}{
		{name: "full id", arg: "ab12-one", want: "ab12-one"},
		{name: "unique prefix", arg: "ab3", want: "ab34-two"},
		{name: "shared prefix", arg: "ab", check: func(err error) bool { return errors.As(err, &amb) && amb.Matches == 2 }},
		{name: "unknown", arg: "zz", check: func(err error) bool { return errors.Is(err, ErrNotFound) }},
		{name: "empty", arg: "", check: func(err error) bool { return errors.Is(err, ErrNotFound) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := s.FindDelegation(tt.arg)
			if tt.check != nil {
				if !tt.check(err) {
					t.Fatalf("FindDelegation(%q) = %v, %v", tt.arg, d, err)
				}
				return
			}
			if err != nil || d.ID != tt.want {
				t.Fatalf("FindDelegation(%q) = %v, %v; want %s", tt.arg, d, err, tt.want)
			}
		})
	}
}

// TestSharedStoreTurns: handles of one shared store (as the daemon and
// the command line are) writing at once, from goroutines of one process
// too, each get their turn and lose nothing.
func TestSharedStoreTurns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.db")
	handles := []*Store{openStore(t, path, true), openStore(t, path, true), openStore(t, path, true)}
	if err := handles[0].CreateDelegation(&Delegation{Lease: Lease{ID: "dlg_count", AccessMode: "ro"}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, s := range handles {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					if _, err := s.UpdateDelegation("dlg_count", func(d *Delegation) error { d.LastEventID++; return nil }); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if d, err := handles[1].Delegation("dlg_count"); err != nil || d.LastEventID != 3*4*25 {
		t.Fatalf("count %v, want %d (%v)", d.LastEventID, 3*4*25, err)
	}
}

// A delegation keeps its agent's last MaxProgress lines and counts the
// ones it let go; ProgressAfter shows each line once to a follower, all
// of them again if the one it saw last is gone.
func TestProgressKeepsTheLastLines(t *testing.T) {
	var d Delegation
	for i := 1; i <= MaxProgress+50; i++ {
		d.AddProgress(ProgressLine{Seq: uint64(i), Text: fmt.Sprint(i)})
	}
	if len(d.Progress) != MaxProgress || d.ProgressDropped != 50 || d.Progress[0].Text != "51" {
		t.Fatalf("kept %d lines from %q, dropped %d", len(d.Progress), d.Progress[0].Text, d.ProgressDropped)
	}
	last := d.Progress[MaxProgress-3]
	if after := ProgressAfter(d.Progress, &last); len(after) != 2 || after[0].Seq != last.Seq+1 {
		t.Fatalf("after line %d: %+v", last.Seq, after)
	}
	gone := ProgressLine{Seq: 1, Text: "1"}
	if after := ProgressAfter(d.Progress, &gone); len(after) != MaxProgress {
		t.Fatalf("after a line no longer kept: %d lines", len(after))
	}
}
