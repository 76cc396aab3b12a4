package a2apeer

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/awcp/awcp/control"
)

// Neither the workspace sent nor the files an agent sends back are held
// in memory: a task's message carries a mark where the workspace's base64
// belongs, which the transport replaces with the ZIP's base64 streamed
// from its file as the request is sent; and every file part of an answer
// (a JSON-RPC answer, read before the SDK sees it) is decoded into a file
// of its own as it arrives, a mark left in its place for the follower to
// take (spools). The SDK decodes what is left: words and names.

// maxRest bounds what an answer may hold outside its file parts.
const maxRest = 32 << 20

// workspaceMarkRaw is the bytes a task's message holds in its workspace
// part, and workspaceMark their base64, which the transport finds where
// the workspace's base64 goes: random, so that no prompt can be it. (The
// SDK sends a part's bytes as base64: the mark must be some bytes'.)
var workspaceMarkRaw = func() []byte {
	b := make([]byte, 24) // 32 characters of base64, no padding
	rand.Read(b)
	return b
}()

var workspaceMark = base64.StdEncoding.EncodeToString(workspaceMarkRaw)

// spools are the file parts of one client's answers, by mark: each
// mark is the base64 of "awcp-spool-<random>:<n>", which the SDK decodes
// into the part's bytes, where the follower finds it (take).
type spools struct {
	dir    string
	prefix string
	mu     sync.Mutex
	n      int
	files  map[string]control.Spooled // by the mark's bytes
}

func newSpools(dir string) *spools {
	b := make([]byte, 8)
	rand.Read(b)
	return &spools{dir: dir, prefix: "awcp-spool-" + hex.EncodeToString(b) + ":", files: map[string]control.Spooled{}}
}

// take gives the file spooled under mark (a part's bytes, decoded), which
// is then the caller's to remove; ok false if mark is none of this client's.
func (s *spools) take(mark string) (control.Spooled, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[mark]
	delete(s.files, mark)
	return f, ok
}

// close removes every file not taken: those of answers the follower has
// done with (a task polled that had not ended yet), or all at the end.
func (s *spools) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for m, f := range s.files {
		os.Remove(f.File)
		delete(s.files, m)
	}
}

// isFileBytes says whether the string at keys is a file part's content
// (A2A 1.0: {"raw":"<base64>","filename":…}; 0.3:
// {"kind":"file","file":{"name":…,"bytes":"<base64>"}}), at any depth:
// a task's artifacts, its history, a status message.
func isFileBytes(keys []string) bool {
	n := len(keys)
	return (n >= 1 && keys[n-1] == "raw") || (n >= 2 && keys[n-2] == "file" && keys[n-1] == "bytes")
}

// divert reads a JSON answer of body, each file part into a spool (at
// most max bytes of base64 in all), and returns the rest.
func (s *spools) divert(body io.Reader, max int64) ([]byte, error) {
	type pending struct {
		f   *control.SpoolFile
		key string // the mark's bytes
	}
	var got []pending
	var taken int64
	rest, err := control.DivertEach(bufio.NewReaderSize(body, 64<<10), maxRest, isFileBytes, func() (io.Writer, string, error) {
		s.mu.Lock()
		s.n++
		key := fmt.Sprintf("%s%d", s.prefix, s.n)
		s.mu.Unlock()
		left := max - taken
		if left <= 0 {
			return nil, "", fmt.Errorf("the agent's files are past the %d bytes a result may be", maxResult)
		}
		f, err := control.NewSpoolFile(s.dir, left)
		if err != nil {
			return nil, "", err
		}
		got = append(got, pending{f, key})
		return countingWriter{f, &taken}, base64.StdEncoding.EncodeToString([]byte(key)), nil
	})
	for _, p := range got {
		sp, ferr := p.f.Finish()
		if err != nil || ferr != nil {
			os.Remove(sp.File)
			err = firstError(err, ferr)
			continue
		}
		s.mu.Lock()
		s.files[p.key] = sp
		s.mu.Unlock()
	}
	if err != nil {
		for _, p := range got {
			if f, ok := s.take(p.key); ok {
				os.Remove(f.File)
			}
		}
		return nil, err
	}
	return rest, nil
}

func firstError(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

type countingWriter struct {
	w io.Writer
	n *int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	*c.n += int64(n)
	return n, err
}

// spliceWorkspace makes r's body, if it holds the workspace's mark as a
// JSON string, send the base64 of the ZIP at file in its place, read as
// it is sent.
func spliceWorkspace(r *http.Request, file string) (*http.Request, error) {
	if r.Body == nil || r.GetBody == nil {
		return r, nil
	}
	msg, err := io.ReadAll(io.LimitReader(r.Body, maxRest))
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	at := bytes.LastIndex(msg, []byte(`"`+workspaceMark+`"`))
	if at < 0 {
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(msg))
		return r, nil
	}
	before, after := msg[:at], msg[at+len(workspaceMark)+2:]
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("the workspace kept for the task: %w", err)
	}
	body := func() (io.ReadCloser, error) {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("the workspace kept for the task: %w", err)
		}
		return readCloser{io.MultiReader(bytes.NewReader(before), strings.NewReader(`"`),
			control.NewBase64Reader(f), strings.NewReader(`"`), bytes.NewReader(after)), f}, nil
	}
	r = r.Clone(r.Context())
	if r.Body, err = body(); err != nil {
		return nil, err
	}
	r.GetBody = body
	// The agent sees the credential before the workspace is sent: one
	// that refuses it answers before a byte of it goes (and the answer
	// is read, not lost to a write on a connection the agent closed).
	r.Header.Set("Expect", "100-continue")
	r.ContentLength = int64(len(before)+len(after)+2) + int64(base64.StdEncoding.EncodedLen(int(fi.Size())))
	return r, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}
