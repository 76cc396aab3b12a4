package delegator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// handshake does INVITE → ACCEPT → START, and returns the delegation's
// event stream, followed from the moment START is sent (nil if it never
// was). Its steps, each a function with its own errors: the invitation
// written; the connection chosen (the executor dials this machine, or
// this machine opens the way); the peer invited (the next of its
// fallbacks when one is full; archive when auto's live mount cannot be
// had); the acceptance checked and recorded; the transport prepared and
// the task started. A new kind of peer or transport is a step here or an
// implementation of control.DelegatorTransport, not a branch in between.
func (d *Delegator) handshake(ctx context.Context, del *lease.Delegation) (*stream, error) {
	want := del.Dialect
	inv := invitation(del)
	del, err := d.chooseConnection(ctx, del)
	if err != nil {
		return nil, err
	}
	inv.Requirements.Connect = del.Connect
	if _, err := d.store.FireDelegation(del.ID, lease.SendInvite, "INVITE sent", nil); err != nil {
		return nil, err
	}
	del, pc, acc, err := d.invite(ctx, del, inv)
	if err != nil {
		return nil, err
	}
	if err := d.checkAccept(del, inv, acc); err != nil {
		return nil, err
	}
	if del, err = d.recordAccept(del.ID, want, acc); err != nil {
		return nil, err
	}
	d.sched.Kick()
	return d.start(ctx, del, pc)
}

// invitation is del's INVITE. In auto, it carries both dialects' members;
// each executor reads its own and ignores the others.
func invitation(del *lease.Delegation) *control.Invite {
	inv := &control.Invite{
		BaseMessage:  control.Header(control.TypeInvite, del.ID),
		Task:         control.Task{Description: del.Description, Prompt: del.Prompt},
		Lease:        control.InviteLease{TTLSeconds: del.TTLSeconds, AccessMode: del.AccessMode},
		Requirements: &control.Requirements{Transport: del.Transport},
		CallChain:    del.CallChain,
	}
	if del.Session != "" {
		inv.Session = &control.SessionRequest{Protocol: del.Session, Key: del.SessionKey}
	}
	if del.Dialect != control.DialectHead {
		inv.Workspace = &control.Workspace{ExportName: del.ExportName}
	}
	if del.Dialect != control.DialectSeed {
		ms := int64(headRetention / time.Millisecond)
		inv.RetentionMs = &ms
		inv.Environment = &control.Environment{Resources: []control.Resource{{Name: control.ResourceWorkspace, Type: "fs", Mode: del.AccessMode}}}
	}
	return inv
}

// chooseConnection decides who opens the data plane's connection: the
// live mount on auto, and the git transport, go in reverse when the
// executor cannot reach this machine's SSH port (reachBack). The choice
// is kept in the record and said in its notes.
func (d *Delegator) chooseConnection(ctx context.Context, del *lease.Delegation) (*lease.Delegation, error) {
	if !(del.Transport == control.TransportSSHFS && del.AutoTransport || del.Transport == control.TransportGit) || del.Connect != "" {
		return del, nil
	}
	connect, note := d.reachBack(ctx, del)
	if connect == "" {
		return del, nil
	}
	if del.Transport == control.TransportGit {
		note = strings.Replace(strings.TrimPrefix(note, "transport auto: "), "the live mount runs in reverse", "the git transport runs in reverse", 1)
	}
	if _, err := d.store.UpdateDelegation(del.ID, func(del *lease.Delegation) error {
		del.Connect = connect
		del.Notes = append(del.Notes, note)
		return nil
	}); err != nil {
		return nil, err
	}
	d.note(del.ID, note)
	d.log.Info("live mount in reverse", "delegation", del.ID, "why", note)
	del.Connect = connect
	return del, nil
}

// invite sends inv to del's peer, and to the next of its fallbacks while
// each declines for want of a slot; an executor that cannot mount for
// auto's live mount is invited again for the archive. It returns the
// delegation as it now stands (its peer may have changed), the client of
// the peer that accepted, and the ACCEPT.
func (d *Delegator) invite(ctx context.Context, del *lease.Delegation, inv *control.Invite) (*lease.Delegation, *PeerClient, *control.Accept, error) {
	id, pc := del.ID, d.peer(del)
	acc, err := pc.Invite(ctx, inv)
	for declinedFull(err) && len(del.PeerFallbacks) > 0 {
		if del, err = d.nextPeer(id, err); err != nil {
			return nil, nil, nil, err
		}
		pc = d.peer(del)
		acc, err = pc.Invite(ctx, inv)
	}
	var pe *control.ProtocolError
	// (Not a session's refusal: an executor whose agent holds no
	// session refuses it on any transport.)
	if errors.As(err, &pe) && pe.Code == control.CodeDepMissing && del.AutoTransport && del.Transport == control.TransportSSHFS && del.Session == "" {
		if err := d.fallBackToArchive(del, inv, pe); err != nil {
			return nil, nil, nil, err
		}
		acc, err = pc.Invite(ctx, inv)
	}
	if err != nil {
		// Ended while the INVITE was on its way (the follow stopped,
		// cutting the request): the executor may have accepted it all
		// the same, the end's cancel having come before it. Tell it.
		if cur, gerr := d.store.Delegation(id); gerr == nil && cur.State.Terminal() && ctx.Err() != nil {
			d.tellCutInvite(pc, control.NewError(id, control.CodeCancelled, "the delegation ended while it was being invited", ""))
		}
		return nil, nil, nil, err
	}
	return del, pc, acc, nil
}

