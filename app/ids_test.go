package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/app/adminapi"
	"github.com/delaybridge/delay-bridge/app/series"
	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/testkit"
)

// counts is an Observer that counts the outcome events by "route" or "route|reason".
type counts struct {
	observe.Nop
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) add(k string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[k] += n
}
func (c *counts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}
func (c *counts) Received(r string, n int)          { c.add("received "+r, n) }
func (c *counts) Parked(r string, n int)            { c.add("parked "+r, n) }
func (c *counts) Replaced(r string, n int)          { c.add("replaced "+r, n) }
func (c *counts) Duplicate(r, reason string, n int) { c.add("duplicate "+r+"|"+reason, n) }
func (c *counts) Invalid(r, reason string)          { c.add("invalid "+r+"|"+reason, 1) }
func (c *counts) DeadLettered(r string, n int)      { c.add("dead_lettered "+r, n) }
func (c *counts) Cancelled(r string, n int)         { c.add("cancelled "+r, n) }
func (c *counts) Rescheduled(r string, n int)       { c.add("rescheduled "+r, n) }
func (c *counts) Published(r, _ string, n int, _ time.Duration) {
	c.add("published "+r, n)
}

// testBridge is a running bridge; its admin API methods (Schedule, Get, Stats, ...)
// are those of its Backend (app/adminapi).
type testBridge struct {
	*Bridge
	*adminapi.Backend
	obs   *counts
	logs  *testkit.Buffer
	kaddr string
	stop  func()
}

// testEnv is a redis-server of its own and an in-process Kafka broker with the topics of
// routes "a" (a.delay -> a.out) and "b" (b.delay -> b.out) and a dead-letter topic.
type testEnv struct {
	redisAddr, kaddr, prefix, group string
	series                          *series.Recorder // the next run's charts ring, if set
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	rds := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 1, "a.delay", "a.out", "b.delay", "b.out", "dlq")
	return &testEnv{redisAddr: rds.Addr(), kaddr: kaddr, prefix: testkit.Uniq(t, "ids"), group: testkit.Uniq(t, "g")}
}

// startBridge runs a bridge in a new testEnv until the test ends.
func startBridge(t *testing.T, extra ...string) *testBridge {
	t.Helper()
	return newEnv(t).run(t, extra...)
}

// run starts a bridge on the environment; it stops at the end of the test or on stop().
func (e *testEnv) run(t *testing.T, extra ...string) *testBridge {
	t.Helper()
	set := append([]string{
		"redis.addrs=" + e.redisAddr, "kafka.brokers=" + e.kaddr, "shards=4", "prefix=" + e.prefix,
		"kafka.group_id=" + e.group,
		"routes.0.name=a", "routes.0.from.kafka.topic=a.delay", "routes.0.to.kafka.topic=a.out",
		"routes.1.name=b", "routes.1.from.kafka.topic=b.delay", "routes.1.to.kafka.topic=b.out",
	}, extra...)
	return e.runSet(t, set)
}

// runSet starts a bridge configured by set alone (config keys, as --set takes them).
func (e *testEnv) runSet(t *testing.T, set []string) *testBridge {
	t.Helper()
	cfg, err := config.Load(config.LoadOptions{Env: []string{}, Set: set})
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBridge{obs: &counts{m: map[string]int{}}, logs: &testkit.Buffer{}, kaddr: e.kaddr}
	opts := Options{Observer: tb.obs, Logger: slog.New(slog.NewTextHandler(tb.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if e.series != nil {
		opts.Observer, opts.Series = series.Observe(tb.obs, e.series), e.series
	}
	tb.Bridge, err = New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	tb.Backend = tb.Bridge.Backend()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tb.Run(ctx) }()
	var once sync.Once
	tb.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("bridge Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("bridge did not stop within 30 s")
			}
		})
	}
	t.Cleanup(tb.stop)
	waitUntil(t, "bridge ready", 30*time.Second, func() bool { return tb.Ready(ctx) == nil })
	return tb
}

