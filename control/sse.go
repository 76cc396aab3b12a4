package control

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrStreamEnded is returned when the stream ends before a terminal event.
var ErrStreamEnded = errors.New("event stream ended before the task did")

// MaxEventBytes bounds an event's data apart from a diverted result.
const MaxEventBytes = 16 << 20

// ReadSSE parses a text/event-stream, calling fn with each event's id and
// data until fn reports the end. An event's top-level resultBase64 (or
// snapshotBase64) is not kept in data: it is decoded into a file in
// spoolDir as it is read — maxResult bytes of base64 at most, 0 for no
// limit — given to fn (with bad set if it was not base64), and removed
// when fn returns.
func ReadSSE(r io.Reader, spoolDir string, maxResult int64, fn func(seq uint64, data []byte, result Spooled) (bool, error)) error {
	return SSEReader{SpoolDir: spoolDir, MaxResult: maxResult}.Read(r, fn)
}

// SSEReader is ReadSSE's settings, and one more: Progress, if set, is
// told how many bytes of a result's base64 have been spooled, as they are.
type SSEReader struct {
	SpoolDir  string
	MaxResult int64
	Progress  func(base64Bytes int64)
}

// Read is ReadSSE with s's settings.
func (s SSEReader) Read(r io.Reader, fn func(seq uint64, data []byte, result Spooled) (bool, error)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		ev := &sseEvent{br: br}
		data := bufio.NewReader(ev)
		if _, err := data.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				continue // an event without data, or a comment
			}
			return err
		}
		var spool *SpoolFile
		rest, err := Divert(data, [][]string{{"resultBase64", "snapshotBase64"}}, MaxEventBytes, func() (io.Writer, error) {
			var err error
			spool, err = NewSpoolFile(s.SpoolDir, s.MaxResult)
			if spool != nil {
				spool.progress = s.Progress
			}
			return spool, err
		})
		if err == nil {
			_, err = io.Copy(io.Discard, data) // to the event's end, past a late id
		}
		var result Spooled
		if err == nil && spool != nil {
			result, err = spool.Finish()
		}
		if err != nil {
			spool.Discard()
			if errors.Is(err, ErrStreamEnded) {
				return err
			}
			return fmt.Errorf("bad event after %d: %w", ev.seq, err)
		}
		end, err := fn(ev.seq, rest, result)
		spool.Discard()
		if err != nil || end {
			return err
		}
	}
}

// sseEvent reads the data of one server-sent event: its data lines joined
// by newlines, then io.EOF at the blank line that ends the event. Other
// fields are read on the way (id) or skipped.
type sseEvent struct {
	br      *bufio.Reader
	seq     uint64
	left    []byte // data not read yet; may point into br's buffer
	inData  bool   // within a data line
	hasData bool   // a data line was read
	end     bool
}

func (e *sseEvent) Read(p []byte) (int, error) {
	for len(e.left) == 0 {
		if e.end {
			return 0, io.EOF
		}
		if err := e.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, e.left)
	e.left = e.left[n:]
	return n, nil
}

// next reads on to the next piece of data, or to the event's end. A line
// is read in chunks of br's buffer: only a data line can be longer.
func (e *sseEvent) next() error {
	chunk, err := e.br.ReadSlice('\n')
	full := errors.Is(err, bufio.ErrBufferFull)
	switch {
	case full:
	case errors.Is(err, io.EOF):
		return ErrStreamEnded
	case err != nil:
		return err
	}
	if !full {
		chunk = bytes.TrimRight(chunk, "\r\n")
	}
	if e.inData { // the rest of a long data line
		e.left, e.inData = chunk, full
		return nil
	}
	switch {
	case bytes.HasPrefix(chunk, []byte("data:")):
		chunk = bytes.TrimPrefix(chunk[5:], []byte(" "))
		if e.hasData {
			// Lines of one event's data are joined by newlines; the
			// chunk stays valid until br is read again.
			e.left = append([]byte{'\n'}, chunk...)
		} else {
			e.left = chunk
		}
		e.inData, e.hasData = full, true
	case full: // a long line of another field: skipped
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = e.br.ReadSlice('\n')
		}
		if errors.Is(err, io.EOF) {
			return ErrStreamEnded
		}
		return err
	case len(chunk) == 0:
		e.end = true
	case bytes.HasPrefix(chunk, []byte("id:")):
		e.seq, _ = strconv.ParseUint(strings.TrimSpace(string(chunk[3:])), 10, 64)
	}
	return nil
}

// KeepAliveHeader (ours) is sent by a delegator with the interval, in
// whole seconds, at which it wants keep-alive comments on an event
// stream; an executor that honours it answers with the interval it uses.
// Having the answer, the delegator takes a stream that stays silent for
// three intervals as lost. An executor that does not answer it (the
// reference's) is waited for as long as TCP keeps the connection.
const KeepAliveHeader = "AWCP-Keep-Alive"
