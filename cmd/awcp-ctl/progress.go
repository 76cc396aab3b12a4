package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// transferBar draws an archive's transfer on a terminal, as rsync and
// rclone do: one line redrawn in place, at most ten times a second, ended
// when the transfer is. It draws nothing when the output is not a
// terminal (a pipe, a file, a CI log).
type transferBar struct {
	w io.Writer

	mu         sync.Mutex
	what       string    // the transfer on the line; "" when none is
	start      time.Time // of the transfer on the line
	drawn      time.Time // when the line was last drawn
	sent, size int64     // what the line's transfer last reported
	finished   string    // the last transfer drawn complete: later reports of it are not
}

// newTransferBar is a bar on w, or nil if w is not a terminal.
func newTransferBar(w io.Writer) *transferBar {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), getTermios); err != nil {
		return nil
	}
	return &transferBar{w: w}
}

// update shows done of total bytes of transfer what (total -1: unknown).
func (b *transferBar) update(_ string, what string, done, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	complete := total > 0 && done >= total
	if what == b.finished {
		return
	}
	now := time.Now()
	if what != b.what {
		b.endLine()
		b.what, b.start = what, now
	}
	b.sent, b.size = done, total
	if !complete && now.Sub(b.drawn) < 100*time.Millisecond {
		return
	}
	b.draw(now)
	if complete {
		b.finished = what
		b.endLine()
	}
}

// draw writes the line's transfer as it last reported.
func (b *transferBar) draw(now time.Time) {
	b.drawn = now
	label := b.what
	switch b.what {
	case "workspace":
		label = "sending workspace"
	case "result":
		label = "receiving result"
	}
	rate := ""
	if secs := now.Sub(b.start).Seconds(); secs > 0.2 {
		rate = "  " + size(int64(float64(b.sent)/secs)) + "/s"
	}
	if b.size > 0 {
		const width = 24
		done := min(b.sent, b.size)
		filled := int(done * width / b.size)
		bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
		fmt.Fprintf(b.w, "\rawcp: %s [%s] %3d%%  %s of %s%s\x1b[K", label, bar, done*100/b.size, size(done), size(b.size), rate)
	} else {
		fmt.Fprintf(b.w, "\rawcp: %s  %s%s\x1b[K", label, size(b.sent), rate)
	}
}

// done ends the line of a transfer still drawn, before other output,
// with what it last reported. A nil bar (not a terminal) does nothing.
func (b *transferBar) done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.what != "" && !b.drawn.IsZero() {
		b.draw(time.Now())
	}
	b.finished = b.what
	b.endLine()
}

func (b *transferBar) endLine() {
	if b.what != "" && !b.drawn.IsZero() {
		fmt.Fprintln(b.w)
	}
	b.what, b.drawn = "", time.Time{}
}

// size is n bytes in the unit that shows it: a small workspace read
// "0.0 MiB of 0.0 MiB".
func size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
