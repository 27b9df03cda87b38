package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// tracker is the health model of one source, fed only by the source's own parts: the
// ownership rounds (offset polls, the group check, leases wanted and held) and each
// owned partition's worker (reader started, fetch errors, handler time, commits,
// resets). publish turns them into a state per partition and one for the route, stores
// it for Health, tells the Observer and logs a change once at info level.
//
// Progress of a partition is a commit, or a poll finding it has no lag. The time the
// handler spends (Redis slow or down) does not count towards a stall: a new reader would
// not help it, and the handler's own retries and logs cover it.
type tracker struct {
	route string
	obs   observe.Observer
	log   *slog.Logger
	clk   clock.Clock
	stall time.Duration

	mu       sync.Mutex
	rounded  bool      // a first ownership round completed
	stopped  bool      // Run returned
	pollErr  error     // last offset poll failure, nil after a success
	waiting  []int     // partitions wanted, held by another holder
	waitFrom time.Time // when waiting became non-empty
	roundAt  time.Time // when the last round was recorded
	parts    map[int]*partHealth
	rebuilds int
	note     string // the last reset, shown in the detail until the next state change
	health   ingress.Health
}

// partHealth is what the tracker knows of one owned partition.
type partHealth struct {
	ready      bool  // the reader started (offset known)
	readErr    error // last fetch / offset fetch failure, nil after a success
	readErrAt  time.Time
	commitErr  string
	committed  int64 // -1 unknown
	end        int64 // from the last poll, -1 unknown
	progressAt time.Time
	handlerAt  time.Time
	replacedAt time.Time // last stall replacement
	resets     int
	state      string
	since      time.Time
}

func newTracker(route string, obs observe.Observer, log *slog.Logger, clk clock.Clock, stall time.Duration) *tracker {
	now := clk.Now()
	t := &tracker{route: route, obs: obs, log: log, clk: clk, stall: stall, parts: map[int]*partHealth{}}
	t.health = ingress.Health{State: ingress.StateStarting, Detail: "not started", Since: now, Lag: -1}
	obs.IngressConsuming(route, false)
	return t
}

// snapshot is Health: the last published state.
func (t *tracker) snapshot() ingress.Health {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.health
	h.Partitions = slices.Clone(h.Partitions)
	h.PartitionStates = slices.Clone(h.PartitionStates)
	return h
}

func (t *tracker) part(p int) *partHealth {
	ph := t.parts[p]
	if ph == nil {
		now := t.clk.Now()
		ph = &partHealth{committed: -1, end: -1, progressAt: now, state: ingress.PartitionOwned, since: now}
		t.parts[p] = ph
	}
	return ph
}

// owned records that this instance took partition p's lease; disowned that it gave it
// up or lost it.
func (t *tracker) owned(p int) {
	t.mu.Lock()
	t.part(p)
	t.mu.Unlock()
}

func (t *tracker) disowned(p int) {
	t.mu.Lock()
	delete(t.parts, p)
	t.mu.Unlock()
}

// round records an ownership round: the poll's end offsets (nil when err) and the
// partitions wanted but held elsewhere.
func (t *tracker) round(ends map[int]int64, err error, waiting []int) {
	t.mu.Lock()
	now := t.clk.Now()
	t.rounded, t.pollErr = true, err
	if len(waiting) > 0 && len(t.waiting) == 0 {
		t.waitFrom = now
	}
	t.waiting = waiting
	for p, ph := range t.parts {
		// A caught-up reader that reconnected hands out nothing, so no fetch succeeds to
		// clear its last error: a successful poll with no read failure of the partition
		// since the previous round clears it (a reader that still fails reports again
		// within milliseconds: kafka-go returns each failed reconnection).
		if err == nil && ph.readErr != nil && !ph.readErrAt.After(t.roundAt) {
			ph.readErr = nil
		}
		if end, ok := ends[p]; ok {
			ph.end = end
			if ph.ready && ph.committed >= end {
				ph.progressAt = now // caught up
			}
		}
	}
	t.roundAt = now
	t.mu.Unlock()
	t.publish()
}

// started records that partition p's reader starts at offset (the committed one, or
// -1 for the partition's first offset).
func (t *tracker) started(p int, offset int64) {
	t.mu.Lock()
	ph := t.part(p)
	ph.ready, ph.readErr, ph.committed, ph.progressAt = true, nil, offset, t.clk.Now()
	t.mu.Unlock()
	t.publish()
}

