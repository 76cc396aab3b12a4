package mcpserver

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// Outcome is a delegation as the tools report it: how it stands or ended.
// Every field is optional, so that a call refused before any delegation
// existed is an Outcome with only Error.
type Outcome struct {
	DelegationID string       `json:"delegation_id,omitempty"`
	State        string       `json:"state,omitempty" jsonschema:"created, invited, accepted, started, running, awaiting (a session waiting on its user), completed, error, cancelled or expired; of a group: running or ended"`
	Description  string       `json:"description,omitempty"`
	WorkspaceDir string       `json:"workspace_dir,omitempty"`
	PeerURL      string       `json:"peer_url,omitempty"`
	Transport    string       `json:"transport,omitempty" jsonschema:"sshfs (live mount) or archive"`
	AccessMode   string       `json:"access_mode,omitempty"`
	CreatedAt    string       `json:"created_at,omitempty"`
	ExpiresAt    string       `json:"expires_at,omitempty" jsonschema:"when the lease ends (RFC 3339)"`
	Summary      string       `json:"summary,omitempty" jsonschema:"the executor's summary, once completed"`
	Highlights   []string     `json:"highlights,omitempty" jsonschema:"files the executor created or changed"`
	Changes      []string     `json:"changes,omitempty" jsonschema:"what the delegation changed in the workspace, a line per path: A added, M modified, D deleted (a directory ends in /)"`
	Conflicts    []string     `json:"conflicts,omitempty" jsonschema:"files changed locally meanwhile: the local version was kept"`
	Notes        []string     `json:"notes,omitempty"`
	Channel      *Channel     `json:"channel,omitempty" jsonschema:"while the delegation runs: how the executor's side stands (none of these is a failure)"`
	LostEvents   []string     `json:"lost_events,omitempty" jsonschema:"runs of events the executor could no longer replay when its stream was followed again"`
	Permissions  []Permission `json:"permissions,omitempty" jsonschema:"the executor agent's permission requests: pending ones wait for delegate_permission"`
	Audit        *Audit       `json:"audit,omitempty" jsonschema:"what the executor did in the directory, once the delegation ended"`
	AgentOutput  []string     `json:"agent_output,omitempty" jsonschema:"the executor agent's last progress lines, oldest first"`
	AgentStderr  string       `json:"agent_stderr,omitempty" jsonschema:"the end of what the executor's agent wrote to stderr"`
	MountRefused *Refused     `json:"mount_refused,omitempty" jsonschema:"writes of the agent a read-only live mount refused"`
	Session      *Session     `json:"session,omitempty" jsonschema:"a session's last turn and what it waits for"`
	Staged       string       `json:"staged,omitempty" jsonschema:"with snapshot_mode staged: how its result kept for review stands (pending, applied, discarded, expired); delegate_snapshots lists it"`
	Group        string       `json:"group,omitempty" jsonschema:"the attempts group (delegate with peers): delegate_compare takes it"`
	Attempts     []string     `json:"attempts,omitempty" jsonschema:"the group's delegations, one per executor (per attempt, or per scope)"`
	Error        *Failure     `json:"error,omitempty"`
	lent         bool         // START went out: the executor was given the workspace
	ended        bool         // the delegation is over
}

// Session is a session delegation's last turn (seed 003 §5.5): while
// state is awaiting, Awaiting says for what.
type Session struct {
	Turn       int       `json:"turn" jsonschema:"the last turn's number, from 1"`
	TurnState  string    `json:"turn_state" jsonschema:"queued, running, done, cancelled or failed"`
	StopReason string    `json:"stop_reason,omitempty" jsonschema:"how the agent ended the turn: end_turn, cancelled, max_tokens, refusal…"`
	Reply      string    `json:"reply,omitempty" jsonschema:"what the agent said in the turn (its end, when long)"`
	TurnError  string    `json:"turn_error,omitempty"`
	Awaiting   *Awaiting `json:"awaiting,omitempty"`
}

