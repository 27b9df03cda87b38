package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// tracker is the health model of one source. Three parties feed it: the reader's log
// hooks (group joined with an assignment, generation ended, join/sync failures), the Run
// loop (handler running, offsets committed) and the watchdog (lag polls). evaluate turns
// these into a state; publish stores it for Health, tells the Observer and logs a change
// of state (or of the assigned partitions) once at info level.
//
// Progress is a successful offset commit, or a lag poll finding nothing to consume (a
// rejoin is not: a group that keeps rebalancing makes none). The time the handler spends
// (Redis slow or down) does not count towards a stall: rebuilding the consumer would not
// help it, and the handler's own retries and logs cover it.
type tracker struct {
	route string
	topic string
	obs   observe.Observer
	log   *slog.Logger
	clk   clock.Clock
	stall time.Duration

	mu sync.Mutex
	// reader identifies the current reader; hooks of an older (closing) one are ignored.
	reader     int
	everJoined bool
	joined     bool
	partitions []int
	groupErr   string    // last join/sync failure of the current reader since it last joined
	notJoined  time.Time // when the current not-joined period began
	joinedAt   time.Time // when the current generation began
	progressAt time.Time // last progress, moved forward by time spent in the handler
	handlerAt  time.Time // when the running handler call began (zero: none running)
	commitErr  string    // last commit failure since the last successful commit
	lag        int64     // from the last poll, -1 unknown
	pollErr    error     // last poll failure, nil after a successful poll
	other      stuckPartition
	readerAt   time.Time // when the current reader was built
	rebuilds   int
	streak     int // rebuilds since the consumer last made progress
	stopped    bool
	cancel     func() // interrupts the current reader's fetch (watchdog rebuild)
	rebuildFor string // why a rebuild was requested ("" none pending)
	health     ingress.Health
}

func newTracker(route, topic string, obs observe.Observer, log *slog.Logger, clk clock.Clock, stall time.Duration) *tracker {
	now := clk.Now()
	t := &tracker{route: route, topic: topic, obs: obs, log: log, clk: clk, stall: stall, lag: -1,
		notJoined: now, progressAt: now}
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
	return h
}

// newReader registers a new reader (Run's first, or a rebuild) and returns its id for
// the hooks; cancel interrupts its fetch.
func (t *tracker) newReader(cancel func()) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reader++
	t.cancel = cancel
	t.joined, t.partitions, t.groupErr, t.rebuildFor = false, nil, "", ""
	t.notJoined, t.progressAt, t.readerAt = t.clk.Now(), t.clk.Now(), t.clk.Now()
	return t.reader
}

// retire makes the tracker ignore the hooks of every reader so far (Run is closing its
// last one: the generation it ends is no state change).
func (t *tracker) retire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reader++
}

// subscribed records that reader joined a generation with these partitions of the topic.
func (t *tracker) subscribed(reader int, partitions []int) {
	t.mu.Lock()
	if reader != t.reader {
		t.mu.Unlock()
		return
	}
	t.everJoined, t.joined, t.partitions, t.groupErr = true, true, partitions, ""
	t.joinedAt = t.clk.Now()
	t.mu.Unlock()
	t.publish()
}

// generationEnded records that reader's generation ended (rebalance, lost coordinator).
func (t *tracker) generationEnded(reader int) {
	t.mu.Lock()
	if reader != t.reader || !t.joined {
		t.mu.Unlock()
		return
	}
	t.joined, t.partitions = false, nil
	t.notJoined = t.clk.Now()
	t.mu.Unlock()
	t.publish()
}

// groupFailed records a failure of reader to join or sync the group.
func (t *tracker) groupFailed(reader int, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if reader == t.reader {
		t.groupErr = what
	}
}

// pastEnd records that reader's position in a partition is beyond the partition's end
// offset. A caught-up reader never is: the topic was deleted and recreated (or
// truncated) under it. kafka-go keeps the old position and would wait there until the
// new topic grows past it, skipping every record below; a new reader starts from the
// group's committed offsets (dropped with the topic), so the watchdog rebuilds at once.
func (t *tracker) pastEnd(reader int, line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// After a rebuild that made no progress yet (the group's committed offset itself is
	// beyond the end), rebuilding again would loop: the stall rules take over.
	if reader != t.reader || t.rebuildFor != "" || t.stopped || t.streak > 0 {
		return
	}
	t.rebuildFor = "read position beyond the end of the partition: the topic was deleted and recreated, or truncated (" + line + ")"
	if t.cancel != nil {
		t.cancel()
	}
}

// busy brackets the handler calls of one batch (ingress.LoopOptions.Busy).
func (t *tracker) busy(running bool) {
	if running {
		t.handlerBegin()
	} else {
		t.handlerEnd()
	}
}

// handlerBegin and handlerEnd bracket the handler calls of one batch.
func (t *tracker) handlerBegin() {
	t.mu.Lock()
	t.handlerAt = t.clk.Now()
	t.mu.Unlock()
}

