package lease

import (
	"context"
	"log/slog"
	"time"
)

// Due is a lease the scheduler watches.
type Due struct {
	ID        string
	State     State
	ExpiresAt time.Time
}

// Scheduler fires expiry at each lease's expiresAt, and only from the states
// where spec §8.1 allows EXPIRE. Its first sweep runs at once, so leases that
// became overdue while the process was down expire on start-up.
type Scheduler struct {
	// List returns the leases to watch. Required.
	List func() ([]Due, error)
	// Expire is called for a lease that is due, from the scheduler's
	// goroutine; it performs the transition and the clean-up. An error is
	// logged and the lease is tried again at the next sweep. Required.
	Expire func(ctx context.Context, id string) error
	// MaxWait bounds the sleep between sweeps, so leases created by other
	// processes sharing the store are noticed. Default 1s.
	MaxWait time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger default slog.Default().
	Logger *slog.Logger

	kick chan struct{}
}

// NewScheduler returns s ready to Run.
func NewScheduler(s Scheduler) *Scheduler {
	if s.MaxWait <= 0 {
		s.MaxWait = time.Second
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	s.kick = make(chan struct{}, 1)
	return &s
}

// Kick makes the scheduler sweep now, e.g. after a lease was added.
func (s *Scheduler) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run sweeps until ctx is done.
func (s *Scheduler) Run(ctx context.Context) {
	for {
		wait := s.sweep(ctx)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// sweep expires what is due and returns how long to sleep.
func (s *Scheduler) sweep(ctx context.Context) time.Duration {
	wait := s.MaxWait
	leases, err := s.List()
	if err != nil {
		s.Logger.Warn("expiry sweep: list leases", "err", err)
		return wait
	}
	now := s.Now()
	for _, l := range leases {
		if l.ExpiresAt.IsZero() || !CanFire(l.State, Expire) {
			continue
		}
		if d := l.ExpiresAt.Sub(now); d > 0 {
			wait = min(wait, d)
			continue
		}
		if ctx.Err() != nil {
			return wait
		}
		if err := s.Expire(ctx, l.ID); err != nil {
			s.Logger.Warn("expire lease", "delegation", l.ID, "err", err)
		}
	}
	return wait
}
