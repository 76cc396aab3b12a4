//go:build linux

package delegator_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/delegator"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/executortest"
)

// Before anything of a delegation reaches an executor found on the
// network — the INVITE and its token, the probe — the executor proves it
// holds the key trusted for it. One that answers at the trusted
// executor's address with another key gets nothing; the trusted one is
// served.
func TestTokenGoesOnlyToTheTrustedKey(t *testing.T) {
	_, real, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	const id = "aaaaaaaa-0000-4000-8000-000000000001"
	impostor := executortest.New(t, "true", func(o *executor.Options) {
		o.Tokens, o.AgentID, o.IdentityKey = []string{"s3cret"}, id, other
	})
	invite := &control.Invite{BaseMessage: control.Header(control.TypeInvite, "dlg_identity"),
		Task: control.Task{Description: "d", Prompt: "p"}, Lease: control.InviteLease{TTLSeconds: 600, AccessMode: control.AccessRW},
		Workspace: &control.Workspace{ExportName: "awcp/dlg_identity"}, Auth: &control.Auth{Type: "bearer", Credential: "s3cret"}}
	pc := &delegator.PeerClient{BaseURL: impostor.URL(), Token: "s3cret", AgentID: id, Key: control.IdentityPublic(real)}
	if _, err := pc.Invite(context.Background(), invite); err == nil || !strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("INVITE to an executor showing another key: %v", err)
	}
	if _, err := impostor.Store.Assignment("dlg_identity"); err == nil {
		t.Fatal("the impostor received the INVITE")
	}
	if _, _, err := pc.Probe(context.Background(), 22); err == nil {
		t.Fatal("a probe (with the token) went to the impostor")
	}

	trusted := executortest.New(t, "true", func(o *executor.Options) {
		o.Tokens, o.AgentID, o.IdentityKey = []string{"s3cret"}, id, real
	})
	pc = &delegator.PeerClient{BaseURL: trusted.URL(), Token: "s3cret", AgentID: id, Key: control.IdentityPublic(real)}
	if _, err := pc.Invite(context.Background(), invite); err != nil {
		t.Fatalf("INVITE to the trusted executor: %v", err)
	}
}