func (t *tracker) handlerEnd() {
	t.mu.Lock()
	if !t.handlerAt.IsZero() {
		if t.handlerAt.After(t.progressAt) {
			t.progressAt = t.progressAt.Add(t.clk.Now().Sub(t.handlerAt))
		} else {
			t.progressAt = t.clk.Now()
		}
	}
	t.handlerAt = time.Time{}
	t.mu.Unlock()
}

// committed records a successful offset commit (progress). It reports whether commits
// had been failing before.
func (t *tracker) committed() (recovered bool) {
	t.mu.Lock()
	t.progressAt = t.clk.Now()
	t.streak = 0
	recovered = t.commitErr != ""
	t.commitErr = ""
	consuming := t.health.State == ingress.StateConsuming
	t.mu.Unlock()
	if !consuming {
		t.publish()
	}
	return recovered
}

// commitFailed records a failed commit and reports whether it is the first of a streak
// (log it at Warn) and the current state (for that line).
func (t *tracker) commitFailed(err error) (first bool, state string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	first = t.commitErr == ""
	t.commitErr = err.Error()
	return first, t.health.State
}

// polled records the result of a lag poll (lag -1 with err on failure) and the partition
// of another member that has been stuck the longest.
func (t *tracker) polled(lag int64, other stuckPartition, err error) {
	t.mu.Lock()
	t.lag, t.pollErr, t.other = lag, err, other
	if lag == 0 {
		t.progressAt = t.clk.Now() // caught up
		if t.joined && other.since.IsZero() {
			t.streak = 0
		}
	}
	t.mu.Unlock()
	t.obs.IngressLag(t.route, lag)
}

// assigned returns the partitions of the current generation (nil while not joined).
func (t *tracker) assigned() (joined bool, partitions []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.joined, slices.Clone(t.partitions)
}

// rebuilding is called by Run when it replaces the reader; it returns the reason.
func (t *tracker) rebuilding() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rebuilds++
	t.streak++
	return t.rebuildFor
}

// pendingRebuild reports whether the watchdog asked for a rebuild.
func (t *tracker) pendingRebuild() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rebuildFor != ""
}

// stop marks the source stopped (Run returned).
func (t *tracker) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.publish()
}

// check evaluates the state (watchdog tick), publishes it, and, when the consumer has
// been stuck for the stall timeout, requests a rebuild: it interrupts the current fetch
// and Run replaces the reader between batches.
func (t *tracker) check() {
	t.publish()
	t.mu.Lock()
	defer t.mu.Unlock()
	if reason := t.stuck(t.clk.Now()); reason != "" && t.rebuildFor == "" && !t.stopped {
		t.rebuildFor = reason
		if t.cancel != nil {
			t.cancel()
		}
	}
}

// stuck says why the consumer must be rebuilt now ("" if it need not): it has been out
// of the group for the stall timeout, or it has had lag and made no progress for that
// long, joined or not (a group that keeps rebalancing makes none). Called with mu.
func (t *tracker) stuck(now time.Time) string {
	if t.unreachable() {
		return "" // the brokers are the problem; the reader keeps retrying by itself
	}
	// A rebuild makes the group rebalance, which takes its own time: after rebuilds that
	// did not help, wait 2 and then 4 stall timeouts, not to keep the group rebalancing.
	if now.Sub(t.readerAt) < t.stall<<min(t.streak, 2) {
		return ""
	}
	if d := now.Sub(t.notJoined); !t.joined && d >= t.stall {
		return fmt.Sprintf("not joined to the consumer group for %s (%s)", d.Round(time.Second), t.joinDetail())
	}
	if d := t.stalledFor(now); t.lag > 0 && d >= t.stall {
		return fmt.Sprintf("no progress for %s with %d records of lag (%s)", d.Round(time.Second), t.lag, t.progressDetail())
	}
	if d := t.otherStuckFor(now); t.joined && d >= t.stall && now.Sub(t.joinedAt) >= max(t.stall/3, time.Second) {
		return t.otherDetail(now) + "; rebuilding to force a rebalance"
	}
	return ""
}

// otherStuckFor is how long a partition of another member has had lag without progress,
// counted from no earlier than this reader's start (so rebuilds are a stall timeout
// apart) and 0 while this reader's handler runs (Redis trouble stops every member).
func (t *tracker) otherStuckFor(now time.Time) time.Duration {
	if t.other.since.IsZero() || !t.handlerAt.IsZero() {
		return 0
	}
	since := t.other.since
	if t.readerAt.After(since) {
		since = t.readerAt
	}
	return now.Sub(since)
}

func (t *tracker) otherDetail(now time.Time) string {
	return fmt.Sprintf("partition %d (assigned to another member) has %d records of lag and no committed progress for %s",
		t.other.partition, t.other.lag, now.Sub(t.other.since).Round(time.Second))
}

// stalledFor is how long the joined consumer made no progress outside the handler.
func (t *tracker) stalledFor(now time.Time) time.Duration {
	if !t.handlerAt.IsZero() {
		return 0 // the handler is running: not a Kafka stall
	}
	return now.Sub(t.progressAt)
}

func (t *tracker) unreachable() bool {
	return !t.joined && t.pollErr != nil && isNetworkError(t.pollErr)
}