// tellCutInvite tells the executor that a delegation whose INVITE was cut
// off has ended. The ERROR can overtake the INVITE there — two requests on
// two connections — and find no delegation yet: while the executor
// answers that it knows none, the INVITE may still be in its hands, so it
// is told again, every 250 ms for up to 2 s. An executor that accepted
// would otherwise hold the slot until its START deadline (2 minutes).
func (d *Delegator) tellCutInvite(pc *PeerClient, m *control.Error) {
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := pc.SendError(ctx, m)
		cancel()
		var pe *control.ProtocolError
		if err == nil || !errors.As(err, &pe) || time.Now().After(deadline) {
			if err != nil {
				d.log.Debug("tell executor", "delegation", m.DelegationID, "err", err)
			}
			return
		}
	}
}

// fallBackToArchive turns auto's live mount, which the executor cannot
// make (why), into the archive, and says so — unless the tree is past
// what the archive takes (it was admitted for a live mount, which copies
// nothing).
func (d *Delegator) fallBackToArchive(del *lease.Delegation, inv *control.Invite, why *control.ProtocolError) error {
	id := del.ID
	own := ExportRequest{Limits: AdmissionLimits{MaxTotalBytes: del.Limits[0], MaxFileCount: del.Limits[1], MaxFileBytes: del.Limits[2]}}
	if _, _, aerr := Admit(del.LocalDir, own.limits(d.opts.Admission, control.TransportArchive), del.Policy.Hide); aerr != nil {
		d.notifyPeer(del, control.NewError(id, control.CodeDeclined, "the workspace is too large for an archive", ""))
		ape := control.AsProtocolError(aerr, control.CodeWorkspaceTooLarge)
		ape.Message = fmt.Sprintf("the executor cannot mount (%s), and the archive it would fall back to refuses: %s", why.Message, ape.Message)
		return ape
	}
	note := fmt.Sprintf("transport auto: the executor cannot mount (%s); fell back to archive", why.Message)
	if _, err := d.store.UpdateDelegation(id, func(del *lease.Delegation) error {
		del.Transport, del.Connect = control.TransportArchive, ""
		del.Notes = append(del.Notes, note)
		return nil
	}); err != nil {
		return err
	}
	d.note(id, note) // now, not only at the end
	inv.Requirements.Transport, inv.Requirements.Connect = control.TransportArchive, ""
	return nil
}

// checkAccept refuses an ACCEPT that does not agree to what inv asked
// (telling the executor, which holds a slot for it): an ACP session, a
// reverse live mount.
func (d *Delegator) checkAccept(del *lease.Delegation, inv *control.Invite, acc *control.Accept) error {
	id := del.ID
	if inv.Session != nil && inv.Session.Protocol == control.SessionRounds && acc.RetentionMs != nil &&
		(acc.ExecutorConstraints == nil || acc.ExecutorConstraints.Session == "") {
		// A head executor that does not read the extension: the
		// reference's, whose development line works in rounds and says
		// so only with round_done. The session goes on; if it ends at
		// its first turn, the executor knew no rounds (noted then).
		return nil
	}
	if inv.Session != nil && (acc.ExecutorConstraints == nil || acc.ExecutorConstraints.Session != inv.Session.Protocol) {
		// An executor that does not know sessions took a task: not asked for.
		d.notifyPeer(del, control.NewError(id, control.CodeDeclined, "the delegator asked for a session ("+inv.Session.Protocol+")", ""))
		if inv.Session.Protocol == control.SessionRounds {
			return control.Errorf(control.CodeDepMissing, "the executor takes neither ACP sessions nor rounds").
				WithHint("delegate a task (awcp-ctl export DIR --prompt TEXT)")
		}
		return control.Errorf(control.CodeDepMissing, "the executor does not hold ACP sessions").
			WithHint("use an awcp-fs started with --agent-acp")
	}
	if inv.Requirements.Connect == control.ConnectReverse && (acc.ExecutorConstraints == nil || acc.ExecutorConstraints.Connect != control.ConnectReverse) {
		// ACCEPT did not agree: the executor would dial, and cannot.
		d.notifyPeer(del, control.NewError(id, control.CodeDeclined, "the delegator needs a reverse live mount", ""))
		return control.Errorf(control.CodeDepMissing, "the executor does not take reverse connections for a live mount").
			WithHint("use --transport archive, or an awcp-fs that offers the reverse live mount")
	}
	return nil
}

