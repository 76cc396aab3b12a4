package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// A session delegation (docs/acp-sessions.md) lends a directory for an
// ACP session rather than a task: the delegator's gateway (`awcp-ctl
// acp`) relays an editor's ACP connection to the executor's agent over a
// channel of the delegation's own, for as many turns as the editor sends.
//
// The INVITE asks for it with session: {protocol: "acp", key}; an
// executor that grants it says so in ACCEPT's executorConstraints.session.
// One that does not know the extension ignores it, and the delegator,
// finding no grant in ACCEPT, ends the delegation (DEP_MISSING) rather
// than run a task nobody asked for. Once the delegation runs, the
// delegator opens the channel: GET /awcp/tasks/{id}/acp with Upgrade:
// awcp-acp and the key in SessionKeyHeader (the bearer token too, where
// the executor has one); after 101 the connection carries ACP's NDJSON
// both ways. The channel is opened by the delegator because it is the
// one direction every delegation has — INVITE, START and the events take
// it, behind NAT as elsewhere, over both transports — and it ends with
// the delegation.
const (
	// SessionACP is a session with the executor's ACP agent: an editor's
	// protocol over the session's channel.
	SessionACP = "acp"
	// SessionRounds is a session of rounds (the reference's CONTINUE and
	// CLOSE) with a task agent: each prompt after the first is a round on
	// the still-lent workspace. No channel: the rounds go as messages.
	SessionRounds = "rounds"
	// SessionUpgrade is the channel request's Upgrade protocol.
	SessionUpgrade = "awcp-acp"
	// SessionKeyHeader carries the INVITE's session key on the channel
	// request: only the delegator that invited knows it.
	SessionKeyHeader = "AWCP-Session-Key"
	// sessionKeyBytes is a session key's size before hex.
	sessionKeyBytes = 32
)

// SessionRequest is an INVITE's session extension.
type SessionRequest struct {
	Protocol string `json:"protocol"`
	// Key is a secret, made for this delegation: the channel request
	// must carry it. Never logged.
	Key string `json:"key"`
}

// NewSessionRequest asks for an ACP session with a fresh key.
func NewSessionRequest() *SessionRequest {
	b := make([]byte, sessionKeyBytes)
	rand.Read(b)
	return &SessionRequest{Protocol: SessionACP, Key: hex.EncodeToString(b)}
}

// Check validates a session request as received.
func (s *SessionRequest) Check() error {
	if s.Protocol != SessionACP && s.Protocol != SessionRounds {
		return fmt.Errorf("session protocol %q is not offered here (only %q and %q)", s.Protocol, SessionACP, SessionRounds)
	}
	if b, err := hex.DecodeString(s.Key); err != nil || len(b) != sessionKeyBytes {
		return fmt.Errorf("the session key must be %d bytes in hex", sessionKeyBytes)
	}
	return nil
}

// RenewPath is where a session delegation's lease is renewed, and
// RenewRequest and RenewResponse what goes there (docs/acp-sessions.md):
// a session lives as long as it is used, where a task's lease is fixed at
// START. The executor grants at most its own cap from now.
const RenewPath = "/awcp/tasks/{id}/renew"

// RenewRequest asks for a session's lease to run ttlSeconds from now.
// Credential, for a live mount, replaces START's for the mount's next
// connections (the old certificate expires with the old lease). Secret.
type RenewRequest struct {
	SessionKey string      `json:"sessionKey"`
	TTLSeconds int64       `json:"ttlSeconds"`
	Credential *Credential `json:"credential,omitempty"`
}

// RenewResponse is the lease's end as granted.
type RenewResponse struct {
	OK        bool   `json:"ok"`
	ExpiresAt string `json:"expiresAt"`
}

// Renewer is a transport whose access is bounded by the lease's end and
// can be moved with it: the delegator's gives a credential valid until
// the new end (nil if it needs none), the executor's takes it.
type Renewer interface {
	Renew(ctx context.Context, d Lent) (*Credential, error)
}

// CredentialTaker is an executor's transport that takes a renewed
// credential for delegation id's next connections.
type CredentialTaker interface {
	TakeCredential(id string, c *Credential) error
}
