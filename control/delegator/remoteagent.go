package delegator

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// PeerPrefixA2A names an A2A agent as a delegation's peer: --peer
// a2a:URL, the agent's base URL (its card at URL/.well-known/agent-card.json).
const PeerPrefixA2A = "a2a:"

// A2APeer is an A2A agent as a delegation's peer, asked by the core as an
// executor is asked through PeerClient. It is declared here and
// implemented by a2apeer (Options.A2A), so the core imports no A2A SDK.
type A2APeer interface {
	// Keep takes the workspace ZIP packed for del (file ws): it is sent
	// with the task, and the result is built on it.
	Keep(del *lease.Delegation, ws string) error
	// Follow sends del's task if it was not sent yet, then gives the
	// task's events as the delegation's, numbered from after+1, until the
	// task ends or ctx does; record keeps the agent's ids for the task
	// once it names them. A *control.ProtocolError ends the delegation;
	// any other error is retried.
	Follow(ctx context.Context, del *lease.Delegation, after uint64, record func(taskID, contextID string) error, fn func(seq uint64, ev *control.Event) error) error
	// Permit answers the permission the task waits on.
	Permit(ctx context.Context, del *lease.Delegation, requestID, optionID string) error
	// Cancel ends the task at the agent.
	Cancel(ctx context.Context, del *lease.Delegation) error
	// Forget drops what Keep kept, once the delegation has ended.
	Forget(id string)
}

// a2aPeerURL is the agent URL of --peer a2a:URL, checked.
func a2aPeerURL(peer string, plain bool) (string, error) {
	raw := strings.TrimPrefix(peer, PeerPrefixA2A)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", control.Errorf(control.CodeUsage, "--peer %s: not an agent's URL", peer).
			WithHint("give the A2A agent's base URL: --peer a2a:https://host:port")
	}
	if u.Scheme == "http" && !plain {
		return "", control.Errorf(control.CodeUsage, "--peer %s is plain HTTP: the task and the workspace would travel in clear", peer).
			WithHint("use https://, or say --plain-http to accept it")
	}
	return raw, nil
}

// handshakeA2A is the handshake with an A2A agent: the task and the
// workspace go in one message, so the steps an executor answers (INVITE,
// ACCEPT, START) are this delegator's alone, recorded as it passes them,
// and the agent's answer is the task's first event.
func (d *Delegator) handshakeA2A(ctx context.Context, del *lease.Delegation) (*stream, error) {
	if d.opts.A2A == nil {
		return nil, control.Errorf(control.CodeDepMissing, "this process cannot speak to A2A agents")
	}
	tr := d.transport(del)
	if tr == nil {
		return nil, control.Errorf(control.CodeDepMissing, "the %s transport is not available in this process", del.Transport)
	}
	id := del.ID
	if _, err := d.store.FireDelegation(id, lease.SendInvite, "A2A: the task is being packed for "+del.Peer, nil); err != nil {
		return nil, err
	}
	info, err := tr.Prepare(ctx, lent(del))
	if err != nil {
		return nil, err
	}
	if err := d.opts.A2A.Keep(del, info.WorkspaceFile); err != nil {
		return nil, fmt.Errorf("keep the workspace for the A2A agent: %w", err)
	}
	now := d.store.Now()
	if _, err := d.store.FireDelegation(id, lease.ReceiveAccept, "A2A: an agent takes its task as it is sent", func(del *lease.Delegation) error {
		del.ExpiresAt = now.Add(control.Seconds(del.TTLSeconds))
		return nil
	}); err != nil {
		return nil, err
	}
	if _, err := d.store.FireDelegation(id, lease.SendStart, "A2A: message/stream sent", nil); err != nil {
		return nil, err
	}
	d.sched.Kick()
	return d.startFollowing(ctx, id, nil), nil
}

// recordA2ATask keeps the agent's ids for delegation id's task.
func (d *Delegator) recordA2ATask(id string) func(taskID, contextID string) error {
	return func(taskID, contextID string) error {
		_, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
			if del.PeerTaskID == taskID && del.PeerContextID == contextID {
				return errUnchanged
			}
			del.PeerTaskID, del.PeerContextID = taskID, contextID
			del.Notes = append(del.Notes, fmt.Sprintf("A2A task %s (context %s) at %s", taskID, contextID, del.Peer))
			return nil
		})
		if errors.Is(err, errUnchanged) {
			return nil
		}
		return err
	}
}
