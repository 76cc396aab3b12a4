package a2aface

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// a2a-go v2's 0.3 layer answers an error with 1.0's error data, a list
// of typed details, where 0.3's is an object: a2a-go 0.3's own client
// then fails on every error ("cannot unmarshal array into … error.data").
// The face mends it on its side of the wire: a 0.3 answer that is not a
// stream is held (an error is small; an answer past maxHeldAnswer is a
// result and goes on as written) and an error's list becomes
// {"details": [...]}, which every 0.3 client reads.

// maxHeldAnswer is the most of a 0.3 answer held to look at.
const maxHeldAnswer = 64 << 10

// legacyErrors is a ResponseWriter for a 0.3 request's answer; finish
// sends what it held.
type legacyErrors struct {
	http.ResponseWriter
	status  int
	held    bytes.Buffer
	passing bool // writing through: a stream, or an answer past the bound
}

func (l *legacyErrors) WriteHeader(status int) {
	if l.status != 0 || l.passing {
		return
	}
	l.status = status
	if strings.HasPrefix(l.Header().Get("Content-Type"), "text/event-stream") {
		l.pass()
	}
}

func (l *legacyErrors) Write(b []byte) (int, error) {
	if l.status == 0 {
		l.WriteHeader(http.StatusOK)
	}
	if !l.passing && l.held.Len()+len(b) > maxHeldAnswer {
		l.pass()
	}
	if l.passing {
		return l.ResponseWriter.Write(b)
	}
	return l.held.Write(b)
}

// Flush is a stream's: its events go out as they come.
func (l *legacyErrors) Flush() {
	if !l.passing {
		return
	}
	if f, ok := l.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController (deadlines), which finds Flush
// here first.
func (l *legacyErrors) Unwrap() http.ResponseWriter { return l.ResponseWriter }

// pass sends what is held, as it was, and writes through from now on.
func (l *legacyErrors) pass() {
	l.passing = true
	l.ResponseWriter.WriteHeader(l.status)
	if l.held.Len() > 0 {
		l.ResponseWriter.Write(l.held.Bytes())
		l.held.Reset()
	}
}

// finish sends the answer held, an error's data mended.
func (l *legacyErrors) finish() {
	if l.passing || l.status == 0 {
		return
	}
	body := l.held.Bytes()
	var answer map[string]json.RawMessage
	var rpcErr map[string]json.RawMessage
	if json.Unmarshal(body, &answer) == nil && answer["error"] != nil && json.Unmarshal(answer["error"], &rpcErr) == nil &&
		bytes.HasPrefix(bytes.TrimSpace(rpcErr["data"]), []byte("[")) {
		rpcErr["data"], _ = json.Marshal(map[string]json.RawMessage{"details": rpcErr["data"]})
		answer["error"], _ = json.Marshal(rpcErr)
		if mended, err := json.Marshal(answer); err == nil {
			body = append(mended, '\n')
		}
	}
	l.Header().Set("Content-Length", strconv.Itoa(len(body)))
	l.ResponseWriter.WriteHeader(l.status)
	l.ResponseWriter.Write(body)
}
