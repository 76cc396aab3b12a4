package control

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// Between two awcp peers every connection — AWCP's messages, the event
// streams, a session's ACP channel, the reverse mount's upgrade — is TLS
// 1.3, each side's certificate made from its identity key (the Ed25519 key
// of discovery.IdentityKey), as Syncthing does. Nothing is taken from a
// certificate authority: the peer's key is compared with the one pinned
// for it as the connection is made, so the proof of identity is bound to
// the connection, and someone who relays it gets only ciphertext.
//
// The executor asks each delegator for its certificate: a delegator whose
// key the executor's operator authorized (an authorized-keys file) needs
// no token. Plain HTTP stays for the reference implementation's dialect,
// which speaks nothing else: refused at both ends unless asked for.

// IdentityCertificate is a self-signed certificate of key, for TLS
// between peers: what counts in it is the key.
func IdentityCertificate(key ed25519.PrivateKey) (tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "awcp " + Fingerprint(IdentityPublic(key))},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(20, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// CertificateKey is the identity key, in authorized_keys form, of a
// peer's certificate chain as TLS received it; "" if it holds no Ed25519
// key.
func CertificateKey(rawCerts [][]byte) string {
	if len(rawCerts) == 0 {
		return ""
	}
	cert, err := x509.ParseCertificate(rawCerts[0])
	if err != nil {
		return ""
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return ""
	}
	sshPub, err := gossh.NewPublicKey(pub)
	if err != nil {
		return ""
	}
	return IdentityKeyText(sshPub)
}

// UnpinnedError is a TLS peer whose key is not the one pinned for it (or
// none was): Seen is the key it showed, for the user to compare.
type UnpinnedError struct {
	Seen, Pinned string
}

func (e *UnpinnedError) Error() string {
	if e.Pinned == "" {
		return fmt.Sprintf("the executor's key %s is not trusted yet", Fingerprint(e.Seen))
	}
	return fmt.Sprintf("the executor shows key %s, not the one trusted for it (%s)", Fingerprint(e.Seen), Fingerprint(e.Pinned))
}

// ErrNoPeerKey is a TLS peer that showed no Ed25519 certificate.
var ErrNoPeerKey = errors.New("the peer showed no identity key")

// PinnedClientConfig is the TLS a delegator connects with: its own
// certificate (own may be nil), and the executor's key checked against
// pinned as the handshake ends — the connection is refused, before a byte
// of a request is sent, unless they are the same key. An empty pinned
// refuses every key (a first contact: the error names the key seen).
func PinnedClientConfig(pinned string, own *tls.Certificate) *tls.Config {
	want := ""
	if pub, err := ParseIdentityKey(pinned); err == nil {
		want = IdentityKeyText(pub)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is not checked against any CA: the key is what is
		// trusted, and VerifyPeerCertificate checks it.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			seen := CertificateKey(raw)
			if seen == "" {
				return ErrNoPeerKey
			}
			if want == "" || seen != want {
				return &UnpinnedError{Seen: seen, Pinned: want}
			}
			return nil
		},
	}
	if own != nil {
		cfg.Certificates = []tls.Certificate{*own}
	}
	return cfg
}

// ServerTLSConfig is the TLS an executor serves with: its certificate,
// and each client's asked for (not required: a token may stand in for
// it), its key read by the handler (CertificateKey).
func ServerTLSConfig(own tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{own},
		ClientAuth:   tls.RequestClientCert,
		// A client's certificate is self-signed: its key is what the
		// executor checks, against its authorized delegators.
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 && CertificateKey(raw) == "" {
				return ErrNoPeerKey
			}
			return nil
		},
	}
}