// shardStore opens a store on the bridge's Redis and keys (for what the admin API
// cannot do, such as burying a dead letter directly).
func (tb *testBridge) shardStore(t *testing.T) *redisstore.Store {
	t.Helper()
	c := tb.Config()
	s, err := redisstore.New(context.Background(), tb.rdb, redisstore.Options{Prefix: c.Prefix, Cluster: c.Cluster, Shards: c.Shards, DoneWindow: c.Scheduler.DoneWindow})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tb *testBridge) produce(t *testing.T, topic string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(tb.kaddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range recs {
		r.Topic = topic
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

func rec(value string, headers ...string) *kgo.Record {
	r := &kgo.Record{Value: []byte(value), Timestamp: time.Now()}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

func (tb *testBridge) state(t *testing.T, id string) string {
	t.Helper()
	m, err := tb.Get(context.Background(), id)
	if errors.Is(err, admin.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return m.State
}

// TestTopicRecreatedNewRecordIsNotADuplicate: a record without x-message-id is parked
// for an hour; the topic is deleted and recreated and a different record is produced,
// again at offset 0. Both are parked (the default id is the position plus a content
// hash); with the bare position `topic/partition/offset` the second was refused as a
// duplicate of the first. The bridge is restarted after the recreation: a running
// kafka-go reader keeps its in-memory offset (1) on the new topic, so only a new
// consumer (restart or rebalance) reads the new offset 0 — the broker forgot the
// group's committed offsets with the topic, as Kafka does.
func TestTopicRecreatedNewRecordIsNotADuplicate(t *testing.T) {
	env := newEnv(t)
	tb := env.run(t)
	tb.produce(t, "a.delay", rec("first", "x-delay", "3600000"))
	waitUntil(t, "the first record parked", 20*time.Second, func() bool { return tb.obs.get("parked a") == 1 })
	tb.stop()

	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections() // its connection goroutines end here (goleak)
	c := &kafka.Client{Addr: kafka.TCP(env.kaddr), Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{"a.delay"}}); err != nil || res.Errors["a.delay"] != nil {
		t.Fatalf("delete topic: %v %v", err, res)
	}
	waitUntil(t, "the topic recreated", 20*time.Second, func() bool {
		res, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: "a.delay", NumPartitions: 1, ReplicationFactor: 1}}})
		return err == nil && res.Errors["a.delay"] == nil
	})
	second := rec("second", "x-delay", "3600000")
	tb.produce(t, "a.delay", second)
	if second.Offset != 0 {
		t.Fatalf("the recreated topic put the record at offset %d, want 0 (the collision this test is about)", second.Offset)
	}

	tb = env.run(t)
	waitUntil(t, "the second record handled", 30*time.Second, func() bool {
		return tb.obs.get("parked a")+tb.obs.get("duplicate a|pending") == 1
	})
	if n := tb.obs.get("duplicate a|pending"); n != 0 {
		t.Errorf("the new record was refused as a duplicate of the parked one")
	}
	st, err := tb.Stats(context.Background())
	if err != nil || st.Totals.Pending != 2 {
		t.Errorf("pending = %d (%v), want 2", st.Totals.Pending, err)
	}
}

// item builds an ingress item as Parse would for route a.
func item(t *testing.T, route string, value string, headers ...string) ingress.Item {
	t.Helper()
	raw := ingress.Raw{Broker: envelope.BrokerKafka, Source: route + ".delay", Payload: []byte(value), ReceivedAt: time.Now()}
	for i := 0; i+1 < len(headers); i += 2 {
		raw.Headers = append(raw.Headers, envelope.Header{Key: headers[i], Value: headers[i+1]})
	}
	return ingress.Parse(raw, ingress.Rules{Route: route, MaxDelay: 24 * time.Hour, MaxPayloadBytes: 1 << 20})
}

