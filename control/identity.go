package control

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	gossh "golang.org/x/crypto/ssh"
)

// An executor's identity, for LAN discovery: names and agent ids on mDNS
// are claims anyone can make, so each executor holds an Ed25519 key (in
// its state dir), shows it in its manifest, and proves it holds it by
// signing a delegator's challenge (GET IdentityPath?nonce=N) before the
// delegator sends it anything secret: a token, a START's credential.

// IdentityPath is the executor's endpoint of the challenge.
const IdentityPath = "/awcp/identity"

// IdentityProof is the executor's answer to a challenge.
type IdentityProof struct {
	Key       string `json:"key"`       // the public key, in authorized_keys form
	Signature string `json:"signature"` // base64 of the signature of identityMessage
}

// identityMessage is what the executor signs: the protocol's label, the
// delegator's nonce and the agent id it answers as.
func identityMessage(nonce, agentID string) []byte {
	return []byte("awcp-identity-v1\n" + nonce + "\n" + agentID)
}

// NewIdentityNonce is a fresh challenge.
func NewIdentityNonce() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ValidIdentityNonce reports a nonce as NewIdentityNonce makes them (and
// of no other length: an executor signs nothing else).
func ValidIdentityNonce(n string) bool {
	if len(n) != 48 {
		return false
	}
	_, err := hex.DecodeString(n)
	return err == nil
}

// SignIdentity answers nonce as agentID with key.
func SignIdentity(key ed25519.PrivateKey, nonce, agentID string) (IdentityProof, error) {
	pub, err := gossh.NewPublicKey(key.Public())
	if err != nil {
		return IdentityProof{}, err
	}
	sig := ed25519.Sign(key, identityMessage(nonce, agentID))
	return IdentityProof{Key: IdentityKeyText(pub), Signature: base64.StdEncoding.EncodeToString(sig)}, nil
}

// ParseIdentityKey checks key is a public key in authorized_keys form.
func ParseIdentityKey(key string) (gossh.PublicKey, error) {
	pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return nil, fmt.Errorf("%q is not a public key in authorized_keys form (ssh-ed25519 AAAA…): %v", key, err)
	}
	return pub, nil
}

// IdentityKeyText is pub in authorized_keys form, one line.
func IdentityKeyText(pub gossh.PublicKey) string {
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub)))
}

// IdentityPublic is key's public half in authorized_keys form.
func IdentityPublic(key ed25519.PrivateKey) string {
	if len(key) != ed25519.PrivateKeySize {
		return "" // none, or not a key
	}
	pub, err := gossh.NewPublicKey(key.Public())
	if err != nil {
		return ""
	}
	return IdentityKeyText(pub)
}

// Fingerprint is a key's SHA256 fingerprint as ssh-keygen -l shows it; the
// key itself if it is not one.
func Fingerprint(key string) string {
	pub, _, _, _, err := gossh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return key
	}
	return gossh.FingerprintSHA256(pub)
}

// ErrIdentity is a proof that does not hold.
var ErrIdentity = errors.New("the executor did not prove it holds the key trusted for it")

// VerifyIdentity checks proof against the pinned key: the same key, and a
// valid signature of nonce as agentID.
func VerifyIdentity(pinned, nonce, agentID string, proof IdentityProof) error {
	want, _, _, _, err := gossh.ParseAuthorizedKey([]byte(pinned))
	if err != nil {
		return fmt.Errorf("the trusted key %q is not a public key: %w", pinned, err)
	}
	if proof.Key != IdentityKeyText(want) {
		return fmt.Errorf("%w: it shows key %s, not %s", ErrIdentity, Fingerprint(proof.Key), gossh.FingerprintSHA256(want))
	}
	cpk, ok := want.(gossh.CryptoPublicKey)
	if !ok {
		return fmt.Errorf("%w: not an Ed25519 key", ErrIdentity)
	}
	edpub, ok := cpk.CryptoPublicKey().(ed25519.PublicKey)
	if !ok {
		return fmt.Errorf("%w: not an Ed25519 key", ErrIdentity)
	}
	sig, err := base64.StdEncoding.DecodeString(proof.Signature)
	if err != nil || !ed25519.Verify(edpub, identityMessage(nonce, agentID), sig) {
		return fmt.Errorf("%w: the signature of the challenge does not verify", ErrIdentity)
	}
	return nil
}
