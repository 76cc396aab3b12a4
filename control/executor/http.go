package executor

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/httpserve"
	"github.com/awcp/awcp/lease"
)

// Handler serves the executor's endpoints of spec §7.4 and the agent card.
// Every answer, failures included, is JSON (or an SSE stream).
func (e *Executor) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/awcp", e.method(http.MethodPost, e.handleMessage))
	mux.HandleFunc("/awcp/tasks/{id}/events", e.method(http.MethodGet, e.handleEvents))
	mux.HandleFunc("/awcp/cancel/{id}", e.method(http.MethodPost, e.handleCancel))
	mux.HandleFunc("/awcp/tasks/{id}/permission", e.method(http.MethodPost, e.handlePermission))
	mux.HandleFunc("/awcp/tasks/{id}/result", e.method(http.MethodGet, e.handleResult))
	mux.HandleFunc("/awcp/tasks/{id}/ack", e.method(http.MethodPost, e.handleAck))
	mux.HandleFunc("/awcp/status", e.method(http.MethodGet, e.handleStatus))
	mux.HandleFunc("/awcp/tasks/{id}/tunnel", e.method(http.MethodGet, e.handleTunnel))
	mux.HandleFunc("/awcp/tasks/{id}/acp", e.method(http.MethodGet, e.handleSession))
	mux.HandleFunc(control.RenewPath, e.method(http.MethodPost, e.handleRenew))
	mux.HandleFunc("/awcp/probe", e.method(http.MethodGet, e.handleProbe))
	mux.HandleFunc("/.well-known/agent-card.json", e.method(http.MethodGet, e.handleCard))
	mux.HandleFunc("/.well-known/agent.json", e.method(http.MethodGet, e.handleCard))
	mux.HandleFunc("/manifest", e.method(http.MethodGet, e.handleManifest))
	if e.a2a != nil {
		mux.Handle(e.a2a.path, e.a2a.handler)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, control.NewError("", control.CodeDeclined, "no such endpoint: "+r.URL.Path, "see spec §7.4"))
	})
	return e.recoverPanics(mux)
}

// recoverPanics turns a handler panic into a JSON ERROR instead of a dropped
// connection, and logs it.
func (e *Executor) recoverPanics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				e.log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v))
				writeError(w, http.StatusInternalServerError, control.NewError("", control.CodeDeclined, "internal error", ""))
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func (e *Executor) method(m string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m {
			w.Header().Set("Allow", m)
			writeError(w, http.StatusMethodNotAllowed, control.NewError("", control.CodeDeclined, r.Method+" is not allowed on "+r.URL.Path, "use "+m))
			return
		}
		h(w, r)
	}
}

func writeError(w http.ResponseWriter, status int, m *control.Error) {
	httpserve.WriteJSON(w, status, m)
}

// statusOf maps an error code to the HTTP status of its answer.
func statusOf(code string) int {
	switch code {
	case control.CodeAuthFailed:
		return http.StatusUnauthorized
	case control.CodeWorkdirDenied:
		return http.StatusForbidden
	case control.CodeStartExpired, control.CodeExpired:
		return http.StatusGone
	case control.CodeWorkspaceTooLarge:
		return http.StatusRequestEntityTooLarge
	case control.CodeDeclined, control.CodeDepMissing:
		return http.StatusServiceUnavailable
	case control.CodeSetupFailed:
		return http.StatusUnprocessableEntity
	}
	return http.StatusConflict
}

// authorized checks the credentials of a non-INVITE request, and that a
// request about delegation id comes from the client that made it
// (Caller.mayTouch).
func (e *Executor) authorized(w http.ResponseWriter, r *http.Request, id string) bool {
	c, ok := e.credentials(r)
	if !ok {
		e.refuseAuth(w, id, "missing or invalid bearer token, and no authorized delegator key")
		return false
	}
	if id == "" {
		return true
	}
	a, err := e.store.Assignment(id)
	if err != nil || c.mayTouch(a) {
		return true // unknown: the handler says so
	}
	e.opts.Metrics.Refused(control.CodeAuthFailed)
	e.log.Warn("refused a request about a delegation of another delegator's", "delegation", id, "path", r.URL.Path,
		"peer", r.RemoteAddr, "delegator", control.Fingerprint(c.Key))
	writeError(w, http.StatusForbidden, control.NewError(id, control.CodeAuthFailed,
		"delegation "+id+" was made by another delegator", "only the delegator whose INVITE made it, with its own key or token, may ask about it"))
	return false
}

