// Package acp runs an ACP agent (Agent Client Protocol: JSON-RPC 2.0 over
// the agent's stdio) as the executor's worker: the executor is the ACP
// client. For each task it starts the agent in the work dir, initializes,
// opens a session there and sends the delegation's prompt; the agent's
// session updates become progress, its stop reason the task's end.
//
// # Client callbacks
//
// The executor serves fs/read_text_file, fs/write_text_file and the
// terminal/* methods, confined to the work dir: paths must be absolute and
// inside it (symlinks included), a ro delegation refuses writes, and with
// AllowExec false terminal/create is refused. Unknown methods get -32601 and
// malformed params -32602 from acp-go-sdk.
//
// # Ending
//
// A turn that ends with end_turn is done; refusal, max_tokens and
// max_turn_requests fail the task. When the task's context ends (cancel,
// expiry) the worker sends session/cancel, answers pending permission
// requests with cancelled, waits CancelGrace for the turn to end, then
// stops the agent's process group.
package acp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/tail"
	"github.com/awcp/awcp/internal/untrusted"
	"github.com/awcp/awcp/lease"
)

// Worker runs an ACP agent for each task. It is a executor.Worker.
type Worker struct {
	// Command starts the agent (run by /bin/sh in the work dir). Required.
	Command string
	// AllowExec permits terminal/create. The executor declares it in
	// ACCEPT's sandbox profile.
	AllowExec bool
	// CancelGrace is how long a cancelled turn may take to end with
	// stopReason cancelled before the agent is stopped. Default 5s.
	CancelGrace time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL. Default 2s.
	KillGrace time.Duration
	// Logger receives the agent's stderr and protocol diagnostics.
	// Default slog.Default().
	Logger *slog.Logger
}

const stderrTailBytes = 4 << 10

// Run runs the agent on t until its turn ends or ctx does. Like
// agent.Run, an ended ctx returns an error wrapping agent.ErrKilled.
func (w Worker) Run(ctx context.Context, t agent.Task, h agent.Hooks) (*agent.Result, error) {
	if w.Command == "" {
		return nil, errors.New("acp: agent command is empty")
	}
	w = w.withDefaults()
	log := w.Logger.With("delegation", t.DelegationID)

	// Our requests to the agent live until the agent is stopped, so that a
	// cancelled turn can still answer; the agent's requests to us
	// (permissions above all) end with the task, answered cancelled.
	reqCtx, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	askCtx, endAsks := context.WithCancel(context.Background())
	defer endAsks()
	c, err := newClient(askCtx, t, w.AllowExec, h, log)
	if err != nil {
		return nil, err
	}

	proc, err := agent.Start(t, w.Command, nil)
	if err != nil {
		c.releaseAll()
		return nil, fmt.Errorf("ACP agent: %w", err)
	}
	toAgentW, fromAgent, errR, exited := proc.Stdin, proc.Stdout, proc.Stderr, proc.Exited()
	if h.Started != nil {
		h.Started(proc.Pgid)
	}

	stderr := &tail.Buffer{Max: stderrTailBytes}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		sc := bufio.NewScanner(io.TeeReader(errR, stderr))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			log.Info("agent stderr", "line", sc.Text())
		}
	}()

	conn := acpsdk.NewClientSideConnection(c, toAgentW, fromAgent)
	conn.SetLogger(log.With("component", "acp"))

	ended := make(chan turnEnd, 1)
	go func() {
		stop, err := c.turn(reqCtx, conn)
		ended <- turnEnd{stop, err}
	}()

	var end turnEnd
	killed, turnOver := false, false
	select {
	case end = <-ended:
		turnOver = true
	case <-ctx.Done():
		killed = true
		if sid, ok := c.session(); ok {
			// Best effort and bounded: the agent may be wedged.
			nctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := conn.Cancel(nctx, acpsdk.CancelNotification{SessionId: sid}); err != nil {
				log.Debug("session/cancel", "err", err)
			}
			cancel()
		}
		endAsks()
		select {
		case end = <-ended:
			turnOver = true
			log.Info("turn cancelled", "stopReason", end.stop, "err", end.err)
		case <-exited:
		case <-time.After(w.CancelGrace):
			log.Warn("the agent did not end its cancelled turn in time; stopping it")
		}
	}
	// The turn is over: the agent's process group goes, and with it every
	// terminal it left.
	toAgentW.Close()
	proc.Stop(w.KillGrace)
	endAsks()
	endRequests()
	fromAgent.Close()
	if !turnOver {
		<-ended // the connection is closed: the turn fails at once
	}
	c.releaseAll()
	// The group is gone, so stderr ends — unless something that left the
	// group holds it; then it is cut off after a second.
	select {
	case <-stderrDone:
	case <-time.After(time.Second):
	}
	errR.Close()
	<-stderrDone

	if killed {
		return nil, fmt.Errorf("%w: %w", agent.ErrKilled, context.Cause(ctx))
	}
	res := &agent.Result{ExitCode: proc.ExitCode(), StderrTail: strings.TrimSpace(stderr.String())}
	switch {
	case end.err != nil:
		// The agent's own words, one line: its stderr stays beside them
		// (Result.StderrTail), not spliced in (an adapter's debug lines
		// would bury them).
		res.Failed = "the ACP agent failed: " + Words(end.err)
		var said *acpsdk.RequestError
		if line := lease.TellingLine(res.StderrTail); line != "" && (!errors.As(end.err, &said) || said.Code == -32603) {
			// It answered nothing of its own (it died: the SDK's
			// internal error): its stderr's telling line is its word.
			res.Failed += "; its stderr: " + untrusted.Line(line, 1000)
		}
	case end.stop == acpsdk.StopReasonEndTurn:
		res.Summary = c.summary()
	default:
		res.Failed = fmt.Sprintf("the agent stopped: %s", end.stop)
		if m := c.summary(); m != "" {
			res.Failed += ": " + m
		}
	}
	return res, nil
}

type turnEnd struct {
	stop acpsdk.StopReason
	err  error
}

// Words is what an ACP call's failure says, one line: the step
// (initialize, session/prompt) and the agent's own message — and the
// message of its data, where it gives one — rather than the JSON-RPC
// error whole.
func Words(err error) string {
	var re *acpsdk.RequestError
	if !errors.As(err, &re) {
		return untrusted.Line(err.Error(), 1000)
	}
	step, _, _ := strings.Cut(err.Error(), ": ")
	words := re.Message
	if d, ok := re.Data.(map[string]any); ok {
		for _, k := range []string{"message", "details", "error"} {
			if s, ok := d[k].(string); ok && s != "" && s != words {
				words += ": " + s
				break
			}
		}
	} else if s, ok := re.Data.(string); ok && s != "" && s != words {
		words += ": " + s
	}
	if step == err.Error() || strings.HasPrefix(step, "{") {
		return untrusted.Line(words, 1000)
	}
	return untrusted.Line(step+": "+words, 1000)
}
