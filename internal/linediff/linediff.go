// Package linediff computes line diffs: the shortest edit script between
// two texts' lines, for review's unified diffs and merge3's merges.
package linediff

// Edit is one line of a line diff: Op ' ' kept, '-' removed, '+' added.
type Edit struct {
	Op   byte
	Line string
}

// Lines is a shortest edit script from a to b (Myers' algorithm, on what
// is left once the common start and end are set aside). Past maxEdits
// edits (its memory grows with their square) a and b are taken as
// replaced whole.
func Lines(a, b []string, maxEdits int) []Edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	out := make([]Edit, 0, len(a)+len(b)-pre-suf)
	for _, l := range a[:pre] {
		out = append(out, Edit{' ', l})
	}
	out = append(out, myers(a[pre:len(a)-suf], b[pre:len(b)-suf], maxEdits)...)
	for _, l := range a[len(a)-suf:] {
		out = append(out, Edit{' ', l})
	}
	return out
}

func myers(a, b []string, maxEdits int) []Edit {
	n, m := len(a), len(b)
	if n+m == 0 {
		return nil
	}
	off := n + m + 1
	v := make([]int, 2*off+1)
	// trace[d] is v's window k = -d-1 … d+1 as round d found it.
	var trace [][]int
	for d := 0; d <= n+m; d++ {
		if d > maxEdits {
			return replaced(a, b)
		}
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(trace, a, b)
			}
		}
	}
	return replaced(a, b)
}

func backtrack(trace [][]int, a, b []string) []Edit {
	x, y := len(a), len(b)
	var rev []Edit
	for d := len(trace) - 1; d >= 0; d-- {
		w := trace[d]
		at := func(k int) int { return w[k+d+1] }
		k := x - y
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := at(pk)
		py := px - pk
		for x > px && y > py {
			rev = append(rev, Edit{' ', a[x-1]})
			x, y = x-1, y-1
		}
		if d > 0 {
			if x == px {
				rev = append(rev, Edit{'+', b[y-1]})
			} else {
				rev = append(rev, Edit{'-', a[x-1]})
			}
		}
		x, y = px, py
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

func replaced(a, b []string) []Edit {
	out := make([]Edit, 0, len(a)+len(b))
	for _, l := range a {
		out = append(out, Edit{'-', l})
	}
	for _, l := range b {
		out = append(out, Edit{'+', l})
	}
	return out
}
