package control

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// The reverse live mount (ours, not the specification's; spec §9.2 names
// it as a direction). When the executor cannot open connections to the
// delegator — the delegator is behind NAT or a firewall — the delegator
// opens them instead: an HTTP upgrade on the executor's port, after which
// the connection carries the same SSH session a forward mount dials, with
// the executor still the SSH client (certificate, pinned host key) and the
// delegator still the server. Only the direction of the TCP connection
// changes.
//
// The handshake:
//
//	GET /awcp/tasks/{id}/tunnel HTTP/1.1
//	Connection: Upgrade
//	Upgrade: awcp-ssh
//	AWCP-Tunnel-Proof: <unix seconds>.<base64 SSH signature>
//	Authorization: Bearer <token>          (where the executor has one)
//
//	HTTP/1.1 101 Switching Protocols
//
// The proof is a signature by the delegator's SSH host key — the key
// START pins for this delegation — over TunnelSigned(id, time); the
// executor checks it before it takes the connection, and nothing else is
// read from a connection that has not passed. After 101 the connection is
// parked: the executor writes TunnelPing every TunnelPingInterval while
// it holds it unused, and TunnelGo when its mount takes it; the bytes
// after TunnelGo are SSH. The delegator keeps one connection parked at a
// time, so that a mount that lost its connection finds the next one
// waiting.
const (
	// TunnelUpgrade is the Upgrade token.
	TunnelUpgrade = "awcp-ssh"
	// TunnelProofHeader carries the proof.
	TunnelProofHeader = "AWCP-Tunnel-Proof"
	// ConnectReverse is Requirements.Connect's and
	// ExecutorConstraints.Connect's value, and workDir.options' "connect".
	ConnectReverse = "reverse"
	// ConnectOption is the key of workDir.options that says how the
	// executor gets the live mount's connection.
	ConnectOption = "connect"
	// TunnelPing and TunnelGo are the executor's bytes on a parked
	// connection.
	TunnelPing byte = '.'
	TunnelGo   byte = '!'
	// TunnelPingInterval is how often a parked connection is pinged; the
	// delegator gives one up after three intervals without a byte. Short,
	// because a parked connection that died silently (a network outage
	// that ate the reset) holds the next reconnection up until it is
	// given up; a byte every 2 s per delegation costs nothing.
	TunnelPingInterval = 2 * time.Second
	// TunnelProofSkew is how far a proof's time may be from the executor's
	// clock.
	TunnelProofSkew = 5 * time.Minute
)

// TunnelPath is the tunnel endpoint of delegation id.
func TunnelPath(id string) string { return "/awcp/tasks/" + id + "/tunnel" }

// TunnelSigned is what a tunnel proof signs.
func TunnelSigned(id string, at time.Time) []byte {
	return []byte("awcp-tunnel-v1\x00" + id + "\x00" + strconv.FormatInt(at.Unix(), 10))
}

// SignTunnel is the proof for delegation id's tunnel, made at at.
func SignTunnel(host gossh.Signer, id string, at time.Time) (string, error) {
	sig, err := host.Sign(nil, TunnelSigned(id, at))
	if err != nil {
		return "", fmt.Errorf("sign the tunnel proof: %w", err)
	}
	return strconv.FormatInt(at.Unix(), 10) + "." + base64.StdEncoding.EncodeToString(gossh.Marshal(sig)), nil
}

// ErrTunnelProof is the error of a proof that does not hold.
var ErrTunnelProof = errors.New("the tunnel proof does not hold")

// VerifyTunnel checks proof for delegation id against the delegator's
// host key, at now.
func VerifyTunnel(host gossh.PublicKey, id, proof string, now time.Time) error {
	secs, b64, ok := strings.Cut(proof, ".")
	if !ok || len(proof) > 4096 {
		return fmt.Errorf("%w: malformed", ErrTunnelProof)
	}
	unix, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: malformed time", ErrTunnelProof)
	}
	at := time.Unix(unix, 0)
	if d := now.Sub(at); d > TunnelProofSkew || d < -TunnelProofSkew {
		return fmt.Errorf("%w: made at %s, more than %s from this clock", ErrTunnelProof, at.UTC().Format(time.RFC3339), TunnelProofSkew)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("%w: malformed signature", ErrTunnelProof)
	}
	var sig gossh.Signature
	if err := gossh.Unmarshal(raw, &sig); err != nil {
		return fmt.Errorf("%w: malformed signature", ErrTunnelProof)
	}
	if err := host.Verify(TunnelSigned(id, at), &sig); err != nil {
		return fmt.Errorf("%w: not signed by the delegator's host key", ErrTunnelProof)
	}
	return nil
}