// delegatorKey is the identity key of the delegator that sent r, as its
// TLS certificate shows it; "" over plain HTTP or without a certificate.
func delegatorKey(r *http.Request) string {
	cs, ok := httpserve.PeerTLS(r)
	if !ok || len(cs.PeerCertificates) == 0 {
		return ""
	}
	return control.CertificateKey([][]byte{cs.PeerCertificates[0].Raw})
}

// keyAuthorized reports whether r came from a delegator whose key the
// operator authorized.
func (e *Executor) keyAuthorized(r *http.Request) bool {
	key := delegatorKey(r)
	return key != "" && slices.Contains(e.opts.AuthorizedDelegators, key)
}

// refuseAuth answers a request refused for its token (AUTH_FAILED), and
// counts it with the refusals.
func (e *Executor) refuseAuth(w http.ResponseWriter, id, message string) {
	e.opts.Metrics.Refused(control.CodeAuthFailed)
	writeError(w, http.StatusUnauthorized, control.NewError(id, control.CodeAuthFailed, message, "send the executor's token"))
}

// bodyGrace is the time a message's body has for each MiB
// (httpserve.LimitBody). A variable for the tests.
var bodyGrace = httpserve.DefaultBodyGrace

// errNoToken is a workspace sent by a client without a valid token.
var errNoToken = errors.New("workspace without a token")

func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