func (t *tracker) joinDetail() string {
	if t.groupErr != "" {
		return "last error: " + t.groupErr
	}
	return "waiting for the group to rebalance"
}

func (t *tracker) progressDetail() string {
	if t.commitErr != "" {
		return "last commit error: " + t.commitErr
	}
	return "no offset committed"
}

// evaluate derives the state and detail. Called with mu. A joined consumer counts as
// stalled after a third of the stall timeout (at least 1s) without progress while it
// has lag, once it has been joined that long too (the rebuild follows at the full
// timeout).
func (t *tracker) evaluate(now time.Time) (state, detail string) {
	switch {
	case t.stopped:
		return ingress.StateStopped, "Run returned"
	case t.unreachable():
		return ingress.StateUnreachable, "brokers not reachable: " + t.pollErr.Error()
	case !t.joined && !t.everJoined:
		return ingress.StateStarting, "joining the consumer group for the first time; " + t.joinDetail()
	case !t.joined:
		return ingress.StateJoining, "rejoining the consumer group; " + t.joinDetail()
	}
	thr := max(t.stall/3, time.Second)
	if d := t.stalledFor(now); t.lag > 0 && d >= thr && now.Sub(t.joinedAt) >= thr {
		return ingress.StateStalled, fmt.Sprintf("no progress for %s with %d records of lag; %s", d.Round(time.Second), t.lag, t.progressDetail())
	}
	if t.otherStuckFor(now) >= thr && now.Sub(t.joinedAt) >= thr {
		return ingress.StateStalled, t.otherDetail(now)
	}
	return ingress.StateConsuming, ""
}

// publish stores the current state for Health and reports a change.
func (t *tracker) publish() {
	t.mu.Lock()
	now := t.clk.Now()
	state, detail := t.evaluate(now)
	old := t.health
	h := ingress.Health{State: state, Detail: detail, Since: old.Since, Partitions: slices.Clone(t.partitions),
		Lag: t.lag, Rebuilds: t.rebuilds}
	if state != old.State {
		h.Since = now
	}
	t.health = h
	t.mu.Unlock()
	if state == old.State && slices.Equal(h.Partitions, old.Partitions) {
		return
	}
	if state != old.State {
		t.obs.IngressConsuming(t.route, state == ingress.StateConsuming)
	}
	attrs := []any{"state", state, "was", old.State, "partitions", h.Partitions, "lag", h.Lag, "rebuilds", h.Rebuilds}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	t.log.Info("kafka ingress state", attrs...)
}

// hooks returns the reader's Logger and ErrorLogger for reader id: they feed the tracker
// from kafka-go's own log lines (the reader exposes its group membership no other way)
// and pass everything on at debug level.
func (t *tracker) hooks(reader int) (logger, errorLogger func(msg string, args ...any)) {
	logger = func(msg string, args ...any) {
		switch {
		case strings.HasPrefix(msg, "subscribed to topics and partitions"):
			if len(args) > 0 {
				t.subscribed(reader, partitionsOf(args[0], t.topic))
			}
		case strings.HasPrefix(msg, "stopped commit for group"):
			t.generationEnded(reader)
		}
	}
	errorLogger = func(msg string, args ...any) {
		line := strings.TrimSpace(fmt.Sprintf(msg, args...))
		if strings.HasPrefix(msg, "Failed to join group") || strings.HasPrefix(msg, "Failed to sync group") ||
			strings.HasPrefix(msg, "Unable to establish connection to consumer group coordinator") ||
			strings.HasPrefix(msg, "Failed to fetch offsets") {
			t.groupFailed(reader, line)
		}
		if strings.HasPrefix(msg, "the kafka reader is reading passed the last offset") ||
			strings.HasPrefix(msg, "error initializing the kafka reader") && hasError(args, kafka.OffsetOutOfRange) {
			t.pastEnd(reader, line)
		}
		t.log.Debug("kafka-go: " + line)
	}
	return logger, errorLogger
}

// partitionsOf reads the partitions of topic from the offsets map kafka-go logs when a
// reader subscribes (map[topicPartition]int64, an unexported key type with the fields
// topic and partition). Anything else yields nil.
func partitionsOf(arg any, topic string) []int {
	v := reflect.ValueOf(arg)
	if v.Kind() != reflect.Map || v.Type().Key().Kind() != reflect.Struct {
		return nil
	}
	kt := v.Type().Key()
	tf, ok1 := kt.FieldByName("topic")
	pf, ok2 := kt.FieldByName("partition")
	if !ok1 || !ok2 || tf.Type.Kind() != reflect.String || !pf.Type.ConvertibleTo(reflect.TypeOf(int64(0))) {
		return nil
	}
	out := []int{}
	for _, k := range v.MapKeys() {
		if k.FieldByIndex(tf.Index).String() == topic {
			out = append(out, int(k.FieldByIndex(pf.Index).Int()))
		}
	}
	slices.Sort(out)
	return out
}

// hasError reports whether one of a log line's arguments is an error matching target.
func hasError(args []any, target error) bool {
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, target) {
			return true
		}
	}
	return false
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
