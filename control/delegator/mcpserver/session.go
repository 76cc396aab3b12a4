package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// Sessions (seed 003 §5.5–§6): delegate with session: true opens one and
// returns when its agent awaits — a permission decision, or the next
// prompt after a turn — and delegate_answer (or delegate with
// session_id) goes on with it.

// nextTurn queues prompt as session id's next turn and, unless
// background, waits until its agent awaits again or the session ends.
func (s *server) nextTurn(ctx context.Context, req *mcp.CallToolRequest, id, prompt string, background bool) (Outcome, error) {
	d, err := s.find(id)
	if err != nil {
		return Outcome{}, err
	}
	n, err := s.dlg.Say(d.ID, prompt, answerer(req))
	if err != nil {
		return Outcome{}, err
	}
	s.log.Info("session turn queued", "delegation", d.ID, "turn", n)
	if background {
		if d, err = s.dlg.Find(d.ID); err != nil {
			return Outcome{}, err
		}
		o := outcomeOf(d)
		o.Notes = append(o.Notes, fmt.Sprintf("turn %d queued: delegate_output with block: true waits until the agent awaits again", n))
		return o, nil
	}
	if d, err = s.wait(ctx, req, d.ID, s.opts.SyncWait); err != nil {
		return Outcome{}, err
	}
	return outcomeOf(d), nil
}

type answerArgs struct {
	DelegationID string `json:"delegation_id" jsonschema:"the session's delegation id (a unique prefix is enough)"`
	Answer       string `json:"answer,omitempty" jsonschema:"the reply to the agent's question: the session's next turn"`
	OptionID     string `json:"option_id,omitempty" jsonschema:"for a permission the agent awaits: the chosen option's id"`
	Background   bool   `json:"background,omitempty" jsonschema:"return at once instead of waiting until the agent awaits again"`
}

func (s *server) answer(ctx context.Context, req *mcp.CallToolRequest, in answerArgs) (Outcome, error) {
	d, err := s.find(in.DelegationID)
	if err != nil {
		return Outcome{}, err
	}
	if !d.SessionDriven {
		return Outcome{}, control.Errorf(control.CodeUsage, "delegation %s is not a session", d.ID).
			WithHint("a task's permission requests are answered with delegate_permission")
	}
	if p := d.PendingPermission(); p != nil {
		opt := in.OptionID
		if opt == "" {
			opt = optionNamed(p.Options, in.Answer)
		}
		if opt == "" {
			return Outcome{}, control.Errorf(control.CodeUsage, "the agent awaits a permission decision (%s): %s", p.RequestID, p.Title).
				WithHint("answer with option_id, one of " + lease.Choices(p.Options))
		}
		if err := s.dlg.Permit(ctx, d.ID, p.RequestID, opt, answerer(req)); err != nil {
			return Outcome{}, err
		}
		if in.Background {
			return s.now(d.ID, fmt.Sprintf("answered %s with %s", p.RequestID, opt))
		}
		if d, err = s.waitPast(ctx, req, d.ID, p.RequestID); err != nil {
			return Outcome{}, err
		}
		return outcomeOf(d), nil
	}
	if in.OptionID != "" {
		return Outcome{}, control.Errorf(control.CodeUsage, "no permission request of session %s is pending", d.ID).
			WithHint("answer with text: it is the next turn")
	}
	if strings.TrimSpace(in.Answer) == "" {
		return Outcome{}, control.Errorf(control.CodeUsage, "answer is empty").WithHint("give the reply to the agent's question in answer")
	}
	return s.nextTurn(ctx, req, d.ID, in.Answer, in.Background)
}

// optionNamed is the id of the option answer names (its id or its name,
// any case), or "".
func optionNamed(opts []lease.PermissionOption, answer string) string {
	answer = strings.TrimSpace(answer)
	for _, o := range opts {
		if answer != "" && (strings.EqualFold(o.OptionID, answer) || strings.EqualFold(o.Name, answer)) {
			return o.OptionID
		}
	}
	return ""
}

// waitPast waits until request requestID of session id is no longer the
// one pending — then, like any wait, until the agent awaits again or the
// session ends.
func (s *server) waitPast(ctx context.Context, req *mcp.CallToolRequest, id, requestID string) (*lease.Delegation, error) {
	for {
		d, err := s.dlg.Find(id)
		if err != nil {
			return nil, err
		}
		if p := d.PendingPermission(); p == nil || p.RequestID != requestID || d.State.Terminal() {
			return s.wait(ctx, req, id, s.opts.SyncWait)
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-time.After(s.opts.Poll):
		}
	}
}

func (s *server) now(id, note string) (Outcome, error) {
	d, err := s.dlg.Find(id)
	if err != nil {
		return Outcome{}, err
	}
	o := outcomeOf(d)
	o.Notes = append(o.Notes, note)
	return o, nil
}

type closeArgs struct {
	DelegationID string `json:"delegation_id" jsonschema:"the session's delegation id (a unique prefix is enough)"`
}

func (s *server) closeSession(ctx context.Context, req *mcp.CallToolRequest, in closeArgs) (Outcome, error) {
	d, err := s.find(in.DelegationID)
	if err != nil {
		return Outcome{}, err
	}
	if err := s.dlg.EndSession(d.ID); err != nil {
		return Outcome{}, err
	}
	if d, err = s.wait(ctx, req, d.ID, time.Minute); err != nil {
		return Outcome{}, err
	}
	o := outcomeOf(d)
	if !d.State.Terminal() {
		o.Notes = append(o.Notes, "closing: delegate_output shows when it has ended")
	}
	return o, nil
}
