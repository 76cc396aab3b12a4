package control

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The archive transport carries whole workspaces as base64 strings inside
// JSON (workDir.workspaceBase64 or transportHandle.workspaceBase64 in
// START, resultBase64 in done, snapshotBase64 in a head snapshot event).
// Neither side holds such a string: the sender splices the base64 of a ZIP
// file into the marshalled message as it is sent, and the receiver diverts
// the string's content, decoded, into a file as it is read. What stays in
// memory is the rest of the message.

// JSONSyntaxError is a document the diverter cannot read: not JSON, or
// more than it keeps in memory.
type JSONSyntaxError struct{ msg string }

func (e *JSONSyntaxError) Error() string { return e.msg }

func syntaxErrorf(format string, args ...any) error {
	return &JSONSyntaxError{fmt.Sprintf(format, args...)}
}

var (
	errTooDeep      = syntaxErrorf("JSON nested too deeply")
	ErrRestTooLarge = syntaxErrorf("JSON message too large")
)

// diverter reads one JSON value and copies it to rest, except the string
// member at path (path[i] lists the names a member may have at depth i,
// "[]" standing for any item of an array):
// its decoded content goes to the writer open returns, and rest holds ""
// in its place. It checks only what it needs to find its way;
// the caller decodes rest, which rejects anything else.
type diverter struct {
	r     *bufio.Reader
	path  [][]string
	open  func() (io.Writer, error)
	rest  bytes.Buffer
	max   int
	mark  string // what rest holds in the diverted string's place
	found bool   // the member was diverted: a second one is kept
	// DivertEach's: every string member match says yes to (given the
	// object keys that lead to it, arrays passed through) goes to the
	// writer openEach returns, its mark in rest.
	match    func(keys []string) bool
	openEach func() (io.Writer, string, error)
	keys     []string
}

// Divert reads one JSON value from r; open is called only if the member
// is there. max bounds the rest (without the diverted string).
func Divert(r *bufio.Reader, path [][]string, max int, open func() (io.Writer, error)) (rest []byte, err error) {
	return DivertMarked(r, path, max, "", open)
}

// DivertMarked is Divert with mark (JSON string content, unescaped) in
// the diverted string's place, for a reader that refuses an empty one.
func DivertMarked(r *bufio.Reader, path [][]string, max int, mark string, open func() (io.Writer, error)) (rest []byte, err error) {
	d := &diverter{r: r, path: path, open: open, max: max, mark: mark}
	if err := d.value(0, 0); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return d.rest.Bytes(), nil
}

// DivertEach reads one JSON value from r, diverting every string member
// match says yes to — each decoded into the writer of its own openEach
// gives, which also names the mark rest holds in its place — and
// copying the rest, at most max bytes, to rest. For answers that carry
// many files (an A2A task's file parts), none of them held in memory.
func DivertEach(r *bufio.Reader, max int, match func(keys []string) bool, openEach func() (io.Writer, string, error)) (rest []byte, err error) {
	d := &diverter{r: r, max: max, match: match, openEach: openEach, found: true}
	if err := d.value(0, -1); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return d.rest.Bytes(), nil
}

func (d *diverter) keep(b ...byte) error {
	d.rest.Write(b)
	if d.rest.Len() > d.max {
		return ErrRestTooLarge
	}
	return nil
}

// space copies white space and returns the next byte, unread.
func (d *diverter) space() (byte, error) {
	for {
		c, err := d.r.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			if err := d.keep(c); err != nil {
				return 0, err
			}
			continue
		}
		return c, d.r.UnreadByte()
	}
}

// value reads a value at depth; matched is how many path keys lead to it
// (-1: off the path).
func (d *diverter) value(depth, matched int) error {
	if depth > 64 {
		return errTooDeep
	}
	c, err := d.space()
	if err != nil {
		return err
	}
	switch c {
	case '{':
		return d.object(depth, matched)
	case '[':
		// "[]" on the path leads on through every item of an array.
		next := -1
		if matched >= 0 && matched < len(d.path) && slices.Contains(d.path[matched], "[]") {
			next = matched + 1
		}
		return d.sequence(']', func() error { return d.value(depth+1, next) })
	case '"':
		if matched == len(d.path) && !d.found {
			return d.divertString()
		}
		if d.match != nil && d.match(d.keys) {
			w, mark, err := d.openEach()
			if err != nil {
				return err
			}
			d.mark = mark
			return d.divertTo(w)
		}
		_, err := d.copyString()
		return err
	}
	// A number or a literal: up to the next delimiter.
	for {
		c, err := d.r.ReadByte()
		if err != nil {
			return err
		}
		switch c {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return d.r.UnreadByte()
		}
		if err := d.keep(c); err != nil {
			return err
		}
	}
}

