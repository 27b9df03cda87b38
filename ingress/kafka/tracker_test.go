package kafka

import (
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// TestTrackerRules drives the health model on the fake clock through the cases the
// watchdog decides on (the broker-facing paths are in health_test.go).
func TestTrackerRules(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	tr := newTracker("r", "topic", observe.Nop{}, slog.New(slog.NewTextHandler(io.Discard, nil)), clk, 15*time.Second)
	cancels := 0
	id := tr.newReader(func() { cancels++ })
	expect := func(what, state string, wantCancels int) {
		t.Helper()
		tr.check()
		if h := tr.snapshot(); h.State != state || cancels != wantCancels {
			t.Fatalf("%s: state %q (%s), %d rebuild requests; want %q, %d", what, h.State, h.Detail, cancels, state, wantCancels)
		}
	}

	// Out of the group: starting until the stall timeout, then a rebuild is requested.
	clk.Advance(14 * time.Second)
	expect("not joined for 14s", ingress.StateStarting, 0)
	clk.Advance(time.Second)
	expect("not joined for 15s", ingress.StateStarting, 1)
	if !tr.pendingRebuild() || tr.rebuilding() == "" {
		t.Fatal("no pending rebuild with a reason")
	}
	old := id
	id = tr.newReader(func() { cancels++ })

	// The old reader's hooks no longer count.
	tr.subscribed(old, []int{0})
	if tr.snapshot().Partitions != nil {
		t.Fatal("a retired reader's subscription was taken")
	}

	// Rebuilt once without progress: the next rebuild waits two stall timeouts.
	clk.Advance(15 * time.Second)
	expect("rebuilt, not joined for 15s", ingress.StateStarting, 1)
	clk.Advance(15 * time.Second)
	expect("rebuilt, not joined for 30s", ingress.StateStarting, 2)
	tr.rebuilding()
	id = tr.newReader(func() { cancels++ })

	// Joined with lag: consuming, stalled after a third of the timeout without progress,
	// consuming again on a commit.
	tr.subscribed(id, []int{1, 0})
	tr.polled(100, stuckPartition{}, nil)
	expect("joined", ingress.StateConsuming, 2)
	if h := tr.snapshot(); !slices.Equal(h.Partitions, []int{1, 0}) || h.Lag != 100 {
		t.Fatalf("snapshot %+v: want the assignment and lag 100", h)
	}
	clk.Advance(5 * time.Second)
	expect("no commit for 5s with lag", ingress.StateStalled, 2)
	tr.committed()
	expect("committed", ingress.StateConsuming, 2)

	// Time in the handler is no stall.
	tr.handlerBegin()
	clk.Advance(time.Minute)
	expect("handler running for a minute", ingress.StateConsuming, 2)
	tr.handlerEnd()
	clk.Advance(4 * time.Second)
	expect("4s after the handler returned", ingress.StateConsuming, 2)
	clk.Advance(11 * time.Second) // 15s without progress outside the handler
	expect("15s without progress outside the handler", ingress.StateStalled, 3)
	tr.rebuilding()
	id = tr.newReader(func() { cancels++ })
	tr.subscribed(id, []int{0})
	tr.committed()

	// Caught up: no lag, no stall however long nothing happens.
	tr.polled(0, stuckPartition{}, nil)
	clk.Advance(time.Hour)
	tr.polled(0, stuckPartition{}, nil)
	expect("idle and caught up", ingress.StateConsuming, 3)

	// Another member's partition without progress: stalled, then a rebuild.
	since := clk.Now()
	clk.Advance(5 * time.Second)
	tr.polled(0, stuckPartition{partition: 3, lag: 7, since: since}, nil)
	expect("other partition stuck 5s", ingress.StateStalled, 3)
	clk.Advance(10 * time.Second)
	expect("other partition stuck 15s", ingress.StateStalled, 4)
	tr.rebuilding()
	tr.newReader(func() { cancels++ })

	// Brokers unreachable while out of the group: reported, never rebuilt.
	tr.polled(-1, stuckPartition{}, &net.OpError{Op: "dial", Err: io.EOF})
	clk.Advance(time.Hour)
	expect("unreachable for an hour", ingress.StateUnreachable, 4)

	tr.stop()
	if tr.snapshot().State != ingress.StateStopped {
		t.Fatal("not stopped")
	}
}

// TestPartitionsOf reads the assignment from a map shaped like kafka-go's log argument.
func TestPartitionsOf(t *testing.T) {
	type topicPartition struct {
		topic     string
		partition int32
	}
	arg := map[topicPartition]int64{{"a", 2}: 5, {"b", 0}: 1, {"a", 0}: 9}
	if got := partitionsOf(arg, "a"); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("partitionsOf = %v, want [0 2]", got)
	}
	if got := partitionsOf("not a map", "a"); got != nil {
		t.Errorf("partitionsOf(string) = %v, want nil", got)
	}
}

// TestLagCountsACommittedOffsetBeyondTheEnd: a committed offset above the partition's
// end (a batch of a deleted topic committed on its successor) counts the whole
// partition as lag, so the route shows stalled instead of caught up.
func TestLagCountsACommittedOffsetBeyondTheEnd(t *testing.T) {
	for _, c := range []struct {
		o    partitionOffsets
		want int64
	}{
		{partitionOffsets{first: 0, end: 10, committed: 4}, 6},
		{partitionOffsets{first: 3, end: 10, committed: -1}, 7},
		{partitionOffsets{first: 0, end: 10, committed: 10}, 0},
		{partitionOffsets{first: 0, end: 10, committed: 25}, 10},
		{partitionOffsets{first: 0, end: 0, committed: 25}, 0},
	} {
		if got := c.o.lag(); got != c.want {
			t.Errorf("%+v: lag %d, want %d", c.o, got, c.want)
		}
	}
}