func (e *Executor) handleMessage(w http.ResponseWriter, r *http.Request) {
	// Nothing past MaxMessageBytes is read from a client that has not
	// shown a token: only an INVITE, which carries its token in the body,
	// can pass without one, and it is small. A wrong bearer token is
	// refused before the body is read at all.
	_, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	caller, trusted := e.credentials(r)
	byKey := caller.ByKey
	if hasBearer && !trusted {
		e.refuseAuth(w, "", "missing or invalid bearer token")
		return
	}
	limit := int64(control.MaxMessageBytes)
	if trusted {
		limit = e.opts.MaxBodyBytes
	}
	// A START's workspace goes to a file as it is read (see jsondivert.go).
	paced := httpserve.LimitBody(w, r, limit, bodyGrace)
	br := bufio.NewReaderSize(paced, 64<<10)
	var spool *control.SpoolFile
	defer func() { spool.Discard() }()
	body, err := control.Divert(br, [][]string{{"workDir", "transportHandle"}, {"workspaceBase64"}}, control.MaxMessageBytes, func() (io.Writer, error) {
		if !trusted {
			return nil, errNoToken
		}
		var err error
		spool, err = control.NewSpoolFile(e.incomingDir(), 0) // the body is bounded (MaxBodyBytes)
		return spool, err
	})
	paced.Finished(w, err)
	var syntax *control.JSONSyntaxError
	switch {
	case errors.Is(err, errNoToken):
		e.refuseAuth(w, "", "a workspace was sent without a valid bearer token")
		return
	case errors.Is(err, control.ErrRestTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, control.NewError("", control.CodeDeclined,
			fmt.Sprintf("message larger than the limit of %d bytes (apart from workDir.workspaceBase64)", control.MaxMessageBytes),
			"AWCP messages are small; only a START's archive may be large"))
		return
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeError(w, http.StatusRequestTimeout, control.NewError("", control.CodeDeclined, "the message arrived too slowly", ""))
		return
	case errors.As(err, new(*http.MaxBytesError)) && !trusted:
		e.refuseAuth(w, "", fmt.Sprintf("message larger than %d bytes without a bearer token", control.MaxMessageBytes))
		return
	case errors.As(err, new(*http.MaxBytesError)):
		writeError(w, http.StatusRequestEntityTooLarge, control.NewError("", control.CodeWorkspaceTooLarge,
			fmt.Sprintf("message larger than this executor's limit of %d bytes", e.opts.MaxBodyBytes),
			"Consider selecting a smaller subdirectory or excluding large files"))
		return
	case errors.As(err, &syntax):
		writeError(w, http.StatusBadRequest, control.NewError("", control.CodeDeclined, "invalid message: field body not a JSON object: "+syntax.Error(),
			"send an AWCP v1 message (spec §4)"))
		return
	case err != nil:
		e.log.Warn("read a message", "err", err)
		writeError(w, http.StatusBadRequest, control.NewError("", control.CodeDeclined, "cannot read the request body", ""))
		return
	}
	var workspace *control.Spooled
	if spool != nil {
		got, err := spool.Finish()
		if err != nil {
			e.log.Warn("receive a workspace", "err", err)
			writeError(w, http.StatusServiceUnavailable, control.NewError("", control.CodeDeclined, "the executor cannot store the workspace", ""))
			return
		}
		workspace = &got
	}
	msg, err := control.DecodeMessageSpooled(body, workspace)
	if err != nil {
		var fe *control.FieldError
		text := err.Error()
		if errors.As(err, &fe) {
			text = "invalid message: field " + fe.Field + " " + fe.Reason
		}
		writeError(w, http.StatusBadRequest, control.NewError(idOf(body), control.CodeDeclined, text, "send an AWCP v1 message (spec §4)"))
		return
	}
	switch m := msg.(type) {
	case *control.Invite:
		if _, tls := httpserve.PeerTLS(r); !tls && e.opts.IdentityKey != nil {
			e.log.Warn("INVITE over plain HTTP (--plain-http): its token, its START and its events travel in clear", "delegation", m.DelegationID, "peer", r.RemoteAddr)
		}
		acc, pe := e.admit(m, r.RemoteAddr, byKey, delegatorKey(r))
		if pe != nil {
			// The delegator's key, for the operator to compare and, if it
			// is one they know, to authorize (--authorized-delegators).
			e.log.Info("INVITE refused", "delegation", m.DelegationID, "code", pe.Code, "reason", pe.Message,
				"delegator", control.Fingerprint(delegatorKey(r)), "delegator key", delegatorKey(r))
			e.opts.Metrics.Refused(pe.Code)
			writeError(w, statusOf(pe.Code), pe.ToMessage(m.DelegationID))
			return
		}
		e.log.Info("INVITE accepted", "delegation", m.DelegationID, "peer", r.RemoteAddr,
			"access", acc.ExecutorConstraints.AcceptedAccessMode)
		httpserve.WriteJSON(w, http.StatusOK, acc)
	case *control.Start:
		if !e.authorized(w, r, m.DelegationID) {
			return
		}
		if pe := e.start(r.Context(), m); pe != nil {
			e.log.Info("START refused", "delegation", m.DelegationID, "code", pe.Code, "reason", pe.Message)
			writeError(w, statusOf(pe.Code), pe.ToMessage(m.DelegationID))
			return
		}
		httpserve.WriteJSON(w, http.StatusOK, control.StartResponse{OK: true})
	case *control.Continue:
		if !e.authorized(w, r, m.DelegationID) {
			return
		}
		a, err := e.store.Assignment(m.DelegationID)
		if err != nil {
			writeError(w, http.StatusNotFound, control.NewError(m.DelegationID, control.CodeDeclined, "unknown delegation", ""))
			return
		}
		if status, pe := e.nextRound(m.DelegationID, m); pe != nil {
			writeError(w, status, pe.ToMessage(m.DelegationID))
			return
		}
		e.continueLease(a, m.Lease)
		e.log.Info("CONTINUE received", "delegation", m.DelegationID, "round", m.Round)
		httpserve.WriteJSON(w, http.StatusOK, control.StartResponse{OK: true})
	case *control.Close:
		if !e.authorized(w, r, m.DelegationID) {
			return
		}
		if status, pe := e.nextRound(m.DelegationID, nil); pe != nil {
			writeError(w, status, pe.ToMessage(m.DelegationID))
			return
		}
		e.log.Info("CLOSE received", "delegation", m.DelegationID)
		httpserve.WriteJSON(w, http.StatusOK, control.StartResponse{OK: true})
	case *control.Error:
		if !e.authorized(w, r, m.DelegationID) {
			return
		}
		ev := lease.ReceiveError
		switch m.Code {
		case control.CodeCancelled:
			ev = lease.Cancel
		case control.CodeExpired:
			ev = lease.Expire
		}
		pe := &control.ProtocolError{Code: m.Code, Message: "the delegator reported: " + m.Message, Hint: m.Hint}
		if err := e.endKnown(r, m.DelegationID, ev, pe); err != nil {
			writeError(w, http.StatusNotFound, control.NewError(m.DelegationID, control.CodeDeclined, err.Error(), ""))
			return
		}
		httpserve.WriteJSON(w, http.StatusOK, control.StartResponse{OK: true})
	default:
		// ACCEPT goes from executor to delegator, never the other way.
		writeError(w, http.StatusBadRequest, control.NewError("", control.CodeDeclined, "an executor does not take ACCEPT messages", ""))
	}
}