// TestReplayedBatchCountsEachOutcomeOnce: the handler stores a batch of two valid and
// one invalid message; the same batch handed again (the source could not commit) parks
// and buries nothing, counts no parked, invalid or dead-lettered message again, counts
// three duplicates by state, and does not copy the dead letter to the dead-letter topic
// again. A different message under a known id is logged at info.
func TestReplayedBatchCountsEachOutcomeOnce(t *testing.T) {
	tb := startBridge(t, "dead_letter.kafka.topic=dlq")
	ctx := context.Background()
	batch := []ingress.Item{
		item(t, "a", "one", "x-message-id", "r-1", "x-delay", "3600000"),
		item(t, "a", "two", "x-message-id", "r-2", "x-delay", "3600000"),
		item(t, "a", "bad", "x-message-id", "r-bad", "x-delay", "soon"),
	}
	for range 2 {
		if err := tb.handle(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	for k, want := range map[string]int{
		"parked a": 2, "invalid a|bad_delay": 1, "dead_lettered a": 1,
		"duplicate a|pending": 2, "duplicate a|dead": 1,
	} {
		if got := tb.obs.get(k); got != want {
			t.Errorf("%s = %d, want %d", k, got, want)
		}
	}
	if strings.Contains(tb.logs.String(), "different content") {
		t.Errorf("a replay of the same records was logged as different content:\n%s", tb.logs)
	}
	// The dead-letter topic got one copy.
	cl, err := kgo.NewClient(kgo.SeedBrokers(tb.kaddr), kgo.ConsumeTopics("dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	copies := 0
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second) // copies go out within milliseconds (egress.SidePublisher)
	defer cancel()
	for pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(*kgo.Record) { copies++ })
	}
	if copies != 1 {
		t.Errorf("dead-letter topic has %d copies of r-bad, want 1", copies)
	}

	// Same id, other content: refused (counted) and logged.
	if err := tb.handle(ctx, []ingress.Item{item(t, "a", "not one", "x-message-id", "r-1", "x-delay", "3600000")}); err != nil {
		t.Fatal(err)
	}
	if got := tb.obs.get("duplicate a|pending"); got != 3 {
		t.Errorf("duplicate a|pending = %d, want 3", got)
	}
	if !strings.Contains(tb.logs.String(), "different content") || !strings.Contains(tb.logs.String(), "id=r-1") {
		t.Errorf("no info line about r-1's different content:\n%s", tb.logs)
	}
}

// TestCancelRecordScopedToRoute: an x-delay-cancel record on route b does not cancel
// route a's message (logged at info); route a's own cancel record does. A cancel that
// arrives before its message leaves a tombstone of its route: that route's message is
// refused as a duplicate (cancelled), the other route's message with the id parks.
func TestCancelRecordScopedToRoute(t *testing.T) {
	tb := startBridge(t)
	tb.produce(t, "a.delay", rec("x", "x-message-id", "sc-1", "x-delay", "3600000"))
	waitUntil(t, "sc-1 pending", 20*time.Second, func() bool { return tb.state(t, "sc-1") == admin.StatePending })

	tb.produce(t, "b.delay", rec("", "x-delay-cancel", "sc-1"), rec("marker", "x-message-id", "b-marker", "x-delay", "3600000"))
	waitUntil(t, "route b's batch handled", 20*time.Second, func() bool { return tb.state(t, "b-marker") == admin.StatePending })
	if st := tb.state(t, "sc-1"); st != admin.StatePending {
		t.Fatalf("route b's cancel record changed route a's message to %q", st)
	}
	// The batch parks before it cancels: the marker can be pending before the cancel
	// record's line is written.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(tb.logs.String(), "another route") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(tb.logs.String(), "another route") {
		t.Errorf("the ignored cross-route cancel was not logged:\n%s", tb.logs)
	}

	tb.produce(t, "a.delay", rec("", "x-delay-cancel", "sc-1"))
	waitUntil(t, "sc-1 cancelled", 20*time.Second, func() bool { return tb.state(t, "sc-1") == admin.StateCancelled })
	// The observer hears of the cancel after the store recorded it: wait for the count,
	// then check that it names route a and only a.
	waitUntil(t, "route a's cancel counted", 20*time.Second, func() bool { return tb.obs.get("cancelled a") >= 1 })
	if n := tb.obs.get("cancelled a"); n != 1 {
		t.Errorf("cancelled a = %d, want 1", n)
	}
	if n := tb.obs.get("cancelled b"); n != 0 {
		t.Errorf("cancelled b = %d, want 0", n)
	}

	// A cancel before its message: a tombstone for route b only.
	tb.produce(t, "b.delay", rec("", "x-delay-cancel", "early"))
	waitUntil(t, "the tombstone", 20*time.Second, func() bool { return tb.state(t, "early") == admin.StateCancelled })
	tb.produce(t, "b.delay", rec("late b", "x-message-id", "early", "x-delay", "3600000"))
	waitUntil(t, "route b's message refused", 20*time.Second, func() bool { return tb.obs.get("duplicate b|cancelled") == 1 })
	tb.produce(t, "a.delay", rec("late a", "x-message-id", "early", "x-delay", "3600000"))
	waitUntil(t, "route a's message parked", 20*time.Second, func() bool { return tb.state(t, "early") == admin.StatePending })
	if m, _ := tb.Get(context.Background(), "early"); m.Route != "a" {
		t.Errorf("early is a message of route %q, want a", m.Route)
	}
}

