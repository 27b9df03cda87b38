package redistest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
	"github.com/delaybridge/delay-bridge/testkit"
)

// recordingSink is an egress.Sink that keeps what it was asked to publish; failFor
// makes publishes of matching ids fail. It stands in for the broker in scheduler tests
// (the brokers' own sinks are tested against kfake and RabbitMQ).
type recordingSink struct {
	mu      sync.Mutex
	got     []published
	failFor func(env *envelope.Envelope) error
}

type published struct {
	id    string
	due   int64
	at    int64
	tries int32
}

func (s *recordingSink) Publish(_ context.Context, msgs []*envelope.Envelope) []error {
	errs := make([]error, len(msgs))
	now := time.Now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range msgs {
		if s.failFor != nil {
			if err := s.failFor(m); err != nil {
				errs[i] = err
				continue
			}
		}
		s.got = append(s.got, published{id: m.ID, due: m.DueAt, at: now, tries: m.Attempt + 1})
	}
	return errs
}

func (s *recordingSink) Close() error { return nil }

func (s *recordingSink) snapshot() []published {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]published(nil), s.got...)
}

type harness struct {
	shardStore storeapi.Store
	sched      *scheduler.Scheduler
	sink       *recordingSink
	stop       func()
	done       chan struct{}
}

func startScheduler(t *testing.T, r *testkit.Redis, instance string, sink *recordingSink, tweak func(*scheduler.Options)) *harness {
	t.Helper()
	return startSchedulerOwned(t, r, instance, sink, tweak, nil)
}

// startSchedulerOwned is startScheduler with the dispatcher's ownership check wrapped:
// owned gets the scheduler's Owns and returns the check to use.
func startSchedulerOwned(t *testing.T, r *testkit.Redis, instance string, sink *recordingSink, tweak func(*scheduler.Options),
	owned func(owns func(*envelope.Envelope) bool) func(*envelope.Envelope) bool) *harness {
	t.Helper()
	ctx := context.Background()
	rdb := r.Client()
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "t", Cluster: "c", Shards: 8, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	opt := scheduler.Options{
		Store: shardStore, Clock: clock.Real{}, Instance: instance,
		Tick: time.Millisecond, Lookahead: 500 * time.Millisecond, ClaimBatch: 100,
		InflightLease: 30 * time.Second, LeaseTTL: time.Second, SafetyScan: 200 * time.Millisecond,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&opt)
	}
	s := newScheduler(t, opt)
	check := s.Owns
	if owned != nil {
		check = owned(s.Owns)
	}
	disp := egress.NewDispatcher(egress.DispatcherOptions{
		Routes:    map[string]egress.RouteSink{"r": {Sink: sink, Broker: "test"}},
		Completer: s, Owned: check,
	})
	rctx, cancel := context.WithCancel(ctx)
	h := &harness{shardStore: shardStore, sched: s, sink: sink, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		_ = s.Run(rctx, disp)
	}()
	h.stop = func() {
		cancel()
		<-h.done
	}
	t.Cleanup(h.stop)
	return h
}

func parkN(t *testing.T, shardStore storeapi.Store, n int, due func(i int) int64) {
	t.Helper()
	envs := make([]*envelope.Envelope, n)
	for i := range envs {
		envs[i] = &envelope.Envelope{ID: fmt.Sprintf("m-%d", i), Route: "r", DueAt: due(i), Payload: []byte("p")}
	}
	parked, _, err := shardStore.Park(context.Background(), envs)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range parked {
		if !ok {
			t.Fatalf("message %d not parked", i)
		}
	}
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func totals(t *testing.T, shardStore storeapi.Store) (pending, inflight, dead int64) {
	t.Helper()
	st, err := shardStore.ShardStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		pending += s.Pending
		inflight += s.Inflight
		dead += s.Dead
	}
	return
}