// endKnown ends a delegation the executor knows, answering an EXPIRE that
// the state does not allow (setup under way) as an error.
func (e *Executor) endKnown(r *http.Request, id string, ev lease.Event, pe *control.ProtocolError) error {
	a, err := e.store.Assignment(id)
	if err != nil {
		return fmt.Errorf("unknown delegation %s", id)
	}
	if ev == lease.Expire && !lease.CanFire(a.State, ev) {
		ev = lease.ReceiveError
	}
	return e.end(r.Context(), id, ev, pe)
}

// idOf digs the delegation id out of a message that did not decode, for
// the ERROR's header; only a valid id is echoed.
func idOf(body []byte) string {
	var b control.BaseMessage
	if json.Unmarshal(body, &b) == nil && control.ValidDelegationID(b.DelegationID) {
		return b.DelegationID
	}
	return ""
}

func (e *Executor) pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !control.ValidDelegationID(id) {
		writeError(w, http.StatusBadRequest, control.NewError("", control.CodeDeclined, "invalid delegation id in path", ""))
		return "", false
	}
	if !e.authorized(w, r, id) {
		return "", false
	}
	return id, true
}

func (e *Executor) handleCancel(w http.ResponseWriter, r *http.Request) {
	id, ok := e.pathID(w, r)
	if !ok {
		return
	}
	err := e.endKnown(r, id, lease.Cancel, control.Errorf(control.CodeCancelled, "the delegation was cancelled"))
	if err != nil {
		writeError(w, http.StatusNotFound, control.NewError(id, control.CodeDeclined, err.Error(), ""))
		return
	}
	httpserve.WriteJSON(w, http.StatusOK, control.StartResponse{OK: true})
}

