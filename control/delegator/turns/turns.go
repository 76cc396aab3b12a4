// Package turns drives a session delegation for those who are not
// editors — MCP's delegate and `awcp-ctl export --session` — turn by turn
// (with an executor whose agent holds no ACP session, as its rounds:
// delegator.DriveRounds)
// from the delegation's record: a tool or a command queues a prompt there
// (delegator.Say), the driver sends it to the remote agent and writes back
// the agent's reply; a permission the agent asks for waits in the record
// (awaiting) until someone answers it there (delegator.Permit).
//
// The driver is an ACP client (the official SDK's) in front of a gateway
// of its own (control/delegator/gateway), joined by in-process pipes: the
// session's channel, its drops and resumption, its idle TTL and its
// channel events are the gateway's, the same as an editor gets.
package turns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/delegator/gateway"
	"github.com/awcp/awcp/lease"
)

// Delegator is what the driver needs of the delegator's service: what
// its gateway needs, and the channel's record.
type Delegator interface {
	gateway.Delegator
	RecordChannel(id string, ev lease.SessionEvent, ch *lease.SessionChannel)
	// PreferRounds and DriveRounds are a session with an executor whose
	// agent holds no ACP session: its turns are the executor's rounds.
	PreferRounds(ctx context.Context, id string) (bool, error)
	DriveRounds(ctx context.Context, id string, idle, poll time.Duration) error
}

// Store is the record the turns come from and go back to.
type Store interface {
	Delegation(id string) (*lease.Delegation, error)
	UpdateDelegation(id string, fn func(*lease.Delegation) error) (*lease.Delegation, error)
	Now() time.Time
}

// Driver drives session delegations from their records.
type Driver struct {
	Delegator Delegator
	Store     Store
	// IdleTTL ends a session with no turn for this long (seed 003 §6.4).
	// 0: never.
	IdleTTL time.Duration
	// Poll is how often the record is read for a new turn or an answer.
	// Default 100ms.
	Poll   time.Duration
	Logger *slog.Logger
}

// adopted is the delegator's service with the session's delegation made
// already (by the tool call that asked for it, so that admission's answer
// is that call's): the gateway's session/new takes it, not a new one.
type adopted struct {
	Delegator
	del *lease.Delegation
}

func (a adopted) Create(delegator.ExportRequest) (*lease.Delegation, error) { return a.del, nil }

// Drive runs driven session delegation id until it ends: closed through
// its record (EndSession), idle for IdleTTL, cancelled, expired, or ctx
// done (the session is then closed, the delegation done).
func (dr *Driver) Drive(ctx context.Context, id string) error {
	if dr.Logger == nil {
		dr.Logger = slog.Default()
	}
	if dr.Poll <= 0 {
		dr.Poll = 100 * time.Millisecond
	}
	del, err := dr.Store.Delegation(id)
	if err != nil {
		return err
	}
	if !del.SessionDriven {
		return fmt.Errorf("delegation %s is not a driven session", id)
	}
	if rounds, err := dr.Delegator.PreferRounds(ctx, id); err != nil {
		return err
	} else if rounds {
		return dr.Delegator.DriveRounds(ctx, id, dr.IdleTTL, dr.Poll)
	}
	toGateway, fromDriver := io.Pipe()
	toDriver, fromGateway := io.Pipe()
	g := &gateway.Gateway{
		Delegator: adopted{dr.Delegator, del},
		Request:   delegator.ExportRequest{Peer: del.Peer, Prompt: del.Prompt},
		IdleTTL:   dr.IdleTTL,
		Channel:   dr.Delegator.RecordChannel,
		Logger:    dr.Logger,
	}
	served := make(chan error, 1)
	go func() {
		err := g.Serve(context.WithoutCancel(ctx), toGateway, fromGateway)
		fromGateway.CloseWithError(io.EOF)
		served <- err
	}()
	c := &client{dr: dr, id: id}
	conn := acpsdk.NewClientSideConnection(c, fromDriver, toDriver)
	conn.SetLogger(dr.Logger)
	err = dr.converse(ctx, conn, c, del)
	// The driver is done: the gateway hears the editor go, closes the
	// session, and its delegation ends done.
	fromDriver.Close()
	serr := <-served
	toDriver.Close()
	if err == nil {
		err = serr
	}
	if err != nil {
		dr.Logger.Warn("session driver", "delegation", id, "err", err)
	}
	return err
}

