package delegator

import (
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// The agent's progress lines are kept with the delegation (the last
// lease.MaxProgress), so that `awcp-ctl logs -f`, `output`, `status
// --json` and the MCP tools show them from any process. An agent may
// print thousands of lines a second: they are held here and stored
// together — every progressEvery (watchIdle's tick), before any other event is
// recorded, and when the stream is left — not one store write a line.

// holdProgress keeps a progress event's line until storeProgress.
func (d *Delegator) holdProgress(id string, seq uint64, ev *control.Event) {
	at := time.Now().UTC()
	if t, err := time.Parse(time.RFC3339Nano, ev.Timestamp); err == nil {
		at = t
	}
	line := lease.ProgressLine{Seq: seq, At: at, Text: ev.Message}
	d.mu.Lock()
	held := append(d.progress[id], line)
	if n := len(held); n > lease.MaxProgress {
		held = held[n-lease.MaxProgress:] // the store would drop them anyway
	}
	d.progress[id] = held
	d.mu.Unlock()
}

// storeProgress writes the lines held for id to its record.
func (d *Delegator) storeProgress(id string) {
	d.mu.Lock()
	held := d.progress[id]
	delete(d.progress, id)
	d.mu.Unlock()
	if len(held) == 0 {
		return
	}
	_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		if n := len(del.Progress); n > 0 {
			last := del.Progress[n-1].Seq
			for len(held) > 0 && held[0].Seq != 0 && held[0].Seq <= last {
				held = held[1:] // shown again after a restart of this process
			}
		}
		if len(held) == 0 {
			return errUnchanged
		}
		del.AddProgress(held...)
		return nil
	})
	if err != nil && err != errUnchanged {
		d.log.Debug("store progress", "delegation", id, "err", err)
	}
}
