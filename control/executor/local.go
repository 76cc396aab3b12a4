package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/lease"
)

// This file is the executor as another face than POST /awcp drives it —
// the A2A one (control/executor/a2aface): a client it authenticated by the
// same rules, a delegation admitted by the same admit and started by the
// same start as an INVITE and a START of the archive transport, its
// events as stored, its end as POST /awcp/cancel ends it. Nothing here
// decides anything the AWCP face does not.

// MountA2A serves h, the executor's A2A face (a2aface), at path beside
// AWCP's endpoints, and has the agent card declare it (A2A's url, the
// JSON-RPC binding, the security schemes the executor takes). Called
// before Serve.
func (e *Executor) MountA2A(path string, h http.Handler) {
	e.a2a = &mountedFace{path: path, handler: h}
}

// Caller is a client another face authenticated, by Authenticate.
type Caller struct {
	Peer  string // its address
	Key   string // the identity key its TLS certificate shows; "" if none
	ByKey bool   // Key is one the operator authorized
	// Token is the bearer token that admitted it, if one did: the INVITE
	// the face makes for it carries it, as a delegator's would.
	Token string
}

// mayTouch reports whether c may watch, steer or end delegation a: c
// shows the key of the client that made it, or where that client showed
// no key, the token that admitted it. A delegation nothing admitted (an
// executor open to all; the reference's dialect binds nothing) is
// anyone's who reaches the executor.
func (c Caller) mayTouch(a *lease.Assignment) bool {
	return madeBy(a.DelegatorKey, a.DelegatorToken, c)
}

// MayTouch reports whether c may see, steer or end what the caller made
// created (an A2A task): by made's key where it showed one, else by its
// token.
func (c Caller) MayTouch(made Caller) bool {
	return madeBy(made.Key, TokenDigest(made.Token), c)
}

// madeBy is the one rule of ownership: a thing made by a client showing
// key (else a token of digest tokenDigest) is that client's alone.
func madeBy(key, tokenDigest string, c Caller) bool {
	switch {
	case key != "":
		return constantTimeEqual(c.Key, key)
	case tokenDigest != "":
		return c.Token != "" && constantTimeEqual(TokenDigest(c.Token), tokenDigest)
	}
	return true
}