// handleEvents streams a delegation's events as SSE: everything after
// Last-Event-ID from the store, then new ones as they come, with keep-alive
// comments in between, until the terminal event.
func (e *Executor) handleEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := e.pathID(w, r)
	if !ok {
		return
	}
	if _, err := e.store.Assignment(id); err != nil {
		writeError(w, http.StatusNotFound, control.NewError(id, control.CodeDeclined, "unknown delegation (or its events are past retention)", ""))
		return
	}
	last := parseLastEventID(r.Header.Get("Last-Event-ID"))
	h := w.Header()
	every := e.opts.KeepAlive
	if asked, err := strconv.Atoi(r.Header.Get(control.KeepAliveHeader)); err == nil && asked >= 1 {
		// A delegator of ours asks for keep-alives often enough to tell a
		// silent stream from a quiet one; never more than once a second.
		every = min(every, time.Duration(asked)*time.Second)
		h.Set(control.KeepAliveHeader, strconv.Itoa(int(every/time.Second)))
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()

	keepAlive := time.NewTicker(every)
	defer keepAlive.Stop()
	const page = 64
	for {
		wake := e.watch(id)
		evs, err := e.store.EventsAfter(id, last, page)
		if err != nil {
			e.log.Warn("read events", "delegation", id, "err", err)
			return
		}
		for _, ev := range evs {
			var head struct {
				Type                  string
				RecommendedSnapshotID string
			}
			json.Unmarshal(ev.Data, &head)
			// The result goes with the event that carries it: done's
			// resultBase64, or the head dialect's snapshot.
			carrier := ""
			switch {
			case head.Type == control.EventSnapshot:
				carrier = "snapshotBase64"
			case head.Type == control.EventDone && head.RecommendedSnapshotID == "":
				carrier = "resultBase64"
			}
			if err := e.writeEvent(w, id, ev, carrier); err != nil {
				return
			}
			last = ev.Seq
			if head.Type == control.EventDone || head.Type == control.EventError {
				rc.Flush()
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if len(evs) == page {
			continue
		}
		select {
		case <-r.Context().Done():
			return
		case <-wake:
		case <-keepAlive.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
		}
	}
}

// writeEvent writes one stored event. With a carrier it gets the
// delegation's result, if there is one, as that member, streamed from its
// file.
func (e *Executor) writeEvent(w io.Writer, id string, ev lease.StoredEvent, carrier string) error {
	var f *os.File
	if carrier != "" {
		var err error
		// A round's snapshot is in a file of its own (the last one's
		// becomes the result when the delegation ends).
		var snap struct{ SnapshotID string }
		json.Unmarshal(ev.Data, &snap)
		if snap.SnapshotID != "" && roundSnapID.MatchString(snap.SnapshotID) {
			f, err = os.Open(e.roundFile(id, snap.SnapshotID))
		}
		if f == nil {
			f, err = os.Open(e.resultFile(id))
		}
		if err == nil {
			defer f.Close()
		}
	}
	data := bytes.TrimSpace(ev.Data)
	if f == nil || len(data) == 0 || data[len(data)-1] != '}' {
		_, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", ev.Seq, data)
		return err
	}
	_, err := io.Copy(w, io.MultiReader(
		strings.NewReader(fmt.Sprintf("id: %d\ndata: ", ev.Seq)),
		bytes.NewReader(data[:len(data)-1]),
		strings.NewReader(`,"`+carrier+`":"`),
		e.carried(id, f),
		strings.NewReader("\"}\n\n")))
	return err
}

// carried is the result file f as its event's member carries it: base64
// — but for a delegation over the reference's git transport, whose
// snapshotBase64 holds its snapshot's JSON as it is (its delegator parses
// it so), escaped as a JSON string.
func (e *Executor) carried(id string, f *os.File) io.Reader {
	if a, err := e.store.Assignment(id); err == nil && a.Transport == control.TransportGit {
		raw, _ := io.ReadAll(io.LimitReader(f, 1<<20))
		quoted, _ := json.Marshal(string(raw))
		return bytes.NewReader(quoted[1 : len(quoted)-1])
	}
	return control.NewBase64Reader(f)
}

func (e *Executor) handleResult(w http.ResponseWriter, r *http.Request) {
	id, ok := e.pathID(w, r)
	if !ok {
		return
	}
	a, err := e.store.Assignment(id)
	if err != nil {
		httpserve.WriteJSON(w, http.StatusNotFound, control.TaskResult{Status: control.ResultNotFound})
		return
	}
	if !a.State.Terminal() {
		httpserve.WriteJSON(w, http.StatusOK, control.TaskResult{Status: control.ResultRunning})
		return
	}
	res := control.TaskResult{Status: control.ResultError, CompletedAt: control.Timestamp(a.EndedAt)}
	if a.State != lease.Completed {
		res.Error = &control.TaskFailure{Code: control.CodeTaskFailed, Message: "the task failed"}
		if f := a.Failure; f != nil {
			res.Error = &control.TaskFailure{Code: f.Code, Message: f.Message, Hint: f.Hint}
		}
		httpserve.WriteJSON(w, http.StatusOK, res)
		return
	}
	res.Status = control.ResultCompleted
	// A completed task's stream ends with done, after its snapshot (head)
	// if it has one: what the answer needs is in the last two events.
	evs, err := e.store.LastEvents(id, 2)
	if err != nil {
		writeError(w, http.StatusInternalServerError, control.NewError(id, control.CodeDeclined, "cannot read the store", ""))
		return
	}
	for _, stored := range evs {
		var ev control.Event
		if json.Unmarshal(stored.Data, &ev) != nil {
			continue
		}
		if ev.Type == control.EventDone {
			res.Summary, res.Highlights = ev.Summary, ev.Highlights
		}
		if ev.ResultChecksum != "" {
			res.ResultChecksum = ev.ResultChecksum
		}
	}
	f, err := os.Open(e.resultFile(id))
	if err != nil {
		httpserve.WriteJSON(w, http.StatusOK, res)
		return
	}
	defer f.Close()
	data, err := control.Marshal(res)
	if err != nil {
		writeError(w, http.StatusInternalServerError, control.NewError(id, control.CodeDeclined, "cannot encode the result", ""))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	io.Copy(w, io.MultiReader(bytes.NewReader(data[:len(data)-1]),
		strings.NewReader(`,"snapshotBase64":"`), e.carried(id, f), strings.NewReader(`"}`)))
}

// handleAck is the head dialect's "the result is in": the executor need
// not keep the ended delegation's events and result any longer.
func (e *Executor) handleAck(w http.ResponseWriter, r *http.Request) {
	id, ok := e.pathID(w, r)
	if !ok {
		return
	}
	if a, err := e.store.Assignment(id); err == nil && a.State.Terminal() {
		if err := e.forget(id); err != nil {
			e.log.Warn("forget an acknowledged delegation", "delegation", id, "err", err)
		} else {
			e.log.Info("result acknowledged; events and result dropped", "delegation", id)
		}
	}
	httpserve.WriteJSON(w, http.StatusOK, control.StartResponse{OK: true})
}

func (e *Executor) handleStatus(w http.ResponseWriter, r *http.Request) {
	if !e.authorized(w, r, "") {
		return
	}
	c, _ := e.credentials(r)
	e.writeStatus(w, c.mayTouch, false)
}

// OperatorHandler serves the executor's operator (`awcp-fs status`) on
// its local socket, which only the daemon's user reaches: every
// delegation, with who made it and what runs for it.
func (e *Executor) OperatorHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		e.writeStatus(w, func(*lease.Assignment) bool { return true }, true)
	})
	return e.recoverPanics(mux)
}

