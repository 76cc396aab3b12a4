package control

import (
	"crypto/ed25519"
	"fmt"
	"strings"

	gossh "golang.org/x/crypto/ssh"
)

// A peer's identity: names and agent ids on mDNS are claims anyone can
// make, so each peer holds an Ed25519 key (in its state dir), shows it in
// its manifest, and proves it holds it in every TLS handshake, its
// certificate made of the key (peertls.go).

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