// Awaiting is what a session waits for: a permission decision (answer
// with option_id) or its next prompt (answer with text).
type Awaiting struct {
	Kind      string   `json:"kind" jsonschema:"permission or input"`
	Question  string   `json:"question" jsonschema:"the permission asked for, or the agent's last message"`
	RequestID string   `json:"request_id,omitempty"`
	Options   []Choice `json:"options,omitempty" jsonschema:"the options a permission decision takes: answer with one's option_id"`
}

// Choice is one option of a permission request.
type Choice struct {
	OptionID string `json:"option_id"`
	Name     string `json:"name,omitempty"`
	Kind     string `json:"kind" jsonschema:"allow_once, allow_always, reject_once or reject_always"`
}

// choices are opts as the tools give them.
func choices(opts []lease.PermissionOption) []Choice {
	out := make([]Choice, len(opts))
	for i, o := range opts {
		out[i] = Choice{OptionID: o.OptionID, Name: o.Name, Kind: o.Kind}
	}
	return out
}

// choicesText is cs as a model reads them in text: "allow (allow_once), …".
func choicesText(cs []Choice) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.OptionID + " (" + c.Kind + ")"
	}
	return strings.Join(s, ", ")
}

// Audit is what the executor did in the directory lent (the live mount's
// audit log; for the archive transport, the result's changes).
type Audit struct {
	FilesRead    int    `json:"files_read"`
	FilesWritten int    `json:"files_written"`
	Created      int    `json:"created"`
	Deleted      int    `json:"deleted"`
	BytesRead    int64  `json:"bytes_read"`
	BytesWritten int64  `json:"bytes_written"`
	Refused      int    `json:"refused" jsonschema:"operations the owner's export policy refused"`
	Operations   uint64 `json:"operations"`
	Dropped      uint64 `json:"dropped,omitempty" jsonschema:"the oldest operations the bounded log no longer holds"`
	FromDiff     bool   `json:"from_diff,omitempty" jsonschema:"archive transport: the whole directory was sent; counts come from the result's changes"`
}

// Refused is what a read-only live mount refused the agent.
type Refused struct {
	Count    uint64   `json:"count"`
	Examples []string `json:"examples,omitempty" jsonschema:"the first few: operation and name"`
}

// Channel is how the executor's side of a running delegation stands.
type Channel struct {
	State  string `json:"state" jsonschema:"running, idle (no event for a while, not finished), waiting (for a permission decision), finished-not-applied, unreachable (network or token) or missing (the executor does not know the delegation)"`
	Since  string `json:"since" jsonschema:"RFC 3339"`
	Detail string `json:"detail,omitempty"`
}

// Permission is a permission request of the executor's agent.
type Permission struct {
	RequestID string   `json:"request_id"`
	Title     string   `json:"title"`
	Options   []Choice `json:"options" jsonschema:"the options: answer with one's option_id"`
	Outcome   string   `json:"outcome" jsonschema:"pending, selected or cancelled"`
	OptionID  string   `json:"option_id,omitempty"`
	DecidedBy string   `json:"decided_by,omitempty" jsonschema:"as the executor said it"`
	AskedBy   string   `json:"asked_by,omitempty"`
	How       string   `json:"how,omitempty" jsonschema:"user, policy, timeout or task-end"`
	Answerer  string   `json:"answerer,omitempty" jsonschema:"who answered from the delegator's side"`
	Holds     string   `json:"holds,omitempty" jsonschema:"how far the answer goes: this request, or the session (an always option)"`
}

// Failure is a spec error (§4.6): code, message and hint.
type Failure struct {
	Code    string `json:"code" jsonschema:"an AWCP v1 error code, e.g. WORKSPACE_NOT_FOUND or TASK_FAILED"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty" jsonschema:"what to do about it"`
}

func failureOf(err error) *Failure {
	pe := control.AsProtocolError(err, control.CodeDeclined)
	return &Failure{Code: pe.Code, Message: pe.Message, Hint: pe.Hint}
}

