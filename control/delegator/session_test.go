//go:build linux

package delegator

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// A session is taken over (session/load) only once its gateway has
// ended, in its own directory, by its id: one a live gateway holds is
// refused, another id or directory finds nothing, and a driven session
// (MCP, CLI) is never an editor's to take.
func TestFindSessionOnlyOfAGoneGateway(t *testing.T) {
	dlg, store := newArchiveDelegator(t, nil)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "30")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	dir := t.TempDir()
	add := func(id, sessionID string, owner int, driven bool) {
		d := &lease.Delegation{Lease: lease.Lease{ID: id, State: lease.Running, AccessMode: control.AccessRW}, LocalDir: dir,
			Session: control.SessionACP, SessionDriven: driven, OwnerPID: owner,
			SessionChannel: &lease.SessionChannel{SessionID: sessionID}}
		if err := store.CreateDelegation(d); err != nil {
			t.Fatal(err)
		}
	}
	add("dlg_held", "s-held", live.Process.Pid, false)
	var pe *control.ProtocolError
	if _, err := dlg.FindSession("s-held", dir); !errors.As(err, &pe) || pe.Code != control.CodeUsage {
		t.Fatalf("a session a live gateway holds: %v, want USAGE", err)
	}
	store.UpdateDelegation("dlg_held", func(d *lease.Delegation) error { d.State = lease.Completed; return nil })
	add("dlg_gone", "s-gone", gone.Process.Pid, false)
	if d, err := dlg.FindSession("s-gone", dir); err != nil || d.ID != "dlg_gone" {
		t.Fatalf("a session whose gateway has ended: %v %v", d, err)
	}
	for _, c := range []struct{ id, dir string }{{"s-other", dir}, {"s-gone", t.TempDir()}} {
		if _, err := dlg.FindSession(c.id, c.dir); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("session %s in %s: %v, want not found", c.id, c.dir, err)
		}
	}
	// Its gateway in another PID namespace (an agent's sandbox, a
	// container): whether it runs cannot be told from here, so it is
	// held.
	store.UpdateDelegation("dlg_gone", func(d *lease.Delegation) error { d.OwnerPIDNS = pidNamespace() + 1; return nil })
	if _, err := dlg.FindSession("s-gone", dir); !errors.As(err, &pe) || pe.Code != control.CodeUsage {
		t.Fatalf("a session whose gateway is in another PID namespace: %v, want USAGE", err)
	}
	store.UpdateDelegation("dlg_gone", func(d *lease.Delegation) error { d.SessionDriven = true; return nil })
	if _, err := dlg.FindSession("s-gone", dir); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("a driven session was found for an editor: %v", err)
	}
}
