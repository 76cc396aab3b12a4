// Package merge3 merges two sets of changes to one text by lines, as
// git merge-file does: the changes each side made to the common base are
// both taken where they touch different lines; where both changed the
// same lines (or lines next to each other, which git also calls a
// conflict) the merge reports the base's lines in question and gives no
// text. Changes both sides made alike are taken once.
package merge3

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/awcp/awcp/internal/linediff"
)

// MaxBytes bounds each text Merge takes: past it a file is treated as
// binary (not merged). A line diff's memory grows with its edit distance.
const MaxBytes = 4 << 20

// maxEdits bounds the edit distance the line diff looks for; past it the
// texts are taken as replaced whole (a conflict, unless one side is the
// base).
const maxEdits = 4000

// Conflict is a range of the base's lines (1-based, inclusive) both sides
// changed.
type Conflict struct{ From, To int }

func (c Conflict) String() string {
	if c.To <= c.From {
		return fmt.Sprintf("line %d", c.From)
	}
	return fmt.Sprintf("lines %d–%d", c.From, c.To)
}

// Text reports whether b is text Merge takes: no NUL byte, not too big.
func Text(b []byte) bool { return len(b) <= MaxBytes && bytes.IndexByte(b, 0) < 0 }

// Merge merges ours and theirs, each changed from base. It returns the
// merged text, or the conflicts and nil.
func Merge(base, ours, theirs []byte) ([]byte, []Conflict) {
	b, o, t := lines(base), lines(ours), lines(theirs)
	hs := append(hunks(b, o, 'o'), hunks(b, t, 't')...)
	// By where they start in the base; at one place an insertion (an
	// empty range) first.
	sortHunks(hs)
	var out []string
	var conflicts []Conflict
	at := 0 // the base's next line not yet written
	for i := 0; i < len(hs); {
		// A group: the hunks that overlap or touch the first, across
		// both sides.
		g := []hunk{hs[i]}
		end := hs[i].end
		j := i + 1
		// Starting where the group ends counts: git takes changes of
		// adjacent lines, and two insertions at one place, for a
		// conflict.
		for ; j < len(hs) && hs[j].start <= end; j++ {
			g = append(g, hs[j])
			end = max(end, hs[j].end)
		}
		i = j
		start := g[0].start
		out = append(out, b[at:start]...)
		at = end
		sides := map[byte]bool{}
		for _, h := range g {
			sides[h.side] = true
		}
		switch {
		case len(sides) == 1: // one side's changes only
			out = append(out, apply(b, start, end, g)...)
		case sameChange(b, start, end, g):
			out = append(out, apply(b, start, end, only(g, 'o'))...)
		default:
			conflicts = append(conflicts, Conflict{From: start + 1, To: max(end, start+1)})
		}
	}
	if len(conflicts) > 0 {
		return nil, conflicts
	}
	out = append(out, b[at:]...)
	return []byte(strings.Join(out, "")), nil
}

// hunk is one side's change: the base's lines [start, end) replaced by
// repl.
type hunk struct {
	start, end int
	repl       []string
	side       byte
}

func hunks(base, side []string, name byte) []hunk {
	var out []hunk
	i := 0 // in base
	var cur *hunk
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	for _, e := range linediff.Lines(base, side, maxEdits) {
		switch e.Op {
		case ' ':
			flush()
			i++
		case '-':
			if cur == nil {
				cur = &hunk{start: i, end: i, side: name}
			}
			i++
			cur.end = i
		case '+':
			if cur == nil {
				cur = &hunk{start: i, end: i, side: name}
			}
			cur.repl = append(cur.repl, e.Line)
		}
	}
	flush()
	return out
}

// apply is the base's lines [start, end) with the group's changes (all of
// one side, in order) made.
func apply(b []string, start, end int, g []hunk) []string {
	var out []string
	at := start
	for _, h := range g {
		out = append(out, b[at:h.start]...)
		out = append(out, h.repl...)
		at = h.end
	}
	return append(out, b[at:end]...)
}

func only(g []hunk, side byte) []hunk {
	var out []hunk
	for _, h := range g {
		if h.side == side {
			out = append(out, h)
		}
	}
	return out
}

// sameChange reports whether both sides make the base's [start, end) the
// same text.
func sameChange(b []string, start, end int, g []hunk) bool {
	return strings.Join(apply(b, start, end, only(g, 'o')), "") == strings.Join(apply(b, start, end, only(g, 't')), "")
}

func sortHunks(hs []hunk) {
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && less(hs[j], hs[j-1]); j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
}

func less(a, b hunk) bool {
	if a.start != b.start {
		return a.start < b.start
	}
	return a.end < b.end
}

// lines splits s after each newline; the last line may have none.
func lines(s []byte) []string {
	if len(s) == 0 {
		return nil
	}
	out := strings.SplitAfter(string(s), "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}
