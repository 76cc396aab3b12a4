package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The book is a JSON file of the peers a browser knew, so that the next
// run shows offline the ones that went away, and remembers which agent id
// each name had (Resolve refuses a name that changed hands).
func readBook(path string) ([]*Peer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var peers []*Peer
	if err := json.Unmarshal(b, &peers); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var ok []*Peer
	for _, p := range peers {
		if p != nil && p.AgentID != "" {
			ok = append(ok, p)
		}
	}
	return ok, nil
}

// bookEvery is how often the book is written when only last-seen times
// changed.
const bookEvery = time.Minute

// saveIfDue saves the book if a peer came, went or moved since it was
// last saved, or its last-seen times are a minute old.
func (b *Browser) saveIfDue() error {
	b.mu.Lock()
	due := b.dirty || time.Since(b.saved) >= bookEvery
	b.mu.Unlock()
	if !due {
		return nil
	}
	return b.save()
}

// save writes the book, whole, by rename: a reader never sees half of it.
func (b *Browser) save() error {
	if b.Book == "" {
		return nil
	}
	b.mu.Lock()
	b.dirty, b.saved = false, time.Now()
	b.mu.Unlock()
	peers := b.Peers()
	data, err := json.MarshalIndent(peers, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(b.Book), ".peers-*")
	if err != nil {
		return fmt.Errorf("peer book: %w", err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), b.Book)
	}
	if werr == nil {
		if fi, err := os.Stat(b.Book); err == nil {
			b.mu.Lock()
			b.book = fi
			b.mu.Unlock()
		}
	}
	if werr != nil {
		os.Remove(tmp.Name())
		b.mu.Lock()
		b.dirty = true
		b.mu.Unlock()
		return fmt.Errorf("peer book: %w", werr)
	}
	return nil
}

// Save writes the book now.
func (b *Browser) Save() error { b.init(); return b.save() }

// rereadTrust takes up the trust the book says, if another process wrote
// the book since this browser last read or wrote it: a long-lived browser
// (peers --watch, the daemon) then neither chooses an executor the user
// stopped trusting (`peers untrust`) nor writes that trust back, and sees
// one the user trusted since. The book's word on trust wins; what this
// browser saw of the network stays its own.
func (b *Browser) rereadTrust() {
	if b.Book == "" {
		return
	}
	fi, err := os.Stat(b.Book)
	if err != nil {
		return
	}
	b.mu.Lock()
	same := b.book != nil && os.SameFile(fi, b.book) && fi.ModTime().Equal(b.book.ModTime()) && fi.Size() == b.book.Size()
	b.mu.Unlock()
	if same {
		return
	}
	known, err := readBook(b.Book)
	if err != nil {
		b.Logger.Warn("peer book unreadable; trust as it was", "book", b.Book, "err", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.book = fi
	inBook := map[string]*Peer{}
	for _, p := range known {
		inBook[p.AgentID] = p
	}
	changed := false
	for id, cur := range b.peers {
		key := ""
		if p, ok := inBook[id]; ok {
			key = p.TrustedKey
		}
		if cur.TrustedKey != key {
			cur.TrustedKey, changed = key, true
		}
	}
	for id, p := range inBook {
		if _, ok := b.peers[id]; !ok && p.TrustedKey != "" && len(b.peers) < MaxPeers {
			p.Online = false
			b.peers[id], changed = p, true
		}
	}
	if changed {
		b.notifyLocked()
	}
}