// object reads an object; its member named path[matched] leads on along
// the path.
func (d *diverter) object(depth, matched int) error {
	return d.sequence('}', func() error {
		if err := d.expect('"'); err != nil {
			return err
		}
		key, err := d.copyString()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		d.r.ReadByte()
		if err := d.keep(':'); err != nil {
			return err
		}
		next := -1
		if matched >= 0 && matched < len(d.path) && slices.Contains(d.path[matched], key) {
			next = matched + 1
		}
		if d.match == nil {
			return d.value(depth+1, next)
		}
		d.keys = append(d.keys, key)
		err = d.value(depth+1, next)
		d.keys = d.keys[:len(d.keys)-1]
		return err
	})
}

// sequence reads an object or an array from its opening byte: items read
// by item, separated by commas, up to closer.
func (d *diverter) sequence(closer byte, item func() error) error {
	opener, _ := d.r.ReadByte()
	if err := d.keep(opener); err != nil {
		return err
	}
	for first := true; ; first = false {
		c, err := d.space()
		if err != nil {
			return err
		}
		if c == closer {
			d.r.ReadByte()
			return d.keep(closer)
		}
		if !first {
			if c != ',' {
				return syntaxErrorf("JSON: %q where , or %c belongs", c, closer)
			}
			d.r.ReadByte()
			if err := d.keep(','); err != nil {
				return err
			}
		}
		if err := item(); err != nil {
			return err
		}
	}
}

// expect reads on to the next byte, which must be c, and leaves it unread.
func (d *diverter) expect(c byte) error {
	got, err := d.space()
	if err == nil && got != c {
		err = syntaxErrorf("JSON: %q where %q belongs", got, c)
	}
	return err
}

// copyString copies a string to rest and returns its decoded value.
func (d *diverter) copyString() (string, error) {
	start := d.rest.Len()
	d.r.ReadByte()
	if err := d.keep('"'); err != nil {
		return "", err
	}
	for escaped := false; ; {
		c, err := d.r.ReadByte()
		if err != nil {
			return "", err
		}
		if err := d.keep(c); err != nil {
			return "", err
		}
		switch {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			var s string
			if err := json.Unmarshal(d.rest.Bytes()[start:], &s); err != nil {
				return "", syntaxErrorf("JSON: %v", err)
			}
			return s, nil
		}
	}
}

// divertString writes the string's decoded content to the opened writer,
// in runs between escapes, and keeps "" in rest.
func (d *diverter) divertString() error {
	d.found = true
	w, err := d.open()
	if err != nil {
		return err
	}
	return d.divertTo(w)
}

// divertTo writes the string's decoded content to w, and keeps d.mark in
// rest in its place.
func (d *diverter) divertTo(w io.Writer) error {
	d.r.ReadByte()
	if err := d.keep('"'); err != nil {
		return err
	}
	if err := d.keep([]byte(d.mark)...); err != nil {
		return err
	}
	if err := d.keep('"'); err != nil {
		return err
	}
	var esc []byte // an escape sequence under way, from its backslash
	for {
		chunk, rerr := d.r.ReadSlice('"')
		start := 0
		for i, c := range chunk {
			switch {
			case esc != nil:
				esc = append(esc, c)
				dec, done, err := unescape(esc)
				if err != nil {
					return err
				}
				if done {
					if _, err := w.Write(dec); err != nil {
						return err
					}
					esc = nil
				}
				start = i + 1
			case c == '\\':
				if _, err := w.Write(chunk[start:i]); err != nil {
					return err
				}
				esc = []byte{c}
			case c == '"':
				_, err := w.Write(chunk[start:i])
				return err
			case c < 0x20:
				return syntaxErrorf("JSON: control character in a string")
			}
		}
		if esc == nil && start < len(chunk) {
			if _, err := w.Write(chunk[start:]); err != nil {
				return err
			}
		}
		if rerr != nil && !errors.Is(rerr, bufio.ErrBufferFull) {
			return rerr
		}
	}
}

// unescape decodes the escape sequence seq once it is complete.
func unescape(seq []byte) (dec []byte, done bool, err error) {
	if len(seq) < 2 {
		return nil, false, nil
	}
	switch seq[1] {
	case '"', '\\', '/':
		return seq[1:2], true, nil
	case 'b':
		return []byte{'\b'}, true, nil
	case 'f':
		return []byte{'\f'}, true, nil
	case 'n':
		return []byte{'\n'}, true, nil
	case 'r':
		return []byte{'\r'}, true, nil
	case 't':
		return []byte{'\t'}, true, nil
	case 'u':
		if len(seq) < 6 {
			return nil, false, nil
		}
		r, err := strconv.ParseUint(string(seq[2:6]), 16, 16)
		if err != nil {
			return nil, false, syntaxErrorf("JSON: bad \\u escape")
		}
		return utf8.AppendRune(nil, rune(r)), true, nil
	}
	return nil, false, syntaxErrorf("JSON: bad escape \\%c", seq[1])
}

// base64Error is input to a base64Writer that is not base64.
type base64Error struct{ msg string }

func (e *base64Error) Error() string { return e.msg }

// base64Writer decodes standard base64 written to it into dst. Close
// decodes what is left and reports a truncated input.
type base64Writer struct {
	dst     io.Writer
	pending []byte // fewer than 4 input bytes not decoded yet
	out     []byte
}