// converse opens the agent's session and runs the record's turns, one at
// a time, until the session ends.
func (dr *Driver) converse(ctx context.Context, conn *acpsdk.ClientSideConnection, c *client, del *lease.Delegation) error {
	if _, err := conn.Initialize(ctx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber,
		ClientInfo: &acpsdk.Implementation{Name: "awcp-ctl", Version: "1"}}); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	sess, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: del.LocalDir, McpServers: []acpsdk.McpServer{}})
	if err != nil {
		dr.failUnopened(del.ID, "the agent's session did not open: "+rpcMessage(err))
		return nil // the delegation says why it failed
	}
	c.session = sess.SessionId
	for {
		d, err := dr.Store.Delegation(del.ID)
		if err != nil {
			return err
		}
		switch {
		case d.State.Terminal():
			return nil
		case d.SessionClose:
			dr.Logger.Info("closing the session, as asked", "delegation", d.ID)
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			conn.CloseSession(cctx, acpsdk.CloseSessionRequest{SessionId: sess.SessionId})
			cancel()
			return nil
		}
		if t := d.LastTurn(); t != nil && t.State == lease.TurnQueued {
			if expired := dr.turn(ctx, conn, c, d.ID, *t); expired {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(dr.Poll):
		}
	}
}

// turn sends turn t to the agent and records how it ended; it reports
// whether the session is gone.
func (dr *Driver) turn(ctx context.Context, conn *acpsdk.ClientSideConnection, c *client, id string, t lease.Turn) (expired bool) {
	endsSeen := 0
	dr.update(id, func(d *lease.Delegation) {
		if x := d.Turn(t.N); x != nil {
			x.State = lease.TurnRunning
		}
		endsSeen = d.TurnEndsSeen
		d.AddProgress(lease.ProgressLine{At: dr.Store.Now(), Text: fmt.Sprintf("turn %d: sent", t.N)})
	})
	c.startTurn(t.N)
	// A close asked for while the turn runs cancels it (session/cancel),
	// so that the close is not held up by an agent that works on.
	tctx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); dr.watchClose(tctx, conn, c, id, t.N) }()
	resp, err := conn.Prompt(tctx, acpsdk.PromptRequest{SessionId: c.session, Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock(t.Prompt)}})
	stop()
	<-watched
	reply := c.endTurn()
	if err == nil {
		dr.awaitTurnEnd(ctx, id, endsSeen)
	}
	var re *acpsdk.RequestError
	expired = errors.As(err, &re) && re.Code == -32002
	dr.update(id, func(d *lease.Delegation) {
		x := d.Turn(t.N)
		if x == nil {
			return
		}
		x.Reply, x.EndedAt = lease.KeepReply(reply), dr.Store.Now()
		switch {
		case err != nil:
			x.State, x.Error = lease.TurnFailed, rpcMessage(err)
			if expired {
				x.Error = "the session ended before the turn did (session_expired)"
			} else if ctx.Err() == nil {
				// The agent answered the prompt with an error (no
				// credentials, a crash): the session has failed, and
				// ends so, in the agent's words.
				failSession(d, fmt.Sprintf("turn %d failed: %s", t.N, x.Error))
			}
		case resp.StopReason == acpsdk.StopReasonCancelled:
			x.State, x.StopReason = lease.TurnCancelled, string(resp.StopReason)
		default:
			x.State, x.StopReason = lease.TurnDone, string(resp.StopReason)
		}
		d.AddProgress(lease.ProgressLine{At: x.EndedAt, Text: fmt.Sprintf("turn %d: %s %s", t.N, x.State, x.StopReason)})
	})
	return expired || ctx.Err() != nil
}

// turnEndWait bounds how long a turn's end waits for the executor's word
// that the turn ended (an executor that never says it costs this a turn).
const turnEndWait = 2 * time.Second

