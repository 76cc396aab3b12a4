package fs

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
)

// Only the keptListings newest listings are kept, and no more than
// keptEntries entries in all: a walk over a large tree does not hold the
// whole tree's names.
func TestListingsBounded(t *testing.T) {
	fsys := &filesystem{entry: time.Minute}
	dirs := make([]*node, keptListings+10)
	for i := range dirs {
		dirs[i] = &node{fsys: fsys}
		dirs[i].keepListing([]sftpc.Entry{{Name: "a"}}, 0, 0)
	}
	dirs[len(dirs)-1].keepListing(nil, 0, 0) // listed again: still kept once
	for i, d := range dirs {
		_, kept := d.cachedListing()
		if want := i >= 10; kept != want {
			t.Fatalf("directory %d of %d: kept %v, want %v", i, len(dirs), kept, want)
		}
	}
	fsys.changing(dirs[len(dirs)-2])() // elsewhere: the listing stays current
	if _, kept := dirs[len(dirs)-1].cachedListing(); !kept {
		t.Fatal("a change to another directory dropped a listing")
	}
	fsys.changing(dirs[len(dirs)-1])()
	if _, kept := dirs[len(dirs)-1].cachedListing(); kept {
		t.Fatal("a listing outlived a change made through the mount to its directory")
	}
}

func TestListingsBoundedByEntries(t *testing.T) {
	fsys := &filesystem{entry: time.Minute}
	big := make([]sftpc.Entry, keptEntries/4+1)
	dirs := make([]*node, 5)
	for i := range dirs {
		dirs[i] = &node{fsys: fsys}
		dirs[i].keepListing(big, 0, 0)
	}
	for i, d := range dirs {
		if _, kept := d.freshListing(); kept != (i >= 2) {
			t.Fatalf("directory %d of 5 listings of %d entries each: kept %v", i, len(big), kept)
		}
	}
	// Listed again, smaller: what it holds is counted anew.
	dirs[4].keepListing(big[:1], 0, 0)
	d := &node{fsys: fsys}
	d.keepListing(big, 0, 0)
	if _, kept := dirs[2].freshListing(); !kept {
		t.Fatal("a listing was dropped though the entries kept fit")
	}
	if fsys.listings.entries != 3*len(big)+1 {
		t.Fatalf("%d entries counted, want %d", fsys.listings.entries, 3*len(big)+1)
	}
}

// BenchmarkListingsHeld is what a mount holds at most in listings, beyond
// the inodes: the directories of a large tree walked, each with 4 entries
// of 12-byte names, up to keptEntries (`make bench` reports the heap).
func BenchmarkListingsHeld(b *testing.B) {
	for b.Loop() {
		fsys := &filesystem{entry: time.Minute}
		nodes := make([]*node, keptEntries/4) // the inodes a walk makes anyway
		for i := range nodes {
			nodes[i] = &node{fsys: fsys}
		}
		before := heapNow()
		for i, n := range nodes {
			ents := make([]sftpc.Entry, 4)
			for j := range ents {
				ents[j] = sftpc.Entry{Name: fmt.Sprintf("f%05d-%04d", i, j)}
			}
			n.keepListing(ents, 0, 0)
		}
		grown := heapNow() - before
		b.ReportMetric(float64(grown)/float64(fsys.listings.entries), "heap-B/entry")
		b.ReportMetric(float64(grown)/(1<<20), "heap-MiB")
		runtime.KeepAlive(nodes)
	}
}
