package linediff

import (
	"fmt"
	"io"
	"strings"
)

// ContextLines is how many unchanged lines a hunk shows around a change.
const ContextLines = 3

// WriteHunks writes edits as unified diff hunks, each line as show makes
// it (its end of line aside).
func WriteHunks(w io.Writer, edits []Edit, show func(string) string) error {
	// oldAt[i], newAt[i]: the line numbers (from 1) edit i stands at.
	oldAt, newAt := make([]int, len(edits)+1), make([]int, len(edits)+1)
	o, n := 1, 1
	for i, e := range edits {
		oldAt[i], newAt[i] = o, n
		if e.Op != '+' {
			o++
		}
		if e.Op != '-' {
			n++
		}
	}
	oldAt[len(edits)], newAt[len(edits)] = o, n
	changed := func(i int) bool { return edits[i].Op != ' ' }
	for i := 0; i < len(edits); {
		for i < len(edits) && !changed(i) {
			i++
		}
		if i == len(edits) {
			break
		}
		start := max(0, i-ContextLines)
		end := i
		for j := i; j < len(edits); j++ {
			if changed(j) {
				end = j
			} else if j-end > 2*ContextLines {
				break
			}
		}
		end = min(len(edits), end+1+ContextLines)
		oldN, newN := oldAt[end]-oldAt[start], newAt[end]-newAt[start]
		if _, err := fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(oldAt[start], oldN), hunkRange(newAt[start], newN)); err != nil {
			return err
		}
		for _, e := range edits[start:end] {
			line := e.Line
			nl := strings.HasSuffix(line, "\n")
			line = show(strings.TrimSuffix(line, "\n"))
			if nl {
				line += "\n"
			}
			if _, err := fmt.Fprintf(w, "%c%s", e.Op, line); err != nil {
				return err
			}
			if !nl {
				if _, err := io.WriteString(w, "\n\\ No newline at end of file\n"); err != nil {
					return err
				}
			}
		}
		i = end
	}
	return nil
}

// hunkRange is a hunk header's range: an empty one starts the line before.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start-1)
	case 1:
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}