func TestSchedulerFiresEveryMessageOnceNeverEarly(t *testing.T) {
	r := testkit.StartRedis(t)
	sink := &recordingSink{}
	h := startScheduler(t, r, "a", sink, nil)
	start := time.Now().UnixMilli()
	const n = 600
	parkN(t, h.shardStore, n, func(i int) int64 { return start + int64(i%30)*50 }) // 0..1.45 s
	h.sched.Notify(map[int]int64{0: start, 1: start, 2: start, 3: start, 4: start, 5: start, 6: start, 7: start})
	waitFor(t, "all messages published", 20*time.Second, func() bool { return len(sink.snapshot()) >= n })
	seen := map[string]bool{}
	for _, p := range sink.snapshot() {
		if seen[p.id] {
			t.Errorf("%s published twice", p.id)
		}
		seen[p.id] = true
		if p.at < p.due {
			t.Errorf("%s published %d ms early", p.id, p.due-p.at)
		}
	}
	waitFor(t, "acks to empty the shards", 10*time.Second, func() bool {
		p, i, d := totals(t, h.shardStore)
		return p == 0 && i == 0 && d == 0
	})
	st, _, _, err := h.shardStore.Get(context.Background(), "m-7")
	if err != nil || st != storeapi.StateDelivered {
		t.Fatalf("fired message state = %q, %v; want delivered", st, err)
	}
	if got := len(h.sched.OwnedShards()); got != 8 {
		t.Fatalf("single instance owns %d shards, want all 8", got)
	}
}

func TestSchedulerRetriesThenDeadLetters(t *testing.T) {
	r := testkit.StartRedis(t)
	var calls sync.Map
	sink := &recordingSink{failFor: func(env *envelope.Envelope) error {
		v, _ := calls.LoadOrStore(env.ID, new(int))
		n := v.(*int)
		*n++
		switch env.ID {
		case "m-0": // fails once, then succeeds on the retry
			if *n == 1 {
				return errors.New("broker said no")
			}
		case "m-1": // always fails: dead after MaxAttempts
			return errors.New("still no")
		case "m-2": // permanent: dead at once
			return fault.Permanent(errors.New("no such target"))
		}
		return nil
	}}
	h := startScheduler(t, r, "a", sink, nil)
	now := time.Now().UnixMilli()
	parkN(t, h.shardStore, 3, func(int) int64 { return now })
	waitFor(t, "m-0 published on its retry", 10*time.Second, func() bool { return len(sink.snapshot()) == 1 })
	if p := sink.snapshot()[0]; p.id != "m-0" || p.tries != 2 {
		t.Fatalf("published %+v, want m-0 on attempt 2", p)
	}
	waitFor(t, "two dead letters", 10*time.Second, func() bool { _, _, d := totals(t, h.shardStore); return d == 2 })
	st, _, env, err := h.shardStore.Get(context.Background(), "m-1")
	if err != nil || st != storeapi.StateDead || env.Attempt != 3 || env.Reason == "" {
		t.Fatalf("m-1: state %q attempt %d reason %q err %v; want dead after 3 attempts with a reason", st, env.Attempt, env.Reason, err)
	}
	st, _, env, err = h.shardStore.Get(context.Background(), "m-2")
	if err != nil || st != storeapi.StateDead || env.Attempt != 1 {
		t.Fatalf("m-2: state %q attempt %d err %v; want dead after 1 attempt (permanent)", st, env.Attempt, err)
	}
}

func TestShutdownPutsUnfiredMessagesBackToPending(t *testing.T) {
	r := testkit.StartRedis(t)
	sink := &recordingSink{}
	// A long lookahead claims messages due in 3 s into the wheel right away.
	h := startScheduler(t, r, "a", sink, func(o *scheduler.Options) { o.Lookahead = 5 * time.Second })
	due := time.Now().UnixMilli() + 3000
	parkN(t, h.shardStore, 50, func(int) int64 { return due })
	waitFor(t, "messages claimed into the wheel", 5*time.Second, func() bool { _, i, _ := totals(t, h.shardStore); return i == 50 })
	h.stop()
	p, i, _ := totals(t, h.shardStore)
	if p != 50 || i != 0 {
		t.Fatalf("after shutdown pending=%d inflight=%d, want 50 pending, 0 in flight", p, i)
	}
	_, score, _, err := h.shardStore.Get(context.Background(), "m-3")
	if err != nil || score != due {
		t.Fatalf("put-back changed the due time: %d (err %v), want %d", score, err, due)
	}
	if len(sink.snapshot()) != 0 {
		t.Fatalf("nothing was due yet, but %d were published", len(sink.snapshot()))
	}
	// storeapi.Lease released and membership left: another instance takes over at once.
	sink2 := &recordingSink{}
	h2 := startScheduler(t, r, "b", sink2, nil)
	waitFor(t, "the new instance fires them", 10*time.Second, func() bool { return len(sink2.snapshot()) == 50 })
	for _, p := range sink2.snapshot() {
		if p.at < due {
			t.Fatalf("%s fired early", p.id)
		}
	}
	_ = h2
}

