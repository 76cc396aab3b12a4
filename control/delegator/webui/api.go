package webui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/discovery"
	"github.com/awcp/awcp/lease"
)

// Row is one delegation in the list. Never the record itself: it holds
// the executor's token.
type Row struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Channel   string `json:"channel,omitempty"` // the executor's side, where it is not simply running
	Awaiting  string `json:"awaiting,omitempty"`
	Staged    string `json:"staged,omitempty"` // the review state of a staged result
	Executor  string `json:"executor"`
	Transport string `json:"transport"`
	Access    string `json:"access"`
	Dir       string `json:"dir"`
	// Task is what a person recognises a delegation by: its description,
	// or its prompt's first line.
	Task string `json:"task,omitempty"`
	// Reason is why it failed (code: message), for one that did.
	Reason    string    `json:"reason,omitempty"`
	Group     string    `json:"group,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
	Progress  string    `json:"progress,omitempty"` // the last line
	Ended     bool      `json:"ended"`
	// Rev changes whenever anything shown of the delegation does: the
	// page reads the details again then.
	Rev string `json:"rev"`
}

// ExecutorLabel names a delegation's executor alike everywhere on the
// page: "name (URL)", or the URL where it has no other name.
func ExecutorLabel(d *lease.Delegation) string {
	if d.PeerName != "" && d.PeerName != d.Peer {
		return d.PeerName + " (" + d.Peer + ")"
	}
	return d.Peer
}

func rowOf(d *lease.Delegation) Row {
	r := Row{ID: d.ID, State: string(d.State), Executor: d.Peer, Transport: "archive", Access: "read-write",
		Dir: d.LocalDir, Group: d.Group, CreatedAt: d.CreatedAt, EndedAt: d.EndedAt, Ended: d.State.Terminal()}
	r.Executor = ExecutorLabel(d)
	r.Task = delegator.TaskLine(d)
	if f := d.Failed(); f != nil && d.State.Terminal() {
		r.Reason = f.Code + ": " + f.Message
	}
	if d.Transport == control.TransportSSHFS {
		r.Transport = "live mount"
		if d.Connect == control.ConnectReverse {
			r.Transport = "live mount, reverse"
		}
	}
	if d.AccessMode == control.AccessRO {
		r.Access = "read-only"
	}
	if ch := d.Channel; ch != nil && !d.State.Terminal() && ch.State != lease.ChannelRunning {
		r.Channel = delegator.ChannelText(ch)
	}
	if d.Awaiting() {
		r.Awaiting = "the next prompt"
		if p := d.PendingPermission(); p != nil {
			r.Awaiting = "a permission: " + p.Title
		}
	} else if p := d.PendingPermission(); p != nil && !d.State.Terminal() {
		r.Awaiting = "a permission: " + p.Title
	}
	if d.Staged != nil {
		r.Staged = d.Staged.State
	}
	if n := len(d.Progress); n > 0 {
		r.Progress = d.Progress[n-1].Text
	}
	h := fnv.New64a()
	fmt.Fprint(h, d.State, len(d.Transitions), d.LastEventID, len(d.Progress), d.ProgressDropped, len(d.Permissions), r.Channel, r.Staged, len(d.Turns), d.Summary)
	for _, p := range d.Permissions {
		fmt.Fprint(h, p.Outcome)
	}
	if t := d.LastTurn(); t != nil {
		fmt.Fprint(h, t.State)
	}
	r.Rev = strconv.FormatUint(h.Sum64(), 36)
	return r
}

// rows are every delegation, the newest first.
func (s *Server) rows() ([]Row, error) {
	ds, err := s.opts.Store.Delegations()
	if err != nil {
		return nil, err
	}
	out := make([]Row, 0, len(ds))
	for _, d := range ds {
		if !d.RefusedHere() {
			out = append(out, rowOf(d))
		}
	}
	slices.SortFunc(out, func(a, b Row) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

func (s *Server) listDelegations(w http.ResponseWriter, r *http.Request) {
	rows, err := s.rows()
	if err != nil {
		failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rows)
}

// stream sends the list as server-sent events: at once, then whenever it
// changes, until the browser goes or the server stops.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		httpError(w, http.StatusInternalServerError, "no streaming")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	var last []byte
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	poll := time.NewTicker(s.opts.Poll)
	defer poll.Stop()
	for {
		rows, err := s.rows()
		if err == nil {
			data, _ := json.Marshal(rows)
			if !bytes.Equal(data, last) {
				fmt.Fprintf(w, "event: delegations\ndata: %s\n\n", data)
				flusher.Flush()
				last = data
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		case <-poll.C:
		}
	}
}

// Detail is one delegation as its page shows it.
type Detail struct {
	Row
	Prompt      string                 `json:"prompt"`
	Description string                 `json:"description,omitempty"`
	Peer        string                 `json:"peer"`
	Summary     string                 `json:"summary,omitempty"`
	Highlights  []string               `json:"highlights,omitempty"`
	Changes     []string               `json:"changes,omitempty"`
	Conflicts   []string               `json:"conflicts,omitempty"`
	Notes       []string               `json:"notes,omitempty"`
	Failure     *lease.Failure         `json:"failure,omitempty"`
	Events      []Event                `json:"events"`
	Output      []lease.ProgressLine   `json:"output"`
	Dropped     uint64                 `json:"outputDropped,omitempty"`
	Permissions []lease.Permission     `json:"permissions,omitempty"`
	Turns       []lease.Turn           `json:"turns,omitempty"`
	Session     bool                   `json:"session,omitempty"`
	Audit       *lease.AuditSummary    `json:"audit,omitempty"`
	Snapshots   []lease.StagedSnapshot `json:"snapshots,omitempty"`
	ExpiresAt   time.Time              `json:"expiresAt,omitzero"`
}

// Event is a step of the delegation's state machine.
type Event struct {
	At    time.Time `json:"at"`
	From  string    `json:"from"`
	To    string    `json:"to"`
	Event string    `json:"event"`
	Note  string    `json:"note,omitempty"`
}

func (s *Server) oneDelegation(w http.ResponseWriter, r *http.Request) {
	d, err := s.opts.Store.Delegation(r.PathValue("id"))
	if err != nil {
		failed(w, err)
		return
	}
	out := Detail{Row: rowOf(d), Prompt: d.Prompt, Description: d.Description, Peer: d.Peer, Summary: d.Summary,
		Highlights: d.Highlights, Changes: d.Changes, Conflicts: d.Conflicts, Notes: d.Notes, Failure: d.Failure,
		Output: d.Progress, Dropped: d.ProgressDropped, Permissions: d.Permissions, Turns: d.Turns,
		Session: d.SessionDriven, Audit: d.Audit, ExpiresAt: d.ExpiresAt, Events: []Event{}}
	for _, t := range d.Transitions {
		out.Events = append(out.Events, Event{At: t.At, From: string(t.From), To: string(t.To), Event: string(t.Event), Note: t.Note})
	}
	if d.Staged != nil {
		out.Snapshots = d.Staged.Snapshots
	}
	for i := range out.Permissions {
		out.Permissions[i].ToolCall = nil // the title says it; the raw call is the CLI's --json
	}
	writeJSON(w, http.StatusOK, out)
}

// maxAuditShown bounds one answer of the audit log.
const maxAuditShown = 2000

// audit answers the delegation's audit log, refusals first, filtered by
// kind (?kind=write) and path substring (?path=src/).
func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.opts.Store.Delegation(id); err != nil {
		failed(w, err)
		return
	}
	kind, path := r.URL.Query().Get("kind"), r.URL.Query().Get("path")
	var ops []delegator.Op
	var sum *lease.AuditSummary
	truncated := false
	for after := uint64(0); ; {
		recs, s2, err := s.opts.Store.AuditAfter(id, after, 1000)
		if err != nil {
			failed(w, err)
			return
		}
		sum = s2
		for _, rec := range recs {
			after = rec.Seq
			var op delegator.Op
			if json.Unmarshal(rec.Data, &op) != nil || kind != "" && op.Kind != kind || path != "" && !strings.Contains(op.Path, path) {
				continue
			}
			if len(ops) == maxAuditShown {
				truncated = true
				continue
			}
			ops = append(ops, op)
		}
		if len(recs) < 1000 {
			break
		}
	}
	slices.SortStableFunc(ops, func(a, b delegator.Op) int {
		if a.Refused != b.Refused {
			if a.Refused {
				return -1
			}
			return 1
		}
		return 0
	})
	writeJSON(w, http.StatusOK, map[string]any{"summary": sum, "operations": ops, "truncated": truncated})
}

// maxDiffBytes bounds the diff one answer carries; the CLI's diff has it
// all.
const maxDiffBytes = 4 << 20

// result answers a staged result: its files and its unified diff.
func (s *Server) result(w http.ResponseWriter, r *http.Request) {
	res, d, err := s.opts.Delegator.OpenResult(r.PathValue("id"), r.URL.Query().Get("snapshot"))
	if err != nil {
		failed(w, err)
		return
	}
	defer res.Close()
	files, err := res.Files()
	if err != nil {
		failed(w, err)
		return
	}
	var diff bytes.Buffer
	if err := res.Diff(&diff); err != nil {
		failed(w, err)
		return
	}
	cut := diff.Len() > maxDiffBytes
	if cut {
		diff.Truncate(maxDiffBytes)
	}
	writeJSON(w, http.StatusOK, map[string]any{"state": d.Staged.State, "dir": d.LocalDir, "files": files, "diff": diff.String(), "diffCut": cut,
		"branch": d.Staged.Branch, "conflicts": d.Conflicts})
}

type applyArgs struct {
	Snapshot string `json:"snapshot"`
	Branch   string `json:"branch"`
	// Keep leaves the group's other attempts; applying one discards them
	// otherwise, as `awcp-ctl apply` does.
	Keep bool `json:"keep"`
}

func (s *Server) apply(w http.ResponseWriter, r *http.Request) {
	var a applyArgs
	if err := readJSON(r, &a); err != nil {
		failed(w, err)
		return
	}
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	out, err := s.opts.Delegator.ApplyResult(ctx, id, a.Snapshot, a.Branch, false)
	if err != nil {
		failed(w, err)
		return
	}
	var discarded []string
	if d, err := s.opts.Store.Delegation(id); err == nil && d.Group != "" && !a.Keep {
		discarded, _ = s.opts.Delegator.DiscardAttemptsBut(id)
	}
	writeJSON(w, http.StatusOK, map[string]any{"applied": out, "discarded": discarded})
}

func (s *Server) discard(w http.ResponseWriter, r *http.Request) {
	var a applyArgs
	if err := readJSON(r, &a); err != nil {
		failed(w, err)
		return
	}
	if err := s.opts.Delegator.DiscardResult(r.PathValue("id"), a.Snapshot); err != nil {
		failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"discarded": r.PathValue("id")})
}

type permitArgs struct {
	Request string `json:"request"`
	Option  string `json:"option"`
}

func (s *Server) permit(w http.ResponseWriter, r *http.Request) {
	var a permitArgs
	if err := readJSON(r, &a); err != nil {
		failed(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := s.opts.Delegator.Permit(ctx, r.PathValue("id"), a.Request, a.Option, s.opts.Answerer); err != nil {
		failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"answered": a.Request, "option": a.Option})
}

// cancel ends a running delegation, as `awcp-ctl cancel` does.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	d, err := s.opts.Store.Delegation(r.PathValue("id"))
	if err != nil {
		failed(w, err)
		return
	}
	if d.State.Terminal() {
		failed(w, control.Errorf(control.CodeUsage, "delegation %s already ended (%s)", d.ID, d.State))
		return
	}
	if err := s.opts.Cancel(d.ID); err != nil {
		failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"cancelled": d.ID})
}

// closeSession ends a session, as `awcp-ctl close` does: its agent's
// session closes, then its delegation.
func (s *Server) closeSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.opts.Delegator.EndSession(id); err != nil {
		failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"closing": id})
}

type sayArgs struct {
	Text string `json:"text"`
}

// say is a session's next prompt (an answer to its question).
func (s *Server) say(w http.ResponseWriter, r *http.Request) {
	var a sayArgs
	if err := readJSON(r, &a); err != nil {
		failed(w, err)
		return
	}
	n, err := s.opts.Delegator.Say(r.PathValue("id"), a.Text, s.opts.Answerer)
	if err != nil {
		failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"turn": n})
}

func (s *Server) group(w http.ResponseWriter, r *http.Request) {
	attempts, err := s.opts.Delegator.CompareGroup(r.PathValue("group"))
	if err != nil {
		failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, attempts)
}

// PeerView is an executor as the peers page shows it.
type PeerView struct {
	AgentID     string `json:"agentId"`
	Name        string `json:"name"`
	URL         string `json:"url"`
	Online      bool   `json:"online"`
	Offline     string `json:"offline,omitempty"`
	FoundBy     string `json:"foundBy,omitempty"`
	Trusted     bool   `json:"trusted"`
	KeyChanged  bool   `json:"keyChanged,omitempty"`
	Impostor    string `json:"impostor,omitempty"`
	Key         string `json:"key,omitempty"` // what it shows now
	Fingerprint string `json:"fingerprint,omitempty"`
	TrustedFP   string `json:"trustedFingerprint,omitempty"`
	FreeSlots   *int   `json:"freeSlots,omitempty"`
	MaxSlots    int    `json:"maxSlots,omitempty"`
}

func (s *Server) peers(w http.ResponseWriter, r *http.Request) {
	out := []PeerView{}
	if s.opts.Peers != nil {
		for _, p := range s.opts.Peers.Peers() {
			v := PeerView{AgentID: p.AgentID, Name: p.Name, URL: p.URL, Online: p.Online, FoundBy: p.Via, Trusted: p.Trusted(),
				KeyChanged: p.TrustedKey != "" && !p.Trusted() && p.Key() != "", Impostor: p.Impostor, Key: p.Key()}
			if !p.Online {
				v.Offline = discovery.OfflineSince(p)
			}
			if v.Key != "" {
				v.Fingerprint = control.Fingerprint(v.Key)
			}
			if p.TrustedKey != "" {
				v.TrustedFP = control.Fingerprint(p.TrustedKey)
			}
			if m := p.Manifest; m != nil && m.AWCP != nil {
				free := m.AWCP.FreeSlots
				v.FreeSlots, v.MaxSlots = &free, m.AWCP.MaxConcurrent
			}
			out = append(out, v)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

type trustArgs struct {
	// Key is the key the page showed, whose fingerprint the user
	// compared: exactly that is pinned, whatever the executor shows now.
	Key string `json:"key"`
}

func (s *Server) trust(w http.ResponseWriter, r *http.Request) {
	var a trustArgs
	if err := readJSON(r, &a); err != nil {
		failed(w, err)
		return
	}
	if s.opts.Peers == nil {
		httpError(w, http.StatusNotFound, "no peer book")
		return
	}
	if a.Key == "" {
		httpError(w, http.StatusBadRequest, "the key to trust is needed: the one whose fingerprint you compared")
		return
	}
	p, err := s.opts.Peers.Trust(r.PathValue("id"), a.Key)
	if err != nil {
		failed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"trusted": p.AgentID, "fingerprint": control.Fingerprint(p.TrustedKey)})
}