func outcomeOf(d *lease.Delegation) Outcome {
	o := Outcome{
		lent:         slices.ContainsFunc(d.Transitions, func(t lease.Transition) bool { return t.To == lease.Started }),
		ended:        d.State.Terminal(),
		DelegationID: d.ID, State: string(d.State), Description: d.Description,
		WorkspaceDir: d.LocalDir, PeerURL: d.Peer, Transport: d.Transport, AccessMode: d.AccessMode,
		CreatedAt: stamp(d.CreatedAt), Summary: d.Summary,
		Highlights: d.Highlights, Changes: d.Changes, Conflicts: d.Conflicts, Notes: d.Notes,
	}
	if !d.State.Terminal() {
		o.ExpiresAt = stamp(d.ExpiresAt)
		if c := d.Channel; c != nil {
			o.Channel = &Channel{State: c.State, Since: stamp(c.Since), Detail: c.Detail}
		}
	}
	for _, g := range d.Gaps {
		o.LostEvents = append(o.LostEvents, fmt.Sprintf("%d–%d", g.From, g.To))
	}
	if a := d.Audit; a != nil {
		o.Audit = &Audit{FilesRead: a.FilesRead, FilesWritten: a.FilesWritten, Created: a.Created, Deleted: a.Deleted,
			BytesRead: a.BytesRead, BytesWritten: a.BytesWritten, Refused: a.Refused, Operations: a.Operations,
			Dropped: a.Dropped, FromDiff: a.FromDiff}
	}
	for _, p := range d.Permissions {
		o.Permissions = append(o.Permissions, Permission{RequestID: p.RequestID, Title: p.Title,
			Options: choices(p.Options), Outcome: p.Outcome, OptionID: p.OptionID, DecidedBy: p.DecidedBy,
			AskedBy: p.AskedBy, How: p.How, Answerer: p.Answerer, Holds: p.Holds})
	}
	o.AgentStderr = d.AgentStderr
	if r := d.MountRefused; r != nil {
		o.MountRefused = &Refused{Count: r.Count, Examples: r.Examples}
	}
	for _, l := range d.Progress[max(0, len(d.Progress)-outcomeProgressLines):] {
		o.AgentOutput = append(o.AgentOutput, l.Text)
	}
	if t := d.LastTurn(); t != nil {
		o.Session = &Session{Turn: t.N, TurnState: t.State, StopReason: t.StopReason, Reply: t.Reply, TurnError: t.Error}
		if d.Awaiting() {
			o.State = StateAwaiting
			o.Session.Awaiting = &Awaiting{Kind: "input", Question: t.Reply}
			if p := d.PendingPermission(); p != nil {
				o.Session.Awaiting = &Awaiting{Kind: "permission", Question: p.Title, RequestID: p.RequestID, Options: choices(p.Options)}
			}
		}
	}
	if st := d.Staged; st != nil {
		o.Staged = st.State
		if st.State == lease.StagedPending && d.State.Terminal() {
			o.Notes = append(o.Notes, "the result is staged, the workspace untouched: review it with delegate_snapshots, then delegate_apply_snapshot or delegate_discard_snapshot")
		}
	}
	if f := d.Failed(); f != nil {
		o.Error = &Failure{Code: f.Code, Message: f.Message, Hint: f.Hint}
	}
	return o
}

// StateAwaiting is the state of a live session that waits on its user
// (seed 003's awaiting): for a permission decision or its next prompt.
const StateAwaiting = "awaiting"

// outcomeProgressLines is how many of the agent's last progress lines an
// outcome carries.
const outcomeProgressLines = 20

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// failed reports whether the outcome is a tool error: a refused call or a
// delegation that ended other than completed.
func (o Outcome) failed() bool { return o.Error != nil }

func (Outcome) refused(f *Failure) Outcome { return Outcome{Error: f} }

