package a2aface

import (
	"context"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// The tasks remembered are bounded in number and in bytes: the oldest
// ended ones go first, and a task still going is never forgotten — a new
// one is refused instead.
func TestTaskBookIsBounded(t *testing.T) {
	ctx := context.Background()
	b := newTaskBook(3, 4096)
	save := func(id string, size int) error {
		_, err := b.Create(ctx, &a2a.Task{ID: a2a.TaskID(id), Metadata: map[string]any{"pad": strings.Repeat("x", size)}})
		return err
	}
	for _, id := range []string{"going", "ended1", "ended2"} {
		if err := save(id, 10); err != nil {
			t.Fatal(err)
		}
		t1 := &lentTask{}
		if id != "going" {
			t1.ended = true
		}
		b.lend(a2a.TaskID(id), t1)
	}
	if err := save("new", 10); err != nil {
		t.Fatalf("a fourth task, with ended ones to forget: %v", err)
	}
	if _, err := b.Get(ctx, "ended1"); err == nil {
		t.Errorf("the oldest ended task was kept past the bound")
	}
	if _, err := b.Get(ctx, "going"); err != nil {
		t.Errorf("a task still going was forgotten: %v", err)
	}
	// Bytes: a large record pushes the ended ones out, never the going one.
	b.lend("new", &lentTask{})
	if err := save("big", 3500); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "ended2"); err == nil {
		t.Errorf("an ended task was kept past the byte bound")
	}
	if _, err := b.Get(ctx, "going"); err != nil {
		t.Errorf("a task still going was forgotten for bytes: %v", err)
	}
	b.lend("big", &lentTask{})
	if err := save("one-too-many", 10); err == nil {
		t.Errorf("a task past the bound with every task going: saved")
	}
}
