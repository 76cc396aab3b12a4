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

// heldLines are a delegation's progress lines not yet stored, at most
// lease.MaxProgress, and how many older ones were let go meanwhile.
type heldLines struct {
	lines   []lease.ProgressLine
	dropped uint64
}

// holdProgress keeps a progress event's line until storeProgress.
func (d *Delegator) holdProgress(id string, seq uint64, ev *control.Event) {
	at := time.Now().UTC()
	if t, err := time.Parse(time.RFC3339Nano, ev.Timestamp); err == nil {
		at = t
	}
	line := lease.ProgressLine{Seq: seq, At: at, Text: ev.Message}
	d.mu.Lock()
	h := d.progress[id]
	if h == nil {
		h = &heldLines{}
		d.progress[id] = h
	}
	h.lines = append(h.lines, line)
	if n := len(h.lines); n > lease.MaxProgress {
		// The store would drop them anyway: counted, not held.
		h.dropped += uint64(n - lease.MaxProgress)
		h.lines = append(h.lines[:0], h.lines[n-lease.MaxProgress:]...)
	}
	d.mu.Unlock()
}

// storeProgress writes the lines held for id to its record.
func (d *Delegator) storeProgress(id string) {
	d.mu.Lock()
	h := d.progress[id]
	delete(d.progress, id)
	d.mu.Unlock()
	if h == nil || len(h.lines) == 0 {
		return
	}
	held := h.lines
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
		del.ProgressDropped += h.dropped
		return nil
	})
	if err != nil && err != errUnchanged {
		d.log.Debug("store progress", "delegation", id, "err", err)
	}
}

// note tells Options.Progress what this delegator did for delegation id.
func (d *Delegator) note(id, msg string) {
	if d.opts.Progress != nil {
		d.opts.Progress(id, &control.Event{DelegationID: id, Type: EventNote, Message: msg})
	}
}
