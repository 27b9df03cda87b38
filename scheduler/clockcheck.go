package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// One clock (docs/HA.md "One clock"). Due times are compared with this instance's clock
// (claim horizon, the wheel's fire time), so an instance whose clock runs ahead of the
// others fires early. Redis's clock (TIME) is the reference: every ownership round
// measures this instance's offset against it, and while the offset is beyond
// Options.MaxClockOffset the instance does not claim (its pumps wait) and what its
// wheel would fire goes back to `due` unfired. Parks, acknowledgements, retries and
// lease renewals go on. Between two measurements, a step of the wall clock is noticed
// at once: the wall clock minus the monotonic clock moves by the step, and the offset
// estimate moves with it.

// clockGate is the last measurement of the offset and the state derived from it.
type clockGate struct {
	mu       sync.Mutex
	measured bool
	offset   time.Duration // local wall clock minus Redis's, at the measurement
	base     int64         // wall ms minus mono ms at the measurement
	bad      bool          // beyond the bound at the last measurement
	detail   string        // why the clock is not usable (readiness), "" when it is
}

// checkClock measures the offset against the store's clock (one TIME round trip) and
// updates the gate: offset = local mid-point of the round trip minus Redis's time, with
// an error of at most half the round trip. A round trip longer than the bound itself
// says too little to judge and is ignored (the previous state stays). Entering and
// leaving the bad state are each logged once.
func (s *Scheduler) checkClock(ctx context.Context) {
	limit := s.opt.MaxClockOffset
	if limit <= 0 {
		return
	}
	t0 := s.clk.Now()
	ref, err := s.store.Time(ctx)
	t1 := s.clk.Now()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("clock check: reading the store's time failed", "err", err)
		}
		return
	}
	rtt := t1.Sub(t0)
	if rtt > limit {
		s.log.Debug("clock check: round trip too long to judge the offset", "rtt", rtt)
		return
	}
	mid := t0.Add(rtt / 2)
	offset := time.Duration(mid.UnixMilli()-ref.UnixMilli()) * time.Millisecond
	s.obs.ClockOffset(offset)
	bad := offset > limit || offset < -limit
	g := &s.clock
	g.mu.Lock()
	was, first := g.bad, !g.measured
	g.measured, g.offset, g.bad = true, offset, bad
	g.base = mid.UnixMilli() - mid.Sub(s.epoch).Milliseconds()
	g.detail = ""
	if bad {
		g.detail = fmt.Sprintf("clock offset %s against Redis's (±%s) is beyond scheduler.max_clock_offset %s: not claiming until it is back within",
			offset, rtt/2, limit)
	}
	g.mu.Unlock()
	switch {
	case bad && (first || !was):
		s.log.Warn("this instance's clock disagrees with Redis's beyond scheduler.max_clock_offset: claiming stops until it is back within (parks and acknowledgements go on)",
			"offset", offset, "error_bound", rtt/2, "max_clock_offset", limit)
	case !bad && was:
		s.wakePumps()
		s.log.Info("this instance's clock is back within scheduler.max_clock_offset of Redis's: claiming resumes",
			"offset", offset, "error_bound", rtt/2, "max_clock_offset", limit)
	}
}

// clockOK reports whether due-time decisions may use this instance's clock now: the
// last measurement was within the bound and the wall clock has not stepped beyond it
// since. Before the first measurement it is false (the first ownership round measures
// before it acquires anything). Always true without a bound.
func (s *Scheduler) clockOK() bool {
	limit := s.opt.MaxClockOffset
	if limit <= 0 {
		return true
	}
	now := s.clk.Now()
	g := &s.clock
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.measured || g.bad {
		return false
	}
	step := time.Duration(now.UnixMilli()-now.Sub(s.epoch).Milliseconds()-g.base) * time.Millisecond
	est := g.offset + step
	return est <= limit && est >= -limit
}

// ClockCheck is nil while the instance's clock is usable for due-time decisions, and
// otherwise says why not (for /readyz): beyond the bound, or not measured yet.
func (s *Scheduler) ClockCheck() error {
	if s.clockOK() {
		return nil
	}
	g := &s.clock
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case !g.measured:
		return fmt.Errorf("clock offset against Redis's not measured yet: not claiming")
	case g.detail != "":
		return fmt.Errorf("%s", g.detail)
	}
	return fmt.Errorf("the wall clock stepped since the last measurement (offset was %s); beyond scheduler.max_clock_offset %s: not claiming until the next measurement",
		g.offset, s.opt.MaxClockOffset)
}

// wakePumps wakes every pump (the clock is usable again).
func (s *Scheduler) wakePumps() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.shards {
		if st != nil {
			notify(st.wake)
		}
	}
}