// readFailed records a failed fetch or offset fetch of partition p; readOK a success.
func (t *tracker) readFailed(p int, err error) {
	t.mu.Lock()
	ph := t.part(p)
	ph.readErr, ph.readErrAt = err, t.clk.Now()
	t.mu.Unlock()
}

func (t *tracker) readOK(p int) {
	t.mu.Lock()
	if ph := t.parts[p]; ph != nil && ph.readErr != nil {
		ph.readErr = nil
	}
	t.mu.Unlock()
}

// busy brackets the handler calls of one batch of partition p.
func (t *tracker) busy(p int, running bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ph := t.part(p)
	now := t.clk.Now()
	if running {
		ph.handlerAt = now
		return
	}
	if !ph.handlerAt.IsZero() {
		if ph.handlerAt.After(ph.progressAt) {
			ph.progressAt = ph.progressAt.Add(now.Sub(ph.handlerAt))
		} else {
			ph.progressAt = now
		}
	}
	ph.handlerAt = time.Time{}
}

// committed records a successful commit of offset for p (progress) and reports
// whether commits had been failing before.
func (t *tracker) committed(p int, offset int64) (recovered bool) {
	t.mu.Lock()
	ph := t.part(p)
	ph.committed, ph.progressAt = offset, t.clk.Now()
	recovered = ph.commitErr != ""
	ph.commitErr = ""
	t.mu.Unlock()
	return recovered
}

// commitFailed records a failed commit of p and reports whether it is the first of a
// streak (log it at Warn).
func (t *tracker) commitFailed(p int, err error) (first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ph := t.part(p)
	first = ph.commitErr == ""
	ph.commitErr = err.Error()
	return first
}

// reset records that p's reader was reset (offset out of range) or replaced (stall).
func (t *tracker) reset(p int, why string) {
	t.mu.Lock()
	ph := t.part(p)
	ph.resets++
	ph.ready = false
	t.rebuilds++
	t.note = fmt.Sprintf("partition %d: %s", p, why)
	t.mu.Unlock()
	t.publish()
}

