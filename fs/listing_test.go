package fs

import (
	"testing"
	"time"

	"github.com/awcp/awcp/fs/sftpc"
)

// Only the keptListings newest listings are kept: a walk over a large tree
// does not hold the whole tree's names.
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
