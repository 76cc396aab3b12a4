package control

import (
	"math"
	"time"
)

// Seconds is n seconds as a time.Duration, saturated rather than wrapped:
// a lease of 1e10 seconds a peer asks or grants is the longest Duration
// (some 292 years), not one ending in the past. Every count of seconds
// off the wire becomes a Duration through here.
func Seconds(n int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Second)
	switch {
	case n > most:
		return math.MaxInt64
	case n < -most:
		return math.MinInt64
	}
	return time.Duration(n) * time.Second
}