func (b *base64Writer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(b.pending) > 0 || len(p) < 4 {
			take := min(4-len(b.pending), len(p))
			b.pending = append(b.pending, p[:take]...)
			p = p[take:]
			if len(b.pending) < 4 {
				break
			}
			if err := b.decode(b.pending); err != nil {
				return 0, err
			}
			b.pending = b.pending[:0]
			continue
		}
		whole := min(len(p)/4*4, 64<<10)
		if err := b.decode(p[:whole]); err != nil {
			return 0, err
		}
		p = p[whole:]
	}
	return n, nil
}

func (b *base64Writer) decode(in []byte) error {
	if cap(b.out) < base64.StdEncoding.DecodedLen(len(in)) {
		b.out = make([]byte, base64.StdEncoding.DecodedLen(len(in)))
	}
	n, err := base64.StdEncoding.Decode(b.out[:cap(b.out)], in)
	if err != nil {
		return &base64Error{"not valid base64"}
	}
	_, err = b.dst.Write(b.out[:n])
	return err
}

// Close reports input that ended inside a 4-byte group.
func (b *base64Writer) Close() error {
	if len(b.pending) != 0 {
		return &base64Error{"not valid base64 (truncated)"}
	}
	return nil
}

// base64Reader encodes src as standard base64 as it is read.
type base64Reader struct {
	src io.Reader
	in  []byte
	out []byte // the encoding of the last chunk of src
	off int    // how much of out was read
	err error  // src's end (io.EOF) or failure
}

func NewBase64Reader(src io.Reader) *base64Reader {
	const chunk = 48 << 10 // a multiple of 3: only the last chunk is padded
	return &base64Reader{src: src, in: make([]byte, chunk), out: make([]byte, 0, base64.StdEncoding.EncodedLen(chunk))}
}

func (b *base64Reader) Read(p []byte) (int, error) {
	for b.off == len(b.out) {
		if b.err != nil {
			return 0, b.err
		}
		n, err := io.ReadFull(b.src, b.in)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		b.err = err
		b.out = b.out[:base64.StdEncoding.EncodedLen(n)]
		base64.StdEncoding.Encode(b.out, b.in[:n])
		b.off = 0
	}
	n := copy(p, b.out[b.off:])
	b.off += n
	return n, nil
}

// SpoolFile is a base64 string decoded into a temporary file as it is
// written. Input that is not base64 is read to its end and reported by
// finish, so that the message around it can still be read and answered.
// A nil *SpoolFile discards nothing.
type SpoolFile struct {
	f     *os.File
	sum   hash.Hash // of the decoded bytes: START's checksum needs no second read
	dec   base64Writer
	bad   error // the input is not base64
	limit int64 // base64 bytes it may take; 0: no limit
	taken int64
	// progress, if set, is told taken after each write.
	progress func(taken int64)
}

// SpoolFullError is a base64 string longer than its spool's limit: what an
// executor that never ends its result would otherwise write to the
// delegator's disk.
type SpoolFullError struct{ limit int64 }

func (e *SpoolFullError) Error() string {
	return fmt.Sprintf("a result of more than %d bytes (base64)", e.limit)
}

// Spooled is what a SpoolFile received.
type Spooled struct {
	File string
	Sum  string // hex SHA-256 of the file
	Bad  error  // the input was not base64: the file is of no use
}

// NewSpoolFile spools into a new file in dir, taking at most limit bytes
// of base64 (0: no limit, for input bounded otherwise).
func NewSpoolFile(dir string, limit int64) (*SpoolFile, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("spool the result: %w", err)
		}
	}
	f, err := os.CreateTemp(dir, "awcp-spool-*.zip")
	if err != nil {
		return nil, fmt.Errorf("spool the result: %w", err)
	}
	s := &SpoolFile{f: f, sum: sha256.New(), limit: limit}
	s.dec.dst = io.MultiWriter(f, s.sum)
	return s, nil
}

func (s *SpoolFile) Write(p []byte) (int, error) {
	if s.taken += int64(len(p)); s.limit > 0 && s.taken > s.limit {
		return 0, &SpoolFullError{limit: s.limit}
	}
	if s.progress != nil {
		s.progress(s.taken)
	}
	if s.bad != nil {
		return len(p), nil
	}
	if _, err := s.dec.Write(p); err != nil {
		var notBase64 *base64Error
		if !errors.As(err, &notBase64) {
			return 0, err // the file's
		}
		s.bad = err
	}
	return len(p), nil
}

// finish closes the file and says what it holds; err is a file that could
// not be written.
func (s *SpoolFile) Finish() (Spooled, error) {
	if s.bad == nil {
		s.bad = s.dec.Close()
	}
	return Spooled{File: s.f.Name(), Sum: hex.EncodeToString(s.sum.Sum(nil)), Bad: s.bad}, s.f.Close()
}

// discard removes the file.
func (s *SpoolFile) Discard() {
	if s != nil {
		s.f.Close()
		os.Remove(s.f.Name())
	}
}
