// Package sshd is the delegator's embedded SSH/SFTP server: a persistent
// ed25519 CA and host key, per-delegation user certificates, a gliderlabs
// server that accepts only those certificates and serves only the sftp
// subsystem, and an SFTP v3 server confined to the delegation's directory.
//
// # Trust
//
// A certificate is accepted only if this CA signed it, it is a user
// certificate, its single principal is the login user (the delegation id),
// it is within its validity, and the lease is live in the store. Ending a
// lease closes its connections at once.
package sshd