// stuck returns the partitions that have been lagging without progress for the stall
// timeout (and were not replaced within it); their readers are replaced.
func (t *tracker) stuck() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clk.Now()
	var out []int
	for p, ph := range t.parts {
		if ph.ready && ph.lag() > 0 && ph.stalledFor(now) >= t.stall && now.Sub(ph.replacedAt) >= t.stall &&
			(ph.readErr == nil || !isNetworkError(ph.readErr)) && (t.pollErr == nil || !isNetworkError(t.pollErr)) {
			ph.replacedAt = now
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// stop marks the source stopped (Run returned).
func (t *tracker) stop() {
	t.mu.Lock()
	t.stopped = true
	t.parts = map[int]*partHealth{}
	t.mu.Unlock()
	t.publish()
}

func (ph *partHealth) lag() int64 {
	if ph.end < 0 || !ph.ready {
		return -1
	}
	from := max(ph.committed, 0)
	if from > ph.end {
		return ph.end // committed beyond the end (recreated topic): everything is to read
	}
	return ph.end - from
}

// stalledFor is how long the partition made no progress outside the handler.
func (ph *partHealth) stalledFor(now time.Time) time.Duration {
	if !ph.handlerAt.IsZero() {
		return 0
	}
	return now.Sub(ph.progressAt)
}

// evaluate derives a partition's state and detail. Called with mu.
func (t *tracker) evalPart(ph *partHealth, now time.Time) (state, detail string) {
	thr := max(t.stall/3, time.Second)
	switch {
	case ph.readErr != nil && isNetworkError(ph.readErr):
		return ingress.PartitionUnreachable, "brokers not reachable: " + ph.readErr.Error()
	case t.pollErr != nil && isNetworkError(t.pollErr):
		return ingress.PartitionUnreachable, "brokers not reachable: " + t.pollErr.Error()
	case !ph.ready:
		if ph.readErr != nil {
			return ingress.PartitionOwned, "setting up the reader: " + ph.readErr.Error()
		}
		return ingress.PartitionOwned, "setting up the reader"
	}
	if d := ph.stalledFor(now); ph.lag() > 0 && d >= thr {
		why := "no offset committed"
		if ph.commitErr != "" {
			why = "last commit error: " + ph.commitErr
		} else if ph.readErr != nil {
			why = "last read error: " + ph.readErr.Error()
		}
		return ingress.PartitionLagging, fmt.Sprintf("no progress for %s with %d records of lag; %s", d.Round(time.Second), ph.lag(), why)
	}
	return ingress.PartitionFetching, ""
}

// evaluate derives the route's state from its partitions. Called with mu.
func (t *tracker) evaluate(now time.Time, parts []ingress.PartitionHealth) (state, detail string) {
	var lagging, unreachable []string
	for _, ph := range parts {
		switch ph.State {
		case ingress.PartitionLagging:
			lagging = append(lagging, fmt.Sprintf("partition %d: %s", ph.Partition, ph.Detail))
		case ingress.PartitionUnreachable:
			unreachable = append(unreachable, fmt.Sprintf("partition %d: %s", ph.Partition, ph.Detail))
		}
	}
	switch {
	case t.stopped:
		return ingress.StateStopped, "Run returned"
	case t.pollErr != nil && isNetworkError(t.pollErr):
		return ingress.StateUnreachable, "brokers not reachable: " + t.pollErr.Error()
	case t.pollErr != nil:
		// A missing topic, a refused request: the partitions cannot be owned or read.
		return ingress.StateUnreachable, "offset poll failed: " + t.pollErr.Error()
	case len(unreachable) > 0:
		return ingress.StateUnreachable, strings.Join(unreachable, "; ")
	case !t.rounded:
		return ingress.StateStarting, "first ownership round not completed"
	case len(lagging) > 0:
		return ingress.StateStalled, strings.Join(lagging, "; ")
	case len(t.waiting) > 0:
		return ingress.StateJoining, fmt.Sprintf("waiting %s for the leases of partitions %v, held by another instance until it releases them or they expire",
			now.Sub(t.waitFrom).Round(time.Second), t.waiting)
	}
	if t.note != "" {
		return ingress.StateConsuming, "last reset: " + t.note
	}
	return ingress.StateConsuming, ""
}

// publish stores the current state for Health and reports a change.
func (t *tracker) publish() {
	t.mu.Lock()
	now := t.clk.Now()
	old := t.health
	var parts []ingress.PartitionHealth
	var owned []int
	lag := int64(0)
	for _, p := range slices.Sorted(maps.Keys(t.parts)) {
		ph := t.parts[p]
		st, detail := t.evalPart(ph, now)
		if st != ph.state {
			ph.state, ph.since = st, now
		}
		pl := ph.lag()
		if pl < 0 {
			lag = -1
		} else if lag >= 0 {
			lag += pl
		}
		parts = append(parts, ingress.PartitionHealth{Partition: p, State: st, Detail: detail, Since: ph.since,
			Lag: pl, Committed: ph.committed, Resets: ph.resets})
		owned = append(owned, p)
	}
	if !t.rounded || (t.pollErr != nil && len(parts) == 0) {
		lag = -1
	}
	state, detail := t.evaluate(now, parts)
	h := ingress.Health{State: state, Detail: detail, Since: old.Since, Partitions: owned, PartitionStates: parts,
		Lag: lag, Rebuilds: t.rebuilds}
	if state != old.State {
		h.Since = now
	}
	t.health = h
	t.mu.Unlock()
	if lag != old.Lag {
		t.obs.IngressLag(t.route, lag)
	}
	if state == old.State && slices.Equal(h.Partitions, old.Partitions) && detail == old.Detail {
		return
	}
	if state != old.State {
		t.obs.IngressConsuming(t.route, state == ingress.StateConsuming)
	}
	if state == old.State && slices.Equal(h.Partitions, old.Partitions) && state != ingress.StateConsuming {
		return // the same trouble, its detail (durations, counts) moving: logged once
	}
	attrs := []any{"state", state, "was", old.State, "partitions", h.Partitions, "lag", h.Lag, "rebuilds", h.Rebuilds}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	t.log.Info("kafka ingress state", attrs...)
}

// isNetworkError reports whether err means the brokers could not be reached or did not
// answer (not a Kafka error code: kafka.Error also has the net.Error methods).
func isNetworkError(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "i/o timeout") || strings.Contains(msg, "no such host")
}