// writeStatus answers a status report of the delegations shown says to
// list (all are counted); operator adds what only the operator sees.
func (e *Executor) writeStatus(w http.ResponseWriter, shown func(*lease.Assignment) bool, operator bool) {
	as, err := e.store.Assignments()
	if err != nil {
		writeError(w, http.StatusInternalServerError, control.NewError("", control.CodeDeclined, "cannot read the store", ""))
		return
	}
	rep := control.StatusReport{OK: true, Name: e.opts.Name, Version: e.opts.Version, MaxConcurrent: e.opts.MaxConcurrent,
		Delegations: []control.StatusLeaseRow{}, Goroutines: runtime.NumGoroutine()}
	for _, t := range e.opts.Transports {
		if t.Available() == nil {
			rep.Transports = append(rep.Transports, t.Name())
		}
	}
	for _, a := range as {
		if a.Active() {
			rep.Active++
		}
		if !shown(a) {
			continue // another delegator's: counted, not shown
		}
		row := control.StatusLeaseRow{DelegationID: a.ID, State: string(a.State), Transport: a.Transport, AccessMode: a.AccessMode}
		if operator {
			row.Peer, row.AgentPID = a.Peer, a.AgentPID
			row.Prompt, _, _ = strings.Cut(a.Prompt, "\n")
			if a.DelegatorKey != "" {
				row.Delegator = control.Fingerprint(a.DelegatorKey)
			}
		}
		if !a.ExpiresAt.IsZero() {
			row.ExpiresAt = control.Timestamp(a.ExpiresAt)
		}
		rep.Delegations = append(rep.Delegations, row)
	}
	httpserve.WriteJSON(w, http.StatusOK, rep)
}

