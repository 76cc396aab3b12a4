package executor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// admit handles INVITE.
func (e *Executor) admit(inv *control.Invite, peer string, byKey bool, delegator string) (*control.Accept, *control.ProtocolError) {
	if !e.openToAll() && !byKey && (inv.Auth == nil || !e.validToken(inv.Auth.Credential)) {
		hint := "pass the executor's token with --token-file FILE (or $AWCP_TOKEN; --token shows in ps)"
		if len(e.opts.AuthorizedDelegators) > 0 {
			hint = "pass the executor's token with --token-file FILE (or $AWCP_TOKEN), or have its operator add this delegator's key (`awcp-ctl peers self`) to its authorized delegators"
		}
		return nil, control.Errorf(control.CodeAuthFailed, "INVITE carries no valid credential").WithHint(hint)
	}
	if err := control.CheckCallChain(inv.CallChain); err != nil {
		return nil, control.Errorf(control.CodeDeclined, "INVITE's %v", err).
			WithHint(fmt.Sprintf("a call chain holds at most %d agent ids", control.MaxCallChain))
	}
	if pe := e.admitSession(inv); pe != nil {
		return nil, pe
	}
	if control.IsCircular(inv.CallChain, e.opts.AgentID) {
		e.log.Warn("circular call refused", "delegation", inv.DelegationID, "chain", control.FormatCallChain(inv.CallChain))
		return nil, control.CircularCall(e.opts.AgentID, inv.CallChain)
	}
	tname := ""
	if inv.Requirements != nil {
		tname = inv.Requirements.Transport
	}
	var tr control.ExecutorTransport
	if tname == "" {
		tr = e.opts.Transports[0]
		for _, t := range e.opts.Transports {
			if t.Available() == nil {
				tr = t
				break
			}
		}
	} else if tr = e.transport(tname); tr == nil {
		return nil, control.Errorf(control.CodeDeclined, "transport %q is not offered by this executor", tname).
			WithHint("use --transport " + e.opts.Transports[0].Name())
	}
	if err := tr.Available(); err != nil {
		return nil, control.AsProtocolError(err, control.CodeDepMissing)
	}

	mode := inv.Lease.AccessMode
	if !slices.Contains(e.opts.AccessModes, mode) {
		if mode == control.AccessRW && slices.Contains(e.opts.AccessModes, control.AccessRO) {
			mode = control.AccessRO
		} else {
			return nil, control.Errorf(control.CodeDeclined, "access mode %q is not allowed here", mode).
				WithHint("allowed: " + fmt.Sprint(e.opts.AccessModes))
		}
	}
	ttl := min(control.Seconds(inv.Lease.TTLSeconds), e.opts.MaxTTL)

	wd := e.workDir(inv.DelegationID)
	if err := checkWorkDir(wd); err != nil {
		return nil, err
	}
	now := e.store.Now()
	a := &lease.Assignment{
		Lease: lease.Lease{ID: inv.DelegationID, AccessMode: mode, Transport: tr.Name(),
			TTLSeconds: int64(ttl / time.Second), Dialect: inv.Dialect()},
		WorkDir: wd, Description: inv.Task.Description, Prompt: inv.Task.Prompt, Peer: peer, DelegatorKey: delegator,
		StartBy: now.Add(e.opts.StartTimeout), CallChain: inv.CallChain,
	}
	if delegator == "" && inv.Auth != nil && e.validToken(inv.Auth.Credential) {
		a.DelegatorToken = TokenDigest(inv.Auth.Credential)
	}
	if inv.Session != nil {
		a.Session, a.SessionKey = inv.Session.Protocol, inv.Session.Key
	}
	var retentionMs *int64
	if a.Dialect == control.DialectHead {
		for _, r := range inv.Environment.Resources {
			a.Resources = append(a.Resources, lease.Resource{Name: r.Name, Mode: r.Mode})
		}
		if inv.RetentionMs != nil && time.Duration(*inv.RetentionMs)*time.Millisecond < e.opts.Retention {
			a.Retention = max(time.Duration(*inv.RetentionMs)*time.Millisecond, time.Millisecond)
		}
		ms := int64(e.retention(a) / time.Millisecond)
		retentionMs = &ms
	}
	switch err := e.store.CreateAssignment(a, e.opts.MaxConcurrent); {
	case errors.Is(err, lease.ErrBusy):
		return nil, control.Errorf(control.CodeDeclined, "Maximum concurrent delegations reached (%d)", e.opts.MaxConcurrent).
			WithHint("Try again later when current tasks complete")
	case errors.Is(err, lease.ErrExists):
		return nil, control.Errorf(control.CodeDeclined, "delegation %s was already invited here", inv.DelegationID).
			WithHint("use a new delegation id")
	case err != nil:
		e.log.Error("store assignment", "delegation", inv.DelegationID, "err", err)
		return nil, control.Errorf(control.CodeDeclined, "the executor cannot record the delegation")
	}
	e.sched.Kick()
	acc := &control.Accept{
		BaseMessage:     control.Header(control.TypeAccept, inv.DelegationID),
		RetentionMs:     retentionMs,
		ExecutorWorkDir: control.ExecutorWorkDir{Path: wd},
		ExecutorConstraints: &control.ExecutorConstraints{
			AcceptedAccessMode: mode,
			MaxTTLSeconds:      int64(e.opts.MaxTTL / time.Second),
			SandboxProfile:     e.opts.Sandbox,
			Session:            a.Session,
		},
	}
	if _, reverse := tr.(TunnelHost); reverse && inv.Requirements != nil && inv.Requirements.Connect == control.ConnectReverse {
		// The delegator will open the mount's connections to this port.
		acc.ExecutorConstraints.Connect = control.ConnectReverse
	}
	return acc, nil
}

// checkWorkDir refuses a work dir that exists and is not an empty directory.
func checkWorkDir(wd string) *control.ProtocolError {
	info, err := os.Lstat(wd)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || !info.IsDir() {
		return control.Errorf(control.CodeWorkdirDenied, "the work directory for this delegation is not usable")
	}
	f, err := os.Open(wd)
	if err != nil {
		return control.Errorf(control.CodeWorkdirDenied, "the work directory for this delegation is not usable")
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); !errors.Is(err, io.EOF) {
		return control.Errorf(control.CodeWorkdirDenied, "the work directory for this delegation is not empty").
			WithHint("use a new delegation id, or clear the executor's work root")
	}
	return nil
}