// awaitTurnEnd waits until the executor's word that the turn ended has
// come through the delegation's events (lease.Delegation.TurnEndsSeen past
// before), with every progress line of the turn before it: the turn's end
// is then recorded after them.
func (dr *Driver) awaitTurnEnd(ctx context.Context, id string, before int) {
	deadline := time.Now().Add(turnEndWait)
	for time.Now().Before(deadline) {
		if d, err := dr.Store.Delegation(id); err != nil || d.TurnEndsSeen > before || d.State.Terminal() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// watchClose cancels running turn n when the record asks for the
// session's close, for that turn's cancel (`cancel ID --turn`), or the
// delegation ends.
func (dr *Driver) watchClose(ctx context.Context, conn *acpsdk.ClientSideConnection, c *client, id string, n int) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(dr.Poll):
		}
		d, err := dr.Store.Delegation(id)
		if err != nil {
			continue
		}
		if t := d.Turn(n); d.SessionClose || d.State.Terminal() || t != nil && t.CancelAsked {
			conn.Cancel(ctx, acpsdk.CancelNotification{SessionId: c.session})
			return
		}
	}
}

// failSession records why session d failed and asks for its close: its
// delegation then ends failed, with why (lease.Delegation.SessionFailure).
func failSession(d *lease.Delegation, why string) {
	if d.SessionFailure == nil {
		d.SessionFailure = &lease.Failure{Code: control.CodeTaskFailed, Message: why,
			Hint: "the agent's own words; `awcp-ctl output ID` shows what else it said, and `awcp-fs doctor` on the executor starts it as serve does"}
	}
	d.SessionClose = true
}

// failUnopened ends the queued turn of a session that did not open, and
// the session, in one write: a reader between two would see a turn ended
// and a session open, which awaits the next prompt (Awaiting), and say so.
func (dr *Driver) failUnopened(id, why string) {
	dr.update(id, func(d *lease.Delegation) {
		if t := d.LastTurn(); t != nil && !t.Ended() {
			t.State, t.Error, t.EndedAt = lease.TurnFailed, why, dr.Store.Now()
		}
		failSession(d, why)
	})
}

// update changes id's record, unless it has ended.
func (dr *Driver) update(id string, fn func(*lease.Delegation)) {
	_, err := dr.Store.UpdateDelegation(id, func(d *lease.Delegation) error {
		fn(d)
		return nil
	})
	if err != nil {
		dr.Logger.Warn("record a session's turn", "delegation", id, "err", err)
	}
}

// maxToolCall bounds the tool call kept with a permission request.
const maxToolCall = 16 << 10

// client is the driver's side of ACP: no file system and no terminal of
// its own (the executor serves those in the mount); the agent's message
// gathered as the turn's reply; permissions asked through the record.
type client struct {
	dr      *Driver
	id      string
	session acpsdk.SessionId

	mu    sync.Mutex
	turnN int
	reply strings.Builder
	asked int
}

var _ acpsdk.Client = (*client)(nil)

func (c *client) startTurn(n int) {
	c.mu.Lock()
	c.turnN = n
	c.reply.Reset()
	c.mu.Unlock()
}

func (c *client) endTurn() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reply.String()
}

// SessionUpdate gathers the agent's message, and records its tool calls
// as progress lines.
func (c *client) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	u := n.Update
	switch {
	case u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil:
		c.mu.Lock()
		c.reply.WriteString(u.AgentMessageChunk.Content.Text.Text)
		if c.reply.Len() > 2*lease.MaxReply {
			kept := lease.KeepReply(c.reply.String())
			c.reply.Reset()
			c.reply.WriteString(kept)
		}
		c.mu.Unlock()
	case u.ToolCall != nil:
		c.dr.update(c.id, func(d *lease.Delegation) {
			d.AddProgress(lease.ProgressLine{At: c.dr.Store.Now(), Text: "tool: " + u.ToolCall.Title})
		})
	}
	return nil
}