// TokenDigest is what a delegation keeps of the token that admitted it
// (lease.Assignment.DelegatorToken): its SHA-256, so that the store holds
// no credential; "" for none.
func TokenDigest(tok string) string {
	if tok == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// Authenticate checks r's credentials as POST /awcp does before it reads
// a body: an executor open to all takes anyone; else a delegator key the
// operator authorized (its TLS certificate), or a valid bearer token. A
// refusal is counted with the AWCP face's.
func (e *Executor) Authenticate(r *http.Request) (Caller, bool) {
	c, ok := e.credentials(r)
	if !ok {
		e.opts.Metrics.Refused(control.CodeAuthFailed)
	}
	return c, ok
}

// credentials are who sent r, and whether they may send what needs a
// credential: anyone to an executor open to all, else a delegator key the
// operator authorized or a valid bearer token.
func (e *Executor) credentials(r *http.Request) (Caller, bool) {
	c := Caller{Peer: r.RemoteAddr, Key: delegatorKey(r), ByKey: e.keyAuthorized(r)}
	if e.openToAll() || c.ByKey {
		return c, true
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && e.validToken(tok) {
		c.Token = tok
		return c, true
	}
	return c, false
}

// assignmentOf is delegation id, if c made it (or nothing bound it, as an
// executor open to all): as a request about it is checked (mayTouch).
func (e *Executor) assignmentOf(c Caller, id string) (*lease.Assignment, error) {
	a, err := e.store.Assignment(id)
	if err != nil {
		return nil, fmt.Errorf("unknown delegation %s", id)
	}
	if !c.mayTouch(a) {
		return nil, fmt.Errorf("delegation %s was made by another delegator", id)
	}
	return a, nil
}

// MaxBodyBytes is the most a client with a valid credential may send in
// one message (its workspace included).
func (e *Executor) MaxBodyBytes() int64 { return e.opts.MaxBodyBytes }

// NewSpool is a file in the executor's incoming directory that a workspace
// sent as base64 is decoded into as it is written, its SHA-256 taken.
func (e *Executor) NewSpool() (*control.SpoolFile, error) {
	return control.NewSpoolFile(e.incomingDir(), 0)
}

// DelegateArchive starts delegation inv.DelegationID for c with the
// workspace ZIP in ws (checked against its own checksum, as a START's is):
// inv is admitted as an INVITE from c would be, then started as a START of
// the archive transport with the lease it was granted. ws is the
// caller's to remove once this returns.
func (e *Executor) DelegateArchive(ctx context.Context, c Caller, inv *control.Invite, ws control.Spooled) *control.ProtocolError {
	inv.Version, inv.Type = control.Version, control.TypeInvite
	inv.Requirements = &control.Requirements{Transport: control.TransportArchive}
	if c.Token != "" {
		inv.Auth = &control.Auth{Type: "bearer", Credential: c.Token}
	}
	acc, pe := e.admit(inv, c.Peer, c.ByKey, c.Key)
	if pe != nil {
		e.opts.Metrics.Refused(pe.Code)
		return pe
	}
	ttl := control.Seconds(inv.Lease.TTLSeconds)
	mode := inv.Lease.AccessMode
	if ec := acc.ExecutorConstraints; ec != nil {
		if ec.MaxTTLSeconds > 0 {
			ttl = min(ttl, control.Seconds(ec.MaxTTLSeconds))
		}
		if ec.AcceptedAccessMode != "" {
			mode = ec.AcceptedAccessMode
		}
	}
	st := &control.Start{
		BaseMessage: control.BaseMessage{Version: control.Version, Type: control.TypeStart, DelegationID: inv.DelegationID},
		Lease:       control.StartLease{ExpiresAt: control.Timestamp(e.store.Now().Add(ttl)), AccessMode: mode},
		WorkDir: control.WorkDirInfo{Transport: control.TransportArchive, Checksum: ws.Sum,
			WorkspaceFile: ws.File, Received: &ws},
	}
	return e.start(ctx, st)
}

// Follow calls fn with each event of delegation id numbered after after,
// in order, until the terminal one (done or error) has been given, fn
// fails, or ctx ends. The caller's own key must be the delegation's
// (made by Caller c), as for GET /awcp/tasks/{id}/events.
func (e *Executor) Follow(ctx context.Context, c Caller, id string, after uint64, fn func(seq uint64, ev *control.Event) error) error {
	if _, err := e.assignmentOf(c, id); err != nil {
		return err
	}
	const page = 64
	for {
		wake := e.watch(id)
		evs, err := e.store.EventsAfter(id, after, page)
		if err != nil {
			return fmt.Errorf("read the events of %s: %w", id, err)
		}
		for _, sev := range evs {
			var ev control.Event
			if err := json.Unmarshal(sev.Data, &ev); err != nil {
				return fmt.Errorf("event %d of %s: %w", sev.Seq, id, err)
			}
			if err := fn(sev.Seq, &ev); err != nil {
				return err
			}
			after = sev.Seq
			if ev.Type == control.EventDone || ev.Type == control.EventError {
				return nil
			}
		}
		if len(evs) == page {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

// ResultFile opens the result ZIP of delegation id, kept until its events
// are past retention; fs.ErrNotExist if it has none (read-only, or nothing
// came of it).
func (e *Executor) ResultFile(id string) (*os.File, error) {
	return os.Open(e.resultFile(id))
}

// Cancel ends delegation id for c as POST /awcp/cancel/{id} does.
func (e *Executor) Cancel(ctx context.Context, c Caller, id string) error {
	a, err := e.assignmentOf(c, id)
	if err != nil {
		return err
	}
	if !a.Active() {
		return nil
	}
	return e.end(ctx, id, lease.Cancel, control.Errorf(control.CodeCancelled, "the delegation was cancelled"))
}

// Answer gives the choice of c to the pending permission request
// requestID of delegation id, as POST /awcp/tasks/{id}/permission does.
func (e *Executor) Answer(c Caller, id, requestID, optionID string) error {
	if _, err := e.assignmentOf(c, id); err != nil {
		return err
	}
	return e.answer(id, requestID, optionID)
}

// ErrNoSuchPermission is Answer's error for a request that is not
// pending: answered already, timed out, or never asked.
var ErrNoSuchPermission = errNoSuchAsk