func TestNewOwnerRecoversInflightOfDeadOwner(t *testing.T) {
	r := testkit.StartRedis(t)
	ctx := context.Background()
	shardStore, err := redisstore.New(ctx, r.Client(), redisstore.Options{Prefix: "t", Cluster: "c", Shards: 8, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	due := now + 1500 // claimed early (lookahead) by the dead owner: recovery must not fire it early
	parkN(t, shardStore, 20, func(int) int64 { return due })
	// A "dead" instance claims everything and never acks (its leases then expire).
	for sh := 0; sh < 8; sh++ {
		tok, err := shardStore.AcquireLease(ctx, sh, "dead", 300*time.Millisecond)
		if err != nil || tok == 0 {
			t.Fatalf("acquire: %d %v", tok, err)
		}
		if _, _, err := shardStore.Claim(ctx, sh, "dead", tok, due, now+30_000, 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, i, _ := totals(t, shardStore); i != 20 {
		t.Fatalf("in flight %d, want 20", i)
	}
	sink := &recordingSink{}
	rec := &firedRecorder{lateness: map[string]time.Duration{}}
	startScheduler(t, r, "alive", sink, func(o *scheduler.Options) { o.Observer = rec })
	waitFor(t, "recovered messages fired", 10*time.Second, func() bool { return len(sink.snapshot()) == 20 })
	if n := rec.recovered(observe.RecoverShardAcquired); n != 20 {
		t.Errorf("Recovered(shard_acquired) counted %d messages, want 20", n)
	}
	for _, p := range sink.snapshot() {
		if p.at < due || p.due != due {
			t.Fatalf("%s: published at %d with due %d; want not before %d and due kept", p.id, p.at, p.due, due)
		}
	}
}

// mergedSinks counts publishes per id over several instances' sinks and checks none
// was early.
func mergedSinks(t *testing.T, sinks ...*recordingSink) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for _, s := range sinks {
		for _, p := range s.snapshot() {
			seen[p.id]++
			if p.at < p.due {
				t.Errorf("%s published %d ms early", p.id, p.due-p.at)
			}
		}
	}
	return seen
}

func ownedCounts(hs map[string]*harness) map[string]int {
	out := map[string]int{}
	for name, h := range hs {
		out[name] = len(h.sched.OwnedShards())
	}
	return out
}

// TestJoinAndGracefulLeaveSplitEvenlyWithoutDuplicates: instances joining split the
// shards evenly (±1); one leaving gracefully hands its shards over; with messages
// parked all along, every message is published exactly once, never early.
func TestJoinAndGracefulLeaveSplitEvenlyWithoutDuplicates(t *testing.T) {
	r := testkit.StartRedis(t)
	sinks := map[string]*recordingSink{"a": {}, "b": {}, "c": {}}
	hs := map[string]*harness{}
	hs["a"] = startScheduler(t, r, "a", sinks["a"], nil)
	waitFor(t, "a owns all 8 shards", 5*time.Second, func() bool { return len(hs["a"].sched.OwnedShards()) == 8 })

	shardStore := hs["a"].shardStore
	var mu sync.Mutex
	parked := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // ~500 msgs/s due 100..1500 ms out
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			now := time.Now().UnixMilli()
			envs := make([]*envelope.Envelope, 10)
			for j := range envs {
				envs[j] = &envelope.Envelope{ID: fmt.Sprintf("s-%d-%d", i, j), Route: "r", DueAt: now + 100 + int64((i*10+j)*37%1400), Payload: []byte("p")}
			}
			if _, _, err := shardStore.Park(context.Background(), envs); err != nil {
				t.Errorf("park: %v", err)
				return
			}
			mu.Lock()
			parked += len(envs)
			mu.Unlock()
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()

	time.Sleep(500 * time.Millisecond)
	hs["b"] = startScheduler(t, r, "b", sinks["b"], nil)
	hs["c"] = startScheduler(t, r, "c", sinks["c"], nil)
	even := func(names ...string) bool {
		total := 0
		for _, n := range names {
			c := len(hs[n].sched.OwnedShards())
			if c < 8/len(names) || c > (8+len(names)-1)/len(names) {
				return false
			}
			total += c
		}
		return total == 8
	}
	waitFor(t, "an even split over a, b, c", 10*time.Second, func() bool { return even("a", "b", "c") })
	t.Logf("after the joins: %v", ownedCounts(hs))
	time.Sleep(time.Second)

	hs["b"].stop()
	delete(hs, "b")
	waitFor(t, "b's shards taken over by a and c", 10*time.Second, func() bool { return even("a", "c") })
	t.Logf("after b left: %v", ownedCounts(hs))
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-done

	mu.Lock()
	n := parked
	mu.Unlock()
	all := []*recordingSink{sinks["a"], sinks["b"], sinks["c"]}
	waitFor(t, "every parked message published", 20*time.Second, func() bool { return len(mergedSinks(t, all...)) >= n })
	for id, c := range mergedSinks(t, all...) {
		if c != 1 {
			t.Errorf("%s published %d times across graceful joins and a graceful leave", id, c)
		}
	}
	waitFor(t, "shards empty", 10*time.Second, func() bool { p, i, _ := totals(t, shardStore); return p == 0 && i == 0 })
}

// TestSameInstanceNameNeverSharesALease: two processes configured with the same instance
// name (a misconfiguration, or a restart racing its predecessor) must not both work a
// shard: leases are held per process (instance#incarnation), so each shard has one
// holder and every message is published once.
func TestSameInstanceNameNeverSharesALease(t *testing.T) {
	r := testkit.StartRedis(t)
	s1, s2 := &recordingSink{}, &recordingSink{}
	h1 := startScheduler(t, r, "twin", s1, nil)
	waitFor(t, "the first twin owns all 8 shards", 5*time.Second, func() bool { return len(h1.sched.OwnedShards()) == 8 })
	h2 := startScheduler(t, r, "twin", s2, nil)
	time.Sleep(time.Second) // several ownership rounds of the second twin
	if got := h2.sched.OwnedShards(); len(got) != 0 {
		t.Fatalf("the second process named twin holds shards %v that the first holds too (first: %v)", got, h1.sched.OwnedShards())
	}
	if !h2.sched.Ready() {
		t.Fatal("an instance owning no shard after its ownership rounds is not ready; it should be (a warm spare)")
	}
	ctx := context.Background()
	st, err := h1.shardStore.ShardStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Owner != "twin" {
			t.Errorf("shard %d owner %q, want the instance name twin", s.Shard, s.Owner)
		}
	}
	now := time.Now().UnixMilli()
	parkN(t, h1.shardStore, 200, func(i int) int64 { return now + int64(i%10)*50 })
	waitFor(t, "all published", 10*time.Second, func() bool { return len(mergedSinks(t, s1, s2)) == 200 })
	// The first twin leaves gracefully: the second takes every shard over.
	h1.stop()
	waitFor(t, "the second twin takes over", 5*time.Second, func() bool { return len(h2.sched.OwnedShards()) == 8 })
	now = time.Now().UnixMilli()
	more := make([]*envelope.Envelope, 200)
	for i := range more {
		more[i] = &envelope.Envelope{ID: fmt.Sprintf("later-%d", i), Route: "r", DueAt: now + int64(i%10)*50, Payload: []byte("p")}
	}
	if _, _, err := h2.shardStore.Park(ctx, more); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all 400 published", 10*time.Second, func() bool { return len(mergedSinks(t, s1, s2)) == 400 })
	time.Sleep(300 * time.Millisecond)
	for id, c := range mergedSinks(t, s1, s2) {
		if c != 1 {
			t.Errorf("%s published %d times", id, c)
		}
	}
}

// TestLostLeaseDropsHeldAndReacquiredShardFiresOnce: when another holder takes a
// shard's lease (this instance stalled past its TTL), the instance stops the shard and
// drops what it had claimed without publishing or writing anything; when it gets the
// shard back, under a new token, it recovers and fires each message exactly once, and
// its in-memory accounting (held messages, credits) returns to zero.
func TestLostLeaseDropsHeldAndReacquiredShardFiresOnce(t *testing.T) {
	r := testkit.StartRedis(t)
	sink := &recordingSink{}
	h := startScheduler(t, r, "a", sink, func(o *scheduler.Options) { o.Lookahead = 5 * time.Second })
	waitFor(t, "a owns all 8 shards", 5*time.Second, func() bool { return len(h.sched.OwnedShards()) == 8 })
	due := time.Now().UnixMilli() + 2500
	parkN(t, h.shardStore, 40, func(int) int64 { return due })
	waitFor(t, "claimed into the wheel", 5*time.Second, func() bool { _, i, _ := totals(t, h.shardStore); return i == 40 })
	// Another holder takes every lease, as if a's had expired.
	rdb := r.Client()
	ctx := context.Background()
	for sh := 0; sh < 8; sh++ {
		k := fmt.Sprintf("t:{c:%d}:", sh)
		tok, err := rdb.Incr(ctx, k+"fence").Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, k+"owner", redisstore.OwnerValue("intruder#00000000", tok), 700*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a notices the lost leases", 3*time.Second, func() bool { return len(h.sched.OwnedShards()) == 0 })
	if n := h.sched.InMemory().Wheel; n != 0 {
		t.Fatalf("%d messages of lost shards still in the wheel", n)
	}
	if _, i, _ := totals(t, h.shardStore); i != 40 {
		t.Fatalf("in flight %d after losing the shards, want 40 left for the next owner", i)
	}
	// The intruder's leases expire; a takes the shards back with new tokens.
	waitFor(t, "a owns all 8 shards again", 5*time.Second, func() bool { return len(h.sched.OwnedShards()) == 8 })
	waitFor(t, "all 40 published", 10*time.Second, func() bool { return len(sink.snapshot()) >= 40 })
	time.Sleep(300 * time.Millisecond)
	for id, c := range mergedSinks(t, sink) {
		if c != 1 {
			t.Errorf("%s published %d times", id, c)
		}
	}
	waitFor(t, "shards empty", 5*time.Second, func() bool { p, i, _ := totals(t, h.shardStore); return p == 0 && i == 0 })
	waitFor(t, "credits all returned", 5*time.Second, func() bool { return h.sched.InMemory().FreeCredits == 1000 })
	for sh := 0; sh < 8; sh++ {
		if n := h.sched.InMemory().Held[sh]; n != 0 {
			t.Errorf("shard %d: %d messages still counted as held", sh, n)
		}
	}
}

// TestRefusedByOwnsIsFiredAfterRenewal: a message Owns refused while its lease was not
// surely valid (renewal late), on a shard the instance turns out to still hold, goes
// back to due and is fired by the same instance; it does not stay in flight forever.
func TestRefusedByOwnsIsFiredAfterRenewal(t *testing.T) {
	r := testkit.StartRedis(t)
	sink := &recordingSink{}
	var once sync.Once
	refused := make(chan struct{})
	h := startSchedulerOwned(t, r, "a", sink, nil, func(owns func(*envelope.Envelope) bool) func(*envelope.Envelope) bool {
		return func(env *envelope.Envelope) bool {
			first := false
			if env.ID == "m-3" {
				once.Do(func() { first = true; close(refused) })
			}
			return !first && owns(env)
		}
	})
	waitFor(t, "a owns all 8 shards", 5*time.Second, func() bool { return len(h.sched.OwnedShards()) == 8 })
	due := time.Now().UnixMilli() + 300
	parkN(t, h.shardStore, 10, func(int) int64 { return due })
	<-refused
	waitFor(t, "all 10 published, m-3 after its refusal", 5*time.Second, func() bool { return len(sink.snapshot()) == 10 })
	for id, c := range mergedSinks(t, sink) {
		if c != 1 {
			t.Errorf("%s published %d times", id, c)
		}
	}
	waitFor(t, "shards empty", 5*time.Second, func() bool { p, i, _ := totals(t, h.shardStore); return p == 0 && i == 0 })
	st, _, _, err := h.shardStore.Get(context.Background(), "m-3")
	if err != nil || st != storeapi.StateDelivered {
		t.Fatalf("m-3: %q %v, want delivered", st, err)
	}
}

// gatedSink holds every Publish until open is closed.
type gatedSink struct {
	recordingSink
	open    chan struct{}
	waiting atomic.Int64
}

func (g *gatedSink) Publish(ctx context.Context, msgs []*envelope.Envelope) []error {
	g.waiting.Add(int64(len(msgs)))
	<-g.open
	return g.recordingSink.Publish(ctx, msgs)
}

// slowAckStore writes acknowledgements a while after it is asked to, as a slow Redis
// round trip would.
type slowAckStore struct {
	*redisstore.Store
	delay time.Duration
}

func (s slowAckStore) AckEnvelopes(ctx context.Context, envs []*envelope.Envelope, now int64) error {
	time.Sleep(s.delay)
	return s.Store.AckEnvelopes(ctx, envs, now)
}

// TestReacquireWaitsForOwnPublishesInFlight: an instance whose lease lapsed (no other
// holder took it) while messages were being published gets the shard back only after
// those publishes finished and were acknowledged; recovering the in-flight set earlier
// would fire them a second time. The acknowledgements take a second to write, so a
// copy that stopped counting as held before its ack was written would be fired again.
func TestReacquireWaitsForOwnPublishesInFlight(t *testing.T) {
	r := testkit.StartRedis(t)
	ctx := context.Background()
	rdb := r.Client()
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "t", Cluster: "c", Shards: 8, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sink := &gatedSink{open: make(chan struct{})}
	s := newScheduler(t, scheduler.Options{
		Store: slowAckStore{Store: shardStore, delay: time.Second}, Clock: clock.Real{}, Instance: "a",
		Tick: time.Millisecond, Lookahead: 200 * time.Millisecond, ClaimBatch: 100,
		InflightLease: 30 * time.Second, LeaseTTL: time.Second, SafetyScan: 200 * time.Millisecond,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	})
	// The gated sink holds every publish; the 20 messages may be fired in up to 20
	// separate batches, so give the dispatcher a worker for each.
	disp := egress.NewDispatcher(egress.DispatcherOptions{
		Routes:    map[string]egress.RouteSink{"r": {Sink: sink, Broker: "test"}},
		Completer: s, Owned: s.Owns, Workers: 20,
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(rctx, disp) }()
	t.Cleanup(func() {
		select {
		case <-sink.open:
		default:
			close(sink.open)
		}
		cancel()
		<-done
	})
	waitFor(t, "a owns all 8 shards", 5*time.Second, func() bool { return len(s.OwnedShards()) == 8 })
	parkN(t, shardStore, 20, func(int) int64 { return time.Now().UnixMilli() })
	waitFor(t, "all 20 being published", 5*time.Second, func() bool { return sink.waiting.Load() == 20 })

	// The leases lapse: another holder has them for a moment, then nobody.
	for sh := 0; sh < 8; sh++ {
		k := fmt.Sprintf("t:{c:%d}:", sh)
		tok, err := rdb.Incr(ctx, k+"fence").Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, k+"owner", redisstore.OwnerValue("intruder#00000000", tok), 300*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a notices the lost leases", 3*time.Second, func() bool { return len(s.OwnedShards()) == 0 })
	time.Sleep(time.Second) // the intruder's leases are long gone; a wants the shards back
	if got := s.OwnedShards(); len(got) != 0 {
		t.Fatalf("a re-acquired shards %v while its own publishes of them were still in flight", got)
	}
	close(sink.open)
	waitFor(t, "a owns all 8 shards again", 10*time.Second, func() bool { return len(s.OwnedShards()) == 8 })
	waitFor(t, "shards empty", 10*time.Second, func() bool { p, i, _ := totals(t, shardStore); return p == 0 && i == 0 })
	time.Sleep(300 * time.Millisecond)
	for id, c := range mergedSinks(t, &sink.recordingSink) {
		if c != 1 {
			t.Errorf("%s published %d times", id, c)
		}
	}
	if n := len(sink.snapshot()); n != 20 {
		t.Errorf("%d publishes, want 20", n)
	}
}
