package fs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/lease"
	"github.com/awcp/awcp/sshd"
)

// BenchmarkPerRequestCost is what the delegator's watch and its audit log
// add to each request that changes the tree: an op is a small file made
// (create, write, close), renamed and removed through a real mount, five
// requests the audit records and the watch must tell from the owner's
// changes. "both" is how a delegation runs; "unaudited" has no audit log;
// "unwatched" has the mount not ask for the watch (the delegator then
// watches nothing). The three run in turn, perRequestRounds times, each
// on a mount of its own (`make bench`).
func BenchmarkPerRequestCost(b *testing.B) {
	cases := []struct {
		name           string
		audit, watched bool
	}{{"both", true, true}, {"unaudited", false, true}, {"unwatched", true, false}}
	for round := range perRequestRounds {
		for _, c := range cases {
			b.Run(fmt.Sprintf("round%d/%s", round+1, c.name), func(b *testing.B) { perRequest(b, c.audit, c.watched) })
		}
	}
}

// perRequestRounds is how many times the three run, in turn.
const perRequestRounds = 5

func perRequest(b *testing.B, audit, watched bool) {
	var exp sshd.Export
	if audit {
		store, err := lease.Open(filepath.Join(b.TempDir(), "delegator.db"), lease.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close()
		log := &delegator.AuditLog{Store: store}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); log.Run(ctx) }()
		defer func() { stop(); <-done }()
		exp.Audit = log.For("dlg_bench")
	}
	f := newMountOf(b, exp, func(o *Options) { o.NoWatch = !watched })
	if watched {
		waitExact(b, f)
	}
	dir := filepath.Join(f.mnt, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1000)
	i := 0
	for b.Loop() {
		i++
		p, q := filepath.Join(dir, fmt.Sprint("f", i)), filepath.Join(dir, fmt.Sprint("g", i))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(p, q); err != nil {
			b.Fatal(err)
		}
		if err := os.Remove(q); err != nil {
			b.Fatal(err)
		}
	}
}