// usableTransports are the transports that can take a delegation now.
func (e *Executor) usableTransports() []string {
	var names []string
	for _, t := range e.opts.Transports {
		if t.Available() == nil {
			names = append(names, t.Name())
		}
	}
	return names
}

// baseURL is this executor as the request reached it: https:// over TLS,
// http:// only where the request came in plain (--plain-http), so that
// the endpoints a manifest or card advertises work as written.
func baseURL(r *http.Request) string {
	host := r.Host
	if host == "" {
		host = net.JoinHostPort("127.0.0.1", "10200")
	}
	if _, overTLS := httpserve.PeerTLS(r); r.TLS == nil && !overTLS {
		return "http://" + host
	}
	return "https://" + host
}

func (e *Executor) handleCard(w http.ResponseWriter, r *http.Request) {
	params := map[string]any{
		"transports":    e.usableTransports(),
		"accessModes":   e.opts.AccessModes,
		"maxConcurrent": e.opts.MaxConcurrent,
		"maxTtlSeconds": int64(e.opts.MaxTTL / time.Second),
		"authRequired":  !e.openToAll(),
		"dialects":      []string{control.DialectSeed, control.DialectHead},
	}
	if e.opts.AgentID != "" {
		params["agentId"] = e.opts.AgentID
	}
	if sp := e.sessionProtocols(); len(sp) > 0 {
		params["sessions"] = sp // docs/acp-sessions.md
	}
	base := baseURL(r)
	params["endpoint"] = base + "/awcp"
	if key := control.IdentityPublic(e.opts.IdentityKey); key != "" {
		params["identityKey"] = key // what its TLS certificate proves
	}
	ext := control.CardExtension{URI: control.ExtensionURI, Required: false, Params: params}
	card := control.AgentCard{
		Name:               e.opts.Name,
		Description:        e.opts.Description,
		URL:                base + "/awcp",
		Version:            e.opts.Version,
		Capabilities:       map[string]any{"streaming": true, "extensions": []control.CardExtension{ext}},
		DefaultInputModes:  []string{"text"},
		DefaultOutputModes: []string{"text"},
		Skills:             append([]control.CardSkill{}, e.opts.Skills...),
		Extensions:         []control.CardExtension{ext},
	}
	if e.a2a != nil {
		// A2A clients send to the A2A face, which takes a workspace as
		// a ZIP file part: 1.0's find it in the interfaces, 0.3's at url
		// by its preferred transport. Both versions at one URL: a
		// request says which it speaks (A2A-Version).
		card.URL = base + e.a2a.path
		card.SupportedInterfaces = []control.CardInterface{
			{URL: card.URL, ProtocolBinding: "JSONRPC", ProtocolVersion: "1.0"},
			{URL: card.URL, ProtocolBinding: "JSONRPC", ProtocolVersion: "0.3"},
		}
		card.ProtocolVersion = "0.3.0"
		card.PreferredTransport = "JSONRPC"
		card.DefaultInputModes = []string{"text/plain", "application/zip"}
		card.DefaultOutputModes = []string{"text/plain", "application/octet-stream"}
		card.Skills = append([]control.CardSkill{{ID: control.CapabilityDelegation, Name: "Work on a workspace",
			Description: "Send the task as text and the directory as a ZIP file part: the agent works on it, confined, and the changed files and the diff come back as artifacts.",
			Tags:        []string{"awcp", "workspace", "coding"}}}, card.Skills...)
		card.SecuritySchemes, card.Security = e.securitySchemes()
		for _, req := range card.Security {
			card.SecurityRequirements = append(card.SecurityRequirements, control.CardRequirement{Schemes: req})
		}
	}
	httpserve.WriteJSON(w, http.StatusOK, card)
}

