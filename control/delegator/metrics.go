package delegator

// Metrics is what the delegator reports besides its store's census and
// its SSH server's sessions (SSHOptions.Metrics); the daemon's registry
// (internal/metrics) implements it.
type Metrics interface {
	// Refused is an export refused by admission, by its spec error code.
	Refused(code string)
	// LeaseExpired is a lease that ran out before its delegation ended.
	LeaseExpired()
}

type noMetrics struct{}

func (noMetrics) Refused(string) {}
func (noMetrics) LeaseExpired()  {}
