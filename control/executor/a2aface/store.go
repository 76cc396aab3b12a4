package a2aface

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
)

// lentTask is what the face knows of one A2A task beyond the SDK's record
// of it: the delegation it is, who made it, how far its events were
// followed (the cursor a continuation resumes from, so no event is given
// twice), the permission request it waits on, and the workspace it was
// given (kept for the diff until the task ends).
type lentTask struct {
	delegation string
	caller     executor.Caller
	workspace  string // the workspace ZIP the client sent
	mu         sync.Mutex
	cursor     uint64 // the last event given to the client
	pending    *control.Event
	ended      bool
	// following says an Execute follows the delegation now: it, not
	// Cancel, writes the task's end (one writer of a terminal event).
	following bool
}

// mayTouch says whether c may see, steer or end the task: a task made by
// a client with a key, or else a token, is that client's alone.
func (t *lentTask) mayTouch(c executor.Caller) bool {
	return c.MayTouch(t.caller)
}

// taskBook holds the tasks: the SDK's records (a2asrv.TaskStore, kept as
// JSON so that what a caller changes is its own copy) and the face's, at
// most max of them: past it the oldest ended ones are forgotten.
type taskBook struct {
	max      int
	maxBytes int64
	mu       sync.Mutex
	order    []a2a.TaskID // first saved first
	saved    map[a2a.TaskID][]byte
	bytes    int64 // of saved
	lents    map[a2a.TaskID]*lentTask
}

func newTaskBook(max int, maxBytes int64) *taskBook {
	return &taskBook{max: max, maxBytes: maxBytes, saved: map[a2a.TaskID][]byte{}, lents: map[a2a.TaskID]*lentTask{}}
}

// Save is a2asrv.TaskStore's.
func (b *taskBook) Save(_ context.Context, t *a2a.Task) error {
	data, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("save task %s: %w", t.ID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old, known := b.saved[t.ID]
	if !known {
		if len(b.saved) >= b.max && !b.forgetOne(t.ID) {
			return fmt.Errorf("save task %s: %d tasks are running or waiting, the most this executor keeps", t.ID, b.max)
		}
		b.order = append(b.order, t.ID)
	}
	b.saved[t.ID] = data
	b.bytes += int64(len(data) - len(old))
	// The tasks' records (their artifacts) are bounded together: the
	// oldest ended ones go first; one still going is never forgotten.
	for b.bytes > b.maxBytes && b.forgetOne(t.ID) {
	}
	return nil
}

// Get is a2asrv.TaskStore's.
func (b *taskBook) Get(_ context.Context, id a2a.TaskID) (*a2a.Task, error) {
	b.mu.Lock()
	data, ok := b.saved[id]
	b.mu.Unlock()
	if !ok {
		return nil, a2a.ErrTaskNotFound
	}
	var t a2a.Task
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("task %s: %w", id, err)
	}
	return &t, nil
}

// forgetOne forgets the oldest task but keep that has ended, or one the
// face never lent (refused before it was); false if every task is still
// going.
// Called with b.mu held.
func (b *taskBook) forgetOne(keep a2a.TaskID) bool {
	for i, id := range b.order {
		if id == keep {
			continue
		}
		t := b.lents[id]
		if t != nil {
			t.mu.Lock()
			ended := t.ended
			t.mu.Unlock()
			if !ended {
				continue
			}
		}
		b.bytes -= int64(len(b.saved[id]))
		delete(b.saved, id)
		delete(b.lents, id)
		b.order = append(b.order[:i], b.order[i+1:]...)
		return true
	}
	return false
}

func (b *taskBook) lend(id a2a.TaskID, t *lentTask) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lents[id] = t
}

func (b *taskBook) lent(id a2a.TaskID) *lentTask {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lents[id]
}

// end marks t ended and removes the workspace it kept.
func (t *lentTask) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	t.ended = true
	if t.workspace != "" {
		os.Remove(t.workspace)
	}
}
