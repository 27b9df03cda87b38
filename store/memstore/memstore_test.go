package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/memstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// memstore implements everything the scheduler needs from a store.
var _ scheduler.Store = (*memstore.Store)(nil)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const t0 = int64(1_700_000_000_000)

func newStore(t *testing.T) (*memstore.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.UnixMilli(t0))
	s, err := memstore.New(memstore.Options{Shards: 4, DoneWindow: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

func env(id string, due int64) *envelope.Envelope {
	return &envelope.Envelope{ID: id, Route: "orders", SourceBroker: envelope.BrokerKafka, DueAt: due, Payload: []byte(id)}
}

func TestNewRefusesBadShardCount(t *testing.T) {
	for _, n := range []int{-1, 16385} {
		if _, err := memstore.New(memstore.Options{Shards: n}); !errors.Is(err, storeapi.ErrInvalid) {
			t.Fatalf("Shards %d: %v, want ErrInvalid", n, err)
		}
	}
	s, err := memstore.New(memstore.Options{})
	if err != nil || s.Shards() != 64 {
		t.Fatalf("default shards = %v %v", s, err)
	}
}

// FailNext fails the next calls of one operation with a transient error and changes
// nothing; the call after them succeeds.
func TestFailNextChangesNothing(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	s.FailNext(memstore.OpPark, 2, nil)
	for range 2 {
		prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{env("a", t0)})
		if !fault.IsTransient(err) || !errors.Is(err, memstore.ErrInjected) || prior[0] != storeapi.StateNotStored {
			t.Fatalf("injected park = %v %v, want transient ErrInjected and not_stored", prior, err)
		}
	}
	if st, _, _, _ := s.Get(ctx, "a"); st != storeapi.StateUnknown {
		t.Fatalf("a failed park stored the message: %q", st)
	}
	if parked, _, err := s.Park(ctx, []*envelope.Envelope{env("a", t0)}); err != nil || !parked[0] {
		t.Fatalf("park after the injections = %v %v", parked, err)
	}
	if s.Calls(memstore.OpPark) != 3 {
		t.Fatalf("park calls = %d, want 3", s.Calls(memstore.OpPark))
	}

	perm := fault.Permanent(errors.New("script error"))
	s.FailNext(memstore.OpClaim, 1, perm)
	tok, err := s.AcquireLease(ctx, s.ShardOf("a"), "i1", time.Minute)
	if err != nil || tok == 0 {
		t.Fatal(tok, err)
	}
	if _, _, err := s.Claim(ctx, s.ShardOf("a"), "i1", tok, t0, t0+1000, 10); !fault.IsPermanent(err) {
		t.Fatalf("claim = %v, want the injected permanent error", err)
	}
	if st, _, _, _ := s.Get(ctx, "a"); st != storeapi.StatePending {
		t.Fatalf("a failed claim moved the message: %q", st)
	}
}

// LoseReplyNext applies the operation and then reports an error: an ack whose reply is
// lost has still acked.
func TestLoseReplyNextApplies(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	sh := s.ShardOf("a")
	if _, _, err := s.Park(ctx, []*envelope.Envelope{env("a", t0)}); err != nil {
		t.Fatal(err)
	}
	tok, _ := s.AcquireLease(ctx, sh, "i1", time.Minute)
	if _, _, err := s.Claim(ctx, sh, "i1", tok, t0, t0+1000, 10); err != nil {
		t.Fatal(err)
	}
	s.LoseReplyNext(memstore.OpAck, 1, nil)
	if err := s.AckMany(ctx, []string{"a"}, t0); !fault.IsTransient(err) {
		t.Fatalf("ack = %v, want the injected transient error", err)
	}
	if st, _, _, _ := s.Get(ctx, "a"); st != storeapi.StateDelivered {
		t.Fatalf("state after a lost ack reply = %q, want delivered", st)
	}
}

// A hook that blocks makes an operation slow: it waits on the fake clock and ends with
// its context, while other operations go on.
func TestHookBlocksOneOperation(t *testing.T) {
	s, clk := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.SetHook(func(ctx context.Context, op string) error {
		if op != memstore.OpRetry {
			return nil
		}
		return clock.Sleep(ctx, clk, time.Second)
	})
	done := make(chan error, 1)
	go func() {
		done <- s.Retry(ctx, 0, []storeapi.RetryItem{{Env: env("x", t0)}}, t0)
	}()
	for clk.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Heartbeat(ctx, "i1", t0); err != nil {
		t.Fatalf("heartbeat while a retry is blocked: %v", err)
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("retry after the hook's wait = %v", err)
	}
	go func() {
		done <- s.Retry(ctx, 0, []storeapi.RetryItem{{Env: env("x", t0)}}, t0)
	}()
	for clk.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("retry with its context cancelled = %v", err)
	}
	s.SetHook(nil)
}

