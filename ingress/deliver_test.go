package ingress

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// script is a Handler failing its first fails calls; it records the slices it got.
type script struct {
	mu    sync.Mutex
	fails int
	got   [][]Item
}

func (s *script) handle(_ context.Context, items []Item) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, items)
	if len(s.got) <= s.fails {
		return errors.New("redis down (test)")
	}
	return nil
}

func (s *script) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// deliver runs l.Deliver in a goroutine and, while it has not returned, advances the
// fake clock whenever the loop waits on it, so backoffs end without real sleeping.
func deliver(t *testing.T, ctx context.Context, clk *clock.Fake, l *Loop, b Batch) (Outcome, error) {
	t.Helper()
	type result struct {
		out Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := l.Deliver(ctx, b)
		done <- result{out, err}
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-done:
			return r.out, r.err
		case <-deadline:
			t.Fatal("Deliver did not return")
		case <-time.After(time.Millisecond):
			if clk.Timers() > 0 {
				clk.Advance(time.Minute)
			}
		}
	}
}

func testItems() []Item {
	return []Item{{Env: &envelope.Envelope{ID: "a", Payload: []byte("x")}}, {CancelID: "b"}}
}

// A failed batch is handed again as the very same items (parsed once, never rebuilt),
// after a backoff on the injected clock; it is acknowledged once, after the handler
// returned nil, never before.
func TestLoopRetriesSameItemsThenAcks(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	h := &script{fails: 3}
	var busy []bool
	l := NewLoop(h.handle, LoopOptions{Clock: clk, Busy: func(b bool) { busy = append(busy, b) }})
	items := testItems()
	acks := 0
	out, err := deliver(t, context.Background(), clk, l, Batch{Items: items, Ack: func() error {
		if len(busy) != 2 || busy[1] {
			t.Errorf("Busy calls %v before Ack, want [true false]: acknowledging is not handler time", busy)
		}
		if h.calls() != 4 {
			t.Errorf("acknowledged after %d handler calls, want after the 4th (the first success)", h.calls())
		}
		acks++
		return nil
	}})
	if out != Acked || err != nil || acks != 1 {
		t.Fatalf("Deliver = %v, %v with %d acks; want Acked, nil, 1 ack", out, err, acks)
	}
	if h.calls() != 4 {
		t.Fatalf("handler called %d times, want 4", h.calls())
	}
	for i, got := range h.got {
		if len(got) != len(items) || &got[0] != &items[0] || got[0].Env != items[0].Env {
			t.Fatalf("call %d was handed other items than the batch's: re-parsed or copied", i)
		}
	}
	if clk.Now().Sub(time.Unix(1_000_000, 0)) < 3*time.Minute {
		t.Errorf("the fake clock moved %s: the three backoffs did not wait on it", clk.Now().Sub(time.Unix(1_000_000, 0)))
	}
	if len(busy) != 2 || !busy[0] || busy[1] {
		t.Errorf("Busy calls %v, want [true false]", busy)
	}
}

// GiveUpAfter failed calls end Deliver with GaveUp and nothing acknowledged.
func TestLoopGivesUp(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	h := &script{fails: 100}
	l := NewLoop(h.handle, LoopOptions{Clock: clk, GiveUpAfter: 2})
	out, err := deliver(t, context.Background(), clk, l, Batch{Items: testItems(), Ack: func() error {
		t.Error("acknowledged a batch the handler never accepted")
		return nil
	}})
	if out != GaveUp || err != nil || h.calls() != 2 {
		t.Fatalf("Deliver = %v, %v after %d calls; want GaveUp, nil after 2", out, err, h.calls())
	}
}

// BeforeRetry failing (the channel that delivered the batch is gone) and Ack failing
// end Deliver with Stopped and that error.
func TestLoopStopsOnBeforeRetryAndAckErrors(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	lost := errors.New("channel closed")
	h := &script{fails: 1}
	l := NewLoop(h.handle, LoopOptions{Clock: clk})
	out, err := deliver(t, context.Background(), clk, l, Batch{Items: testItems(), Ack: func() error { return nil },
		BeforeRetry: func() error { return lost }})
	if out != Stopped || !errors.Is(err, lost) || h.calls() != 1 {
		t.Fatalf("BeforeRetry failing: Deliver = %v, %v after %d calls; want Stopped, %v after 1", out, err, h.calls(), lost)
	}
	ackErr := errors.New("basic.ack: channel closed")
	out, err = deliver(t, context.Background(), clk, l, Batch{Items: testItems(), Ack: func() error { return ackErr }})
	if out != Stopped || !errors.Is(err, ackErr) {
		t.Fatalf("Ack failing: Deliver = %v, %v; want Stopped, %v", out, err, ackErr)
	}
}

// Shutdown during the backoff ends Deliver with Stopped and nothing acknowledged; a
// handler that returns nil after the cancel (within HandlerGrace) is acknowledged.
func TestLoopShutdown(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	l := NewLoop(func(context.Context, []Item) error {
		calls++
		cancel()
		return errors.New("redis down (test)")
	}, LoopOptions{Clock: clk})
	out, err := l.Deliver(ctx, Batch{Items: testItems(), Ack: func() error {
		t.Error("acknowledged a failed batch")
		return nil
	}})
	if out != Stopped || err != nil || calls != 1 {
		t.Fatalf("Deliver = %v, %v after %d calls; want Stopped, nil after 1", out, err, calls)
	}

	ctx, cancel = context.WithCancel(context.Background())
	acked := false
	l = NewLoop(func(context.Context, []Item) error { cancel(); return nil }, LoopOptions{Clock: clk})
	out, err = l.Deliver(ctx, Batch{Items: testItems(), Ack: func() error { acked = true; return nil }})
	if out != Acked || err != nil || !acked {
		t.Fatalf("handler succeeding as shutdown begins: Deliver = %v, %v, acked %v; want Acked", out, err, acked)
	}
}
