package executor

// Metrics is what the executor reports besides its store's census; the
// daemon's registry (internal/metrics) implements it.
type Metrics interface {
	// Refused is an INVITE refused, by its spec error code, or any request
	// refused for its token (AUTH_FAILED, refuseAuth).
	Refused(code string)
	// AgentExited is an agent run ended: "completed", "failed" (it said
	// so), "error" (it could not run) or "killed" (cancel, expiry or
	// shutdown ended it).
	AgentExited(outcome string)
	// LeaseExpired is a running lease that ran out.
	LeaseExpired()
	// Archive is the size of a workspace received ("workspace_received")
	// or a result sent ("result_sent").
	Archive(direction string, n int64)
}

type noMetrics struct{}

func (noMetrics) Refused(string)        {}
func (noMetrics) AgentExited(string)    {}
func (noMetrics) LeaseExpired()         {}
func (noMetrics) Archive(string, int64) {}
