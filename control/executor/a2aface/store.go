package a2aface

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv/taskstore"

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

// taskBook holds the tasks: the SDK's records (taskstore.Store, kept as
// JSON so that what a caller changes is its own copy) and the face's, at
// most max of them: past it the oldest ended ones are forgotten.
type taskBook struct {
	max      int
	maxBytes int64
	mu       sync.Mutex
	order    []a2a.TaskID // first saved first
	saved    map[a2a.TaskID]savedTask
	bytes    int64 // of saved
	lents    map[a2a.TaskID]*lentTask
}

// savedTask is one task's record as the SDK last wrote it.
type savedTask struct {
	data    []byte
	version taskstore.TaskVersion
}

func newTaskBook(max int, maxBytes int64) *taskBook {
	return &taskBook{max: max, maxBytes: maxBytes, saved: map[a2a.TaskID]savedTask{}, lents: map[a2a.TaskID]*lentTask{}}
}

// Create is taskstore.Store's.
func (b *taskBook) Create(_ context.Context, t *a2a.Task) (taskstore.TaskVersion, error) {
	data, err := json.Marshal(t)
	if err != nil {
		return 0, fmt.Errorf("save task %s: %w", t.ID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, known := b.saved[t.ID]; known {
		return 0, taskstore.ErrTaskAlreadyExists
	}
	if len(b.saved) >= b.max && !b.forgetOne(t.ID) {
		return 0, fmt.Errorf("save task %s: %d tasks are running or waiting, the most this executor keeps", t.ID, b.max)
	}
	b.order = append(b.order, t.ID)
	return b.put(t.ID, data, 0), nil
}

// Update is taskstore.Store's: refused if the task changed since the
// version the SDK read.
func (b *taskBook) Update(_ context.Context, u *taskstore.UpdateRequest) (taskstore.TaskVersion, error) {
	data, err := json.Marshal(u.Task)
	if err != nil {
		return 0, fmt.Errorf("save task %s: %w", u.Task.ID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old, known := b.saved[u.Task.ID]
	if !known {
		return 0, a2a.ErrTaskNotFound
	}
	if u.PrevVersion != taskstore.TaskVersionMissing && u.PrevVersion != old.version {
		return 0, taskstore.ErrConcurrentModification
	}
	return b.put(u.Task.ID, data, old.version), nil
}

// put keeps data as id's record, the version after prev.
// Called with b.mu held.
func (b *taskBook) put(id a2a.TaskID, data []byte, prev taskstore.TaskVersion) taskstore.TaskVersion {
	b.bytes += int64(len(data) - len(b.saved[id].data))
	v := prev + 1
	b.saved[id] = savedTask{data: data, version: v}
	// The tasks' records (their artifacts) are bounded together: the
	// oldest ended ones go first; one still going is never forgotten.
	for b.bytes > b.maxBytes && b.forgetOne(id) {
	}
	return v
}

// Get is taskstore.Store's.
func (b *taskBook) Get(_ context.Context, id a2a.TaskID) (*taskstore.StoredTask, error) {
	b.mu.Lock()
	rec, ok := b.saved[id]
	b.mu.Unlock()
	if !ok {
		return nil, a2a.ErrTaskNotFound
	}
	var t a2a.Task
	if err := json.Unmarshal(rec.data, &t); err != nil {
		return nil, fmt.Errorf("task %s: %w", id, err)
	}
	return &taskstore.StoredTask{Task: &t, Version: rec.version}, nil
}

// maxListed is the most tasks ListTasks gives at once.
const maxListed = 100

// List is taskstore.Store's: the tasks the caller may touch, newest
// first, at most a page of them; another client's tasks are not shown
// to exist. A page token is the id of the last task of the page before.
func (b *taskBook) List(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	c, _ := callerFrom(ctx)
	size := req.PageSize
	if size <= 0 || size > maxListed {
		size = maxListed
	}
	b.mu.Lock()
	var ids []a2a.TaskID
	for i := len(b.order) - 1; i >= 0; i-- {
		id := b.order[i]
		if t := b.lents[id]; t != nil && t.mayTouch(c) {
			ids = append(ids, id)
		}
	}
	b.mu.Unlock()
	var matched []*a2a.Task
	for _, id := range ids {
		st, err := b.Get(ctx, id)
		if err != nil {
			continue // forgotten meanwhile
		}
		t := st.Task
		if (req.ContextID != "" && t.ContextID != req.ContextID) || (req.Status != "" && t.Status.State != req.Status) ||
			(req.StatusTimestampAfter != nil && (t.Status.Timestamp == nil || !t.Status.Timestamp.After(*req.StatusTimestampAfter))) {
			continue
		}
		matched = append(matched, t)
	}
	start := 0
	if req.PageToken != "" {
		start = len(matched)
		for i, t := range matched {
			if string(t.ID) == req.PageToken {
				start = i + 1
			}
		}
	}
	page := matched[start:min(start+size, len(matched))]
	resp := &a2a.ListTasksResponse{Tasks: make([]*a2a.Task, 0, len(page)), TotalSize: len(matched)}
	for _, t := range page {
		if !req.IncludeArtifacts {
			t.Artifacts = nil
		}
		if h := req.HistoryLength; h != nil && len(t.History) > max(*h, 0) {
			t.History = t.History[len(t.History)-max(*h, 0):]
		}
		resp.Tasks = append(resp.Tasks, t)
	}
	if start+size < len(matched) {
		resp.NextPageToken = string(page[len(page)-1].ID)
	}
	resp.PageSize = len(resp.Tasks)
	return resp, nil
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
		b.bytes -= int64(len(b.saved[id].data))
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
