package executor

import (
	"testing"
	"time"
)

// SetBodyGrace sets bodyGrace to d until t ends.
func SetBodyGrace(t testing.TB, d time.Duration) {
	old := bodyGrace
	bodyGrace = d
	t.Cleanup(func() { bodyGrace = old })
}

// SetTunnelSlotWait sets tunnelSlotWait to d until t ends.
func SetTunnelSlotWait(t testing.TB, d time.Duration) {
	old := tunnelSlotWait
	tunnelSlotWait = d
	t.Cleanup(func() { tunnelSlotWait = old })
}