// Leases run on the injected clock: a lease lapses when the fake clock passes its TTL.
func TestLeaseExpiresOnTheFakeClock(t *testing.T) {
	s, clk := newStore(t)
	ctx := context.Background()
	tok, err := s.AcquireLease(ctx, 1, "i1", time.Second)
	if err != nil || tok != 1 {
		t.Fatalf("acquire = %d %v", tok, err)
	}
	clk.Advance(time.Second) // at the TTL, still held (Redis expires after it)
	if held, _ := s.RenewLeases(ctx, "i1", []storeapi.Lease{{Shard: 1, Token: tok}}, time.Second); !slices.Equal(held, []bool{true}) {
		t.Fatal("lease lost at its TTL")
	}
	clk.Advance(time.Second + time.Millisecond)
	if other, _ := s.AcquireLease(ctx, 1, "i2", time.Second); other != 2 {
		t.Fatalf("acquire after expiry = %d, want token 2", other)
	}
	if _, _, err := s.Claim(ctx, 1, "i1", tok, t0, t0, 1); !errors.Is(err, storeapi.ErrFenced) {
		t.Fatalf("claim by the lapsed holder = %v, want ErrFenced", err)
	}
}

// Listen gets every notification published while it runs, in order.
func TestListenDeliversInOrder(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- s.Listen(ctx, func(m map[int]int64) { got <- fmt.Sprint("wake ", m) }, func(id string) { got <- "cancel " + id })
	}()
	for s.Subscribers() == 0 {
		time.Sleep(time.Millisecond)
	}
	_ = s.PublishWake(ctx, map[int]int64{2: t0})
	_ = s.PublishWake(ctx, nil) // nothing to announce: not published
	_ = s.PublishCancel(ctx, "x")
	for _, want := range []string{"wake map[2:1700000000000]", "cancel x"} {
		if g := <-got; g != want {
			t.Fatalf("got %q, want %q", g, want)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Listen = %v", err)
	}
	if s.Subscribers() != 0 {
		t.Fatal("Listen left its subscription")
	}
}

// Every operation name reaches the injection: each call below fails with the injected
// error, and is counted under its name.
func TestEveryOpCanFail(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	e := []*envelope.Envelope{env("a", t0)}
	calls := map[string]func() error{
		memstore.OpPark:         func() error { _, _, err := s.ParkEach(ctx, e); return err },
		memstore.OpBury:         func() error { _, err := s.Bury(ctx, e, t0); return err },
		memstore.OpClaim:        func() error { _, _, err := s.Claim(ctx, 0, "i1", 1, t0, t0, 1); return err },
		memstore.OpAck:          func() error { return s.AckMany(ctx, []string{"a"}, t0) },
		memstore.OpRetry:        func() error { return s.Retry(ctx, 0, []storeapi.RetryItem{{Env: e[0]}}, t0) },
		memstore.OpRecover:      func() error { _, _, err := s.RecoverAll(ctx, 0, t0, 1); return err },
		memstore.OpCancel:       func() error { _, _, err := s.Cancel(ctx, "a", t0, storeapi.CancelOptions{}); return err },
		memstore.OpReschedule:   func() error { _, err := s.Reschedule(ctx, "a", t0); return err },
		memstore.OpGet:          func() error { _, _, _, err := s.Get(ctx, "a"); return err },
		memstore.OpPurgeDead:    func() error { _, err := s.PurgeDead(ctx); return err },
		memstore.OpStats:        func() error { _, err := s.ShardStats(ctx); return err },
		memstore.OpLeaseAcquire: func() error { _, err := s.AcquireLeases(ctx, []int{0}, "i1", time.Second); return err },
		memstore.OpLeaseRenew:   func() error { _, err := s.RenewLeases(ctx, "i1", nil, time.Second); return err },
		memstore.OpLeaseRelease: func() error { return s.ReleaseLease(ctx, 0, "i1", 1) },
		memstore.OpHeartbeat:    func() error { return s.Heartbeat(ctx, "i1", t0) },
		memstore.OpMembers:      func() error { _, err := s.LiveMembers(ctx, t0, time.Second); return err },
		memstore.OpLeave:        func() error { return s.Leave(ctx, "i1") },
		memstore.OpTime:         func() error { _, err := s.Time(ctx); return err },
		memstore.OpPublish:      func() error { return s.PublishCancel(ctx, "a") },
		memstore.OpBrowse:       func() error { _, err := s.Browse(ctx, storeapi.BrowseQuery{}); return err },
		memstore.OpJobs:         func() error { _, err := s.ListJobs(ctx, 1, t0); return err },
	}
	for op, call := range calls {
		s.FailNext(op, 1, nil)
		if err := call(); !errors.Is(err, memstore.ErrInjected) {
			t.Errorf("%s with an injected failure = %v", op, err)
		}
		if s.Calls(op) != 1 {
			t.Errorf("%s counted %d calls, want 1", op, s.Calls(op))
		}
	}
}