// RequestPermission records the request in the delegation's record —
// the session is then awaiting — and waits there for its answer.
func (c *client) RequestPermission(ctx context.Context, p acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.asked++
	reqID := fmt.Sprintf("perm-%d", c.asked) // numbered as a task's are; the turn is in AskedBy
	soFar := c.reply.String()
	n := c.turnN
	c.mu.Unlock()
	title := string(p.ToolCall.ToolCallId)
	if p.ToolCall.Title != nil {
		title = *p.ToolCall.Title
	}
	perm := lease.Permission{RequestID: reqID, Title: title, Outcome: control.PermissionPending,
		AskedBy: "the session's agent, in turn " + fmt.Sprint(n), AskedAt: c.dr.Store.Now(), At: c.dr.Store.Now()}
	if raw, err := json.Marshal(p.ToolCall); err == nil && len(raw) <= maxToolCall {
		perm.ToolCall = raw
	}
	for _, o := range p.Options {
		perm.Options = append(perm.Options, lease.PermissionOption{OptionID: string(o.OptionId), Name: o.Name, Kind: string(o.Kind)})
	}
	c.dr.update(c.id, func(d *lease.Delegation) {
		d.Permissions = append(d.Permissions, perm)
		if t := d.Turn(n); t != nil {
			t.Reply = lease.KeepReply(soFar) // what it said before it asked
		}
	})
	cancelled := acpsdk.RequestPermissionResponse{Outcome: acpsdk.NewRequestPermissionOutcomeCancelled()}
	for {
		d, err := c.dr.Store.Delegation(c.id)
		if err != nil {
			return cancelled, nil
		}
		for _, q := range d.Permissions {
			if q.RequestID == reqID && q.Outcome == control.PermissionSelected {
				return acpsdk.RequestPermissionResponse{Outcome: acpsdk.NewRequestPermissionOutcomeSelected(acpsdk.PermissionOptionId(q.OptionID))}, nil
			}
		}
		if d.State.Terminal() || d.SessionClose {
			c.settle(reqID, "task-end")
			if d.SessionClose {
				// Its record says so: the agent did not just finish.
				c.dr.update(c.id, func(d *lease.Delegation) {
					d.Notes = append(d.Notes, "closed while the agent awaited a permission decision, left unanswered: "+perm.Title)
				})
			}
			return cancelled, nil
		}
		select {
		case <-ctx.Done():
			c.settle(reqID, "cancelled by the agent")
			return cancelled, nil
		case <-time.After(c.dr.Poll):
		}
	}
}

// settle records that request reqID ended unanswered.
func (c *client) settle(reqID, how string) {
	c.dr.update(c.id, func(d *lease.Delegation) {
		for i := range d.Permissions {
			if p := &d.Permissions[i]; p.RequestID == reqID && p.Outcome == control.PermissionPending {
				now := c.dr.Store.Now()
				p.Outcome, p.How, p.At, p.DecidedAt = control.PermissionCancelled, how, now, now
			}
		}
	})
}

// The driver declares no file system and no terminal, so the agent never
// asks it for them; if one does, it is refused.

func (c *client) ReadTextFile(context.Context, acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	return acpsdk.ReadTextFileResponse{}, acpsdk.NewMethodNotFound("fs/read_text_file")
}

func (c *client) WriteTextFile(context.Context, acpsdk.WriteTextFileRequest) (acpsdk.WriteTextFileResponse, error) {
	return acpsdk.WriteTextFileResponse{}, acpsdk.NewMethodNotFound("fs/write_text_file")
}

func (c *client) CreateTerminal(context.Context, acpsdk.CreateTerminalRequest) (acpsdk.CreateTerminalResponse, error) {
	return acpsdk.CreateTerminalResponse{}, acpsdk.NewMethodNotFound("terminal/create")
}

func (c *client) KillTerminal(context.Context, acpsdk.KillTerminalRequest) (acpsdk.KillTerminalResponse, error) {
	return acpsdk.KillTerminalResponse{}, acpsdk.NewMethodNotFound("terminal/kill")
}

func (c *client) TerminalOutput(context.Context, acpsdk.TerminalOutputRequest) (acpsdk.TerminalOutputResponse, error) {
	return acpsdk.TerminalOutputResponse{}, acpsdk.NewMethodNotFound("terminal/output")
}

func (c *client) ReleaseTerminal(context.Context, acpsdk.ReleaseTerminalRequest) (acpsdk.ReleaseTerminalResponse, error) {
	return acpsdk.ReleaseTerminalResponse{}, acpsdk.NewMethodNotFound("terminal/release")
}

func (c *client) WaitForTerminalExit(context.Context, acpsdk.WaitForTerminalExitRequest) (acpsdk.WaitForTerminalExitResponse, error) {
	return acpsdk.WaitForTerminalExitResponse{}, acpsdk.NewMethodNotFound("terminal/wait_for_exit")
}

// rpcMessage is err's text, a JSON-RPC error's message rather than its
// JSON.
func rpcMessage(err error) string {
	var re *acpsdk.RequestError
	if errors.As(err, &re) && re.Message != "" {
		return re.Message
	}
	return err.Error()
}