// recordAccept keeps what the ACCEPT says — the dialect the executor
// speaks (want: the one asked), its work dir, an access or a lease it cut
// — and the lease's expiry from now.
func (d *Delegator) recordAccept(id, want string, acc *control.Accept) (*lease.Delegation, error) {
	// A head executor says how long it keeps the result; a seed one
	// has no such member.
	dialect := control.DialectSeed
	if acc.RetentionMs != nil || want == control.DialectHead {
		dialect = control.DialectHead
	}
	d.log.Info("executor accepted", "delegation", id, "dialect", dialect)
	now := d.store.Now()
	del, err := d.store.FireDelegation(id, lease.ReceiveAccept, "ACCEPT received", func(del *lease.Delegation) error {
		if dialect == control.DialectHead && want != control.DialectHead {
			del.Notes = append(del.Notes, "the executor speaks the head dialect (the reference implementation's later wire): spoke it")
		}
		del.Dialect = dialect
		del.ExecutorWorkDir = acc.ExecutorWorkDir.Path
		if c := acc.ExecutorConstraints; c != nil {
			if c.AcceptedAccessMode != "" && c.AcceptedAccessMode != del.AccessMode {
				del.Notes = append(del.Notes, fmt.Sprintf("the executor downgraded access from %s to %s", del.AccessMode, c.AcceptedAccessMode))
				del.AccessMode = c.AcceptedAccessMode
			}
			if c.MaxTTLSeconds > 0 && c.MaxTTLSeconds < del.TTLSeconds {
				capped := control.Seconds(c.MaxTTLSeconds)
				if del.Session != "" {
					// Not a limit a session meets: its lease is renewed.
					del.Notes = append(del.Notes, fmt.Sprintf("the executor's leases last %s at most: the session's is renewed for as long as it is in use", capped))
				} else {
					del.Notes = append(del.Notes, fmt.Sprintf("the executor capped the lease at %s (%s asked)", capped, control.Seconds(del.TTLSeconds)))
				}
				del.TTLSeconds = c.MaxTTLSeconds
			}
		}
		del.ExpiresAt = now.Add(control.Seconds(del.TTLSeconds))
		return nil
	})
	if err != nil {
		// Ended while the INVITE was on its way: the cancel may have
		// reached the executor before it, which then accepted and holds
		// a slot the end never released. Release it now.
		if cur, gerr := d.store.Delegation(id); gerr == nil && cur.State.Terminal() {
			code, msg := control.CodeCancelled, "the delegation ended while it was being invited"
			if cur.Failure != nil && cur.Failure.Code != "" {
				code = cur.Failure.Code
			}
			d.notifyPeer(cur, control.NewError(id, code, msg, ""))
		}
		return nil, err
	}
	return del, nil
}

// start prepares del's transport and sends START through pc, following
// the delegation's events from the moment START is sent.
func (d *Delegator) start(ctx context.Context, del *lease.Delegation, pc *PeerClient) (*stream, error) {
	id := del.ID
	tr := d.transport(del)
	if tr == nil {
		return nil, control.Errorf(control.CodeDepMissing, "the %s transport is not available in this process", del.Transport)
	}
	info, err := tr.Prepare(ctx, lent(del))
	if err != nil {
		return nil, err
	}
	st := &control.Start{
		BaseMessage: control.Header(control.TypeStart, id),
		Lease:       control.StartLease{ExpiresAt: control.Timestamp(del.ExpiresAt), AccessMode: del.AccessMode},
		WorkDir:     *info,
		Dialect:     del.Dialect,
	}
	if info.WorkspaceFile != "" {
		// Sent once: the packed workspace is of no use after START.
		defer os.Remove(info.WorkspaceFile)
	}
	if _, err := d.store.FireDelegation(id, lease.SendStart, "START sent", nil); err != nil {
		return nil, err
	}
	started := make(chan struct{})
	events := d.startFollowing(ctx, id, started)
	err = pc.Start(ctx, st)
	close(started)
	return events, err
}