// text is the outcome for a model to read.
func (o Outcome) text() string {
	var b strings.Builder
	if o.DelegationID != "" {
		fmt.Fprintf(&b, "delegation %s: %s\n", o.DelegationID, o.State)
		// "lent" only once it was: a delegation refused at INVITE never
		// was; one returned at once (background) is on its way.
		verb := "lent to"
		switch {
		case !o.lent && o.ended:
			verb = "not lent to"
		case !o.lent:
			verb = "being lent to"
		}
		fmt.Fprintf(&b, "workspace %s %s %s (%s, %s)\n", o.WorkspaceDir, verb, o.PeerURL, o.Transport, o.AccessMode)
	}
	if o.Summary != "" {
		fmt.Fprintf(&b, "summary:\n%s\n", indent(o.Summary))
	}
	list := func(title string, items []string) {
		if len(items) > 0 {
			fmt.Fprintf(&b, "%s:\n%s\n", title, indent(strings.Join(items, "\n")))
		}
	}
	list("highlights", o.Highlights)
	list("changes to the workspace", o.Changes)
	list("conflicts (local versions kept)", o.Conflicts)
	list("notes", o.Notes)
	if c := o.Channel; c != nil {
		fmt.Fprintf(&b, "executor: %s since %s", c.State, c.Since)
		if c.Detail != "" {
			fmt.Fprintf(&b, " (%s)", c.Detail)
		}
		b.WriteString("\n")
	}
	list("events lost between reconnections", o.LostEvents)
	list("agent output (last lines)", o.AgentOutput)
	if r := o.MountRefused; r != nil {
		fmt.Fprintf(&b, "the read-only mount refused %d writes of the agent: %s\n", r.Count, strings.Join(r.Examples, "; "))
	}
	if o.AgentStderr != "" {
		fmt.Fprintf(&b, "agent stderr (its end):\n%s\n", indent(o.AgentStderr))
	}
	if ses := o.Session; ses != nil {
		fmt.Fprintf(&b, "turn %d: %s %s\n", ses.Turn, ses.TurnState, ses.StopReason)
		if ses.TurnError != "" {
			fmt.Fprintf(&b, "turn error: %s\n", ses.TurnError)
		}
		if ses.Reply != "" && !strings.Contains(o.Summary, strings.TrimSpace(ses.Reply)) { // else printed above, in the summary
			fmt.Fprintf(&b, "the agent said:\n%s\n", indent(ses.Reply))
		}
		switch a := ses.Awaiting; {
		case a == nil:
		case a.Kind == "permission":
			fmt.Fprintf(&b, "AWAITING a permission decision (%s): %s; options: %s (answer with delegate_answer and option_id)\n", a.RequestID, a.Question, choicesText(a.Options))
		default:
			b.WriteString("AWAITING the next prompt: answer with delegate_answer (or delegate with session_id); delegate_close_session ends the session\n")
		}
	}
	for _, p := range o.Permissions {
		if ses := o.Session; ses != nil && ses.Awaiting != nil && ses.Awaiting.Kind == "permission" && ses.Awaiting.RequestID == p.RequestID {
			continue // said above, with the one tool that answers it
		}
		switch p.Outcome {
		case control.PermissionPending:
			fmt.Fprintf(&b, "permission %s PENDING: %s; options: %s (answer with delegate_permission)\n",
				p.RequestID, p.Title, choicesText(p.Options))
		default:
			fmt.Fprintf(&b, "permission %s: %s: %s %s (by %s)\n", p.RequestID, p.Title, p.Outcome, p.OptionID, p.DecidedBy)
		}
	}
	if o.ExpiresAt != "" {
		fmt.Fprintf(&b, "lease ends %s\n", o.ExpiresAt)
	}
	b.WriteString(o.Error.text())
	return strings.TrimRight(b.String(), "\n")
}

// text is the failure as the CLI prints it; nothing for none.
func (f *Failure) text() string {
	if f == nil {
		return ""
	}
	s := fmt.Sprintf("error %s: %s\n", f.Code, f.Message)
	if f.Hint != "" {
		s += "hint: " + f.Hint + "\n"
	}
	return s
}

func indent(s string) string { return "  " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ") }