// TestScheduleRepliesAndStates: POST /v1/messages of new ids due now, with the scheduler
// claiming them at once, answers new (not duplicate) for every one; a known id answers
// duplicate. Delivered and cancelled messages read as such; cancelling them conflicts;
// cancelling an unknown id is not found and leaves nothing behind. Cancels and
// reschedules are counted.
func TestScheduleRepliesAndStates(t *testing.T) {
	tb := startBridge(t)
	ctx := context.Background()
	const n = 40
	for i := range n {
		id := fmt.Sprintf("now-%d", i)
		res, err := tb.Schedule(ctx, admin.ScheduleRequest{ID: id, Route: "a", Payload: []byte("p")})
		if err != nil {
			t.Fatal(err)
		}
		if res.Duplicate || res.DueAt == 0 {
			t.Fatalf("Schedule(%s), a new id due now, answered %+v: want new", id, res)
		}
	}
	waitUntil(t, "all delivered", 30*time.Second, func() bool { return tb.obs.get("published a") == n })
	waitUntil(t, "now-0 delivered", 10*time.Second, func() bool { return tb.state(t, "now-0") == admin.StateDelivered })
	res, err := tb.Schedule(ctx, admin.ScheduleRequest{ID: "now-0", Route: "a"})
	if err != nil || !res.Duplicate {
		t.Fatalf("Schedule of a delivered id = %+v %v, want duplicate", res, err)
	}
	if prior, err := tb.Cancel(ctx, "now-0"); !errors.Is(err, admin.ErrConflict) || prior != admin.StateDelivered {
		t.Errorf("Cancel(delivered) = %q %v, want delivered + conflict", prior, err)
	}

	pending, err := tb.Schedule(ctx, admin.ScheduleRequest{ID: "later", Route: "b", When: admin.When{Delay: time.Hour}})
	if err != nil || pending.Duplicate {
		t.Fatal(pending, err)
	}
	again, err := tb.Schedule(ctx, admin.ScheduleRequest{ID: "later", Route: "b", When: admin.When{Delay: 2 * time.Hour}})
	if err != nil || !again.Duplicate || again.DueAt != pending.DueAt {
		t.Errorf("Schedule of a pending id = %+v %v, want duplicate with due %d", again, err, pending.DueAt)
	}
	if _, err := tb.Reschedule(ctx, "later", admin.When{Delay: 30 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if prior, err := tb.Cancel(ctx, "later"); err != nil || prior != admin.StatePending {
		t.Fatalf("Cancel(pending) = %q %v", prior, err)
	}
	if st := tb.state(t, "later"); st != admin.StateCancelled {
		t.Errorf("cancelled message reads %q", st)
	}
	if prior, err := tb.Cancel(ctx, "later"); !errors.Is(err, admin.ErrConflict) || prior != admin.StateCancelled {
		t.Errorf("second Cancel = %q %v, want cancelled + conflict", prior, err)
	}

	if _, err := tb.Cancel(ctx, "ghost"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("Cancel(unknown) = %v, want not found", err)
	}
	if st := tb.state(t, "ghost"); st != "" {
		t.Fatalf("a cancel of an unknown id left state %q", st)
	}
	if res, err := tb.Schedule(ctx, admin.ScheduleRequest{ID: "ghost", Route: "a", When: admin.When{Delay: time.Hour}}); err != nil || res.Duplicate {
		t.Fatalf("Schedule after a cancel of the unknown id = %+v %v, want new", res, err)
	}
	for k, want := range map[string]int{"cancelled b": 1, "rescheduled b": 1, "duplicate a|delivered": 1, "duplicate b|pending": 1, "parked a": n + 1} {
		if got := tb.obs.get(k); got != want {
			t.Errorf("%s = %d, want %d", k, got, want)
		}
	}
}
