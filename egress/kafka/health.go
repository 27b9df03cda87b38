package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Healthy implements egress.HealthChecker: nil while the brokers answered the latest
// probe or publish, else what failed.
func (s *Sink) Healthy() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.health.get()
}

// probe reads the cluster metadata every interval until ctx ends.
func (s *Sink) probe(ctx context.Context, cfg Conn, interval time.Duration) {
	defer close(s.probeDone)
	wait := min(interval, 10*time.Second)
	t := s.clk.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		err := cfg.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			err = fmt.Errorf("kafka brokers unreachable: %w", err)
		}
		s.health.report(s.log, err)
		t.Reset(interval)
	}
}

// health is the latest reachability result, logged at info when it changes.
type health struct {
	mu    sync.Mutex
	err   error
	known bool // a probe or publish has reported
}

func (h *health) get() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// report records a probe or publish result; a change of state is logged at info.
func (h *health) report(log *slog.Logger, err error) {
	h.mu.Lock()
	was, first := h.err, !h.known
	h.err, h.known = err, true
	h.mu.Unlock()
	switch {
	case err != nil && (was == nil || first):
		log.Info("kafka brokers unreachable", "err", err)
	case err == nil && was != nil && !first:
		log.Info("kafka brokers reachable again")
	}
}
