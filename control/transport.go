package control

import (
	"context"
	"io"
	"time"

	"github.com/awcp/awcp/archive"
	"github.com/awcp/awcp/lease"
)

// ExecutorTransport is the executor's side of a data plane (spec §5.1).
type ExecutorTransport interface {
	// Name is the transport's wire name.
	Name() string
	// Available returns a *ProtocolError (DEP_MISSING) if this machine
	// cannot use the transport.
	Available() error
	// Setup fills p.WorkDir, which exists and is empty, from p.Info; with
	// p.Resources (the head dialect), as an environment root holding a
	// folder per resource. An error means SETUP_FAILED; the work dir is
	// cleaned by the caller.
	Setup(ctx context.Context, p SetupParams) error
	// Teardown ends the transport's use of workDir before it is removed.
	// With a result writer it writes there the result to send back in the
	// done event, as a ZIP, and reports whether it wrote one (transports
	// that write through have none).
	Teardown(ctx context.Context, id, workDir string, result io.Writer) (wrote bool, err error)
}

// SetupParams is what an executor transport sets a workspace up from.
type SetupParams struct {
	ID         string
	Info       *WorkDirInfo
	WorkDir    string
	AccessMode string
	// Resources are a head INVITE's environment; none in the seed dialect.
	Resources []Resource
	// Agent, if set, is the local user the agent runs as (the sandbox's
	// user of its own): the work dir is set up as its. Nil: the daemon's.
	Agent *LocalUser
}

// LocalUser is a uid and gid on this machine.
type LocalUser struct{ UID, GID uint32 }

// DelegatorTransport is the delegator's side of a data plane (spec §5.1).
type DelegatorTransport interface {
	// Name is the transport's wire name.
	Name() string
	// Prepare builds the workDir of START for delegation d.
	Prepare(ctx context.Context, d Lent) (*WorkDirInfo, error)
	// Finish brings a done event's result into the local directory.
	Finish(ctx context.Context, d Lent, ev *Event) (*archive.Report, error)
	// Cleanup releases whatever Prepare made; it runs however the
	// delegation ended, and may run more than once.
	Cleanup(ctx context.Context, d Lent) error
}

// Lent is what a delegator transport needs to know of a delegation.
type Lent struct {
	ID         string
	LocalDir   string
	AccessMode string
	ExpiresAt  time.Time
	Peer       string // the executor's URL
	Dialect    string // the executor's: the head dialect lends the directory as a resource
	// Policy is what the export refuses beyond its access mode.
	Policy lease.ExportPolicy
	// Reverse is a live mount whose connections the delegator opens
	// (tunnel.go); Token is the executor's bearer token, for them. Secret.
	Reverse bool
	Token   string
	// PeerAgentID and PeerKey are the executor's identity, where it was
	// found on the network and its key is trusted: proved before the
	// token is sent.
	PeerAgentID, PeerKey string
	// PlainHTTP: the executor is reached over plain HTTP (asked for).
	PlainHTTP bool
	// Snapshot is what becomes of the result (lease.SnapshotAuto, …),
	// and StagedDir where a staged one is kept: a live mount's staging
	// area takes its changes.
	Snapshot  string
	StagedDir string
	// GitHistory is how many commits of LocalDir's branch the git
	// transport lends beneath the export view (lease.Delegation's).
	GitHistory int
}