// securitySchemes are the A2A security schemes the executor takes, and
// its requirement: any one of them. Each scheme is written in both
// versions' forms, 0.3's members ("type", …) beside 1.0's one member
// naming its kind; each reader takes its own and skips the other's.
func (e *Executor) securitySchemes() (map[string]any, []map[string][]string) {
	schemes := map[string]any{}
	var req []map[string][]string
	if len(e.opts.Tokens) > 0 {
		const about = "the executor's token, as its operator gave it to you"
		schemes["bearer"] = map[string]any{"type": "http", "scheme": "bearer", "description": about,
			"httpAuthSecurityScheme": map[string]any{"scheme": "bearer", "description": about}}
		req = append(req, map[string][]string{"bearer": {}})
	}
	if len(e.opts.AuthorizedDelegators) > 0 {
		const about = "a TLS client certificate of an Ed25519 identity key the operator authorized (awcp-ctl peers self prints one)"
		schemes["identityKey"] = map[string]any{"type": "mutualTLS", "description": about,
			"mtlsSecurityScheme": map[string]any{"description": about}}
		req = append(req, map[string][]string{"identityKey": {}})
	}
	if len(schemes) == 0 {
		return nil, nil
	}
	return schemes, req
}

// handleManifest answers GET /manifest, what LAN discovery reads of each
// agent it finds. Like the card, it is public: it says what the executor
// offers and how busy it is, never what it works on.
func (e *Executor) handleManifest(w http.ResponseWriter, r *http.Request) {
	active, err := e.store.ActiveAssignments()
	if err != nil {
		writeError(w, http.StatusInternalServerError, control.NewError("", control.CodeDeclined, "cannot read the store", ""))
		return
	}
	transports := e.usableTransports()
	caps := []control.ManifestCapability{{ID: control.CapabilityDelegation,
		Description: "takes a delegated workspace (AWCP) and works on it with its own tools"}}
	for _, s := range e.opts.Skills {
		caps = append(caps, control.ManifestCapability{ID: s.ID, Description: s.Description})
	}
	base := baseURL(r)
	httpserve.WriteJSON(w, http.StatusOK, control.Manifest{
		AgentID:            e.opts.AgentID,
		Name:               e.opts.Name,
		Description:        e.opts.Description,
		Version:            e.opts.Version,
		InputContentTypes:  []string{"text/plain"},
		OutputContentTypes: []string{"text/plain"},
		Capabilities:       caps,
		Endpoints: map[string]string{
			"awcp":     base + "/awcp",
			"card":     base + "/.well-known/agent-card.json",
			"manifest": base + "/manifest",
			"status":   base + "/awcp/status",
		},
		AWCP: &control.ManifestAWCP{
			Protocol:      control.ExtensionURI,
			Transports:    transports,
			FUSE:          slices.Contains(transports, control.TransportSSHFS),
			AccessModes:   e.opts.AccessModes,
			MaxTTLSeconds: int64(e.opts.MaxTTL / time.Second),
			MaxConcurrent: e.opts.MaxConcurrent,
			FreeSlots:     max(e.opts.MaxConcurrent-active, 0),
			Dialects:      []string{control.DialectSeed, control.DialectHead},
			AuthRequired:  !e.openToAll(),
			CallChain:     e.opts.AgentID != "",
			IdentityKey:   control.IdentityPublic(e.opts.IdentityKey),
			Sessions:      e.sessionProtocols(),
			ACPAgent:      e.acpAgentInit(),
			ACPAgentError: e.acpAgentFailure(),
		},
	})
}
