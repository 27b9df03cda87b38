package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/testkit"
)

const kafkaRoute = `  - name: orders
    from: { kafka: { topic: orders.delay } }
    to:   { kafka: { topic: orders } }`

type kafkaEnv struct {
	redis  *testkit.Redis
	kaddr  string
	bridge *bridgeProc
	target *collector
	writer *kafka.Writer
}

func startKafkaEnv(t *testing.T, extra string) *kafkaEnv {
	t.Helper()
	r := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 4, "orders.delay", "orders", "dlq")
	cfg, admin := writeConfig(t, r.Addr(), kaddr, kafkaRoute, extra)
	e := &kafkaEnv{redis: r, kaddr: kaddr}
	e.target = collect(t, kaddr, "orders")
	e.bridge = startBridge(t, cfg, admin)
	e.writer = newWriter(t, kaddr, "orders.delay")
	t.Cleanup(func() { e.writer.Close() })
	return e
}

// produce sends n messages with delays from delayOf and returns the ledger entries.
func (e *kafkaEnv) produce(t *testing.T, prefix string, n int, delayOf func(i int) time.Duration) map[string]sent {
	t.Helper()
	out := make(map[string]sent, n)
	msgs := make([]kafka.Message, 0, n)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		d := delayOf(i)
		now := time.Now().Truncate(time.Millisecond)
		s := sent{id: id, key: "k" + strconv.Itoa(i%50), value: "payload " + id, delay: d, at: now}
		out[id] = s
		msgs = append(msgs, kafka.Message{Key: []byte(s.key), Value: []byte(s.value), Time: now, Headers: []kafka.Header{
			{Key: "x-delay", Value: []byte(strconv.FormatInt(d.Milliseconds(), 10))},
			{Key: "x-message-id", Value: []byte(id)},
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		}})
	}
	for len(msgs) > 0 {
		k := min(500, len(msgs))
		if err := e.writer.WriteMessages(context.Background(), msgs[:k]...); err != nil {
			t.Fatalf("produce: %v", err)
		}
		msgs = msgs[k:]
	}
	return out
}

// committed sums the bridge's committed offsets on the delay topic (the e2e kfake
// broker holds only this bridge's group, named group-…, and the collectors' groups).
func (e *kafkaEnv) committed(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := &kafka.Client{Addr: kafka.TCP(e.kaddr)}
	groups, err := c.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil {
		t.Fatalf("list groups: %v", err)
	}
	var sum int64
	for _, g := range groups.Groups {
		if !strings.HasPrefix(g.GroupID, "group-") {
			continue
		}
		res, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: g.GroupID, Topics: map[string][]int{"orders.delay": {0, 1, 2, 3}}})
		if err != nil {
			t.Fatalf("offset fetch: %v", err)
		}
		for _, p := range res.Topics["orders.delay"] {
			if p.CommittedOffset > 0 {
				sum += p.CommittedOffset
			}
		}
	}
	return sum
}

func TestKafkaDelaysArriveOnTimeOnceWithHeaders(t *testing.T) {
	e := startKafkaEnv(t, "")
	const n = 3000
	rng := rand.New(rand.NewPCG(1, 2))
	sentMsgs := e.produce(t, "m", n, func(int) time.Duration { return time.Duration(rng.IntN(5000)) * time.Millisecond })
	waitUntil(t, "all messages on the target", 60*time.Second, func() bool { return e.target.uniqueCount() >= n })
	got := e.target.snapshot()
	if dups := ledger(t, sentMsgs, got, "orders.delay"); dups != 0 {
		t.Errorf("%d duplicates without any fault", dups)
	}
	for _, a := range got[:10] {
		id := a.headers["x-message-id"]
		if want := "-" + strconv.FormatInt(sentMsgs[id].delay.Milliseconds(), 10); sentMsgs[id].delay > 0 && a.headers["x-delay"] != want {
			t.Errorf("%s: x-delay %q, want %q (negated)", id, a.headers["x-delay"], want)
		}
		if a.headers["x-delay-attempt"] != "1" {
			t.Errorf("%s: x-delay-attempt %q, want 1", id, a.headers["x-delay-attempt"])
		}
		if a.headers["traceparent"] == "" {
			t.Errorf("%s: traceparent header lost", id)
		}
	}
	var stats struct {
		Totals struct{ Pending, Inflight, Dead int64 }
	}
	waitUntil(t, "shards empty", 10*time.Second, func() bool {
		e.bridge.api("GET", "/v1/stats", nil, &stats)
		return stats.Totals.Pending == 0 && stats.Totals.Inflight == 0
	})
	checkCharts(t, e.bridge, "orders", n)
}

func TestKafkaKill9MidFlightLosesNothing(t *testing.T) {
	e := startKafkaEnv(t, "")
	const n = 2000
	rng := rand.New(rand.NewPCG(3, 4))
	sentMsgs := e.produce(t, "k", n, func(int) time.Duration { return time.Duration(rng.IntN(4000)) * time.Millisecond })
	time.Sleep(1500 * time.Millisecond) // some fired, some in the wheel, some pending
	e.bridge.kill()
	more := e.produce(t, "after-kill", 200, func(int) time.Duration { return 500 * time.Millisecond })
	for k, v := range more {
		sentMsgs[k] = v
	}
	e.bridge.start()
	waitAllArrived(t, e.target, sentMsgs, 60*time.Second)
	dups := ledger(t, sentMsgs, e.target.snapshot(), "orders.delay")
	t.Logf("kill -9 mid-flight: %d messages, %d duplicates", len(sentMsgs), dups)
}

func TestKafkaRedisOutageStopsIngressAndResumes(t *testing.T) {
	e := startKafkaEnv(t, "")
	before := e.produce(t, "pre", 300, func(i int) time.Duration { return time.Duration(i%10) * 100 * time.Millisecond })
	waitUntil(t, "first batch delivered", 30*time.Second, func() bool { return e.target.uniqueCount() >= 300 })

	waitUntil(t, "the first batch's offsets committed", 10*time.Second, func() bool { return e.committed(t) == 300 })
	e.redis.Kill()
	during := e.produce(t, "during", 300, func(i int) time.Duration { return time.Duration(i%10) * 100 * time.Millisecond })
	time.Sleep(3 * time.Second)
	if n := e.target.uniqueCount(); n != 300 {
		t.Fatalf("%d messages arrived while Redis was down, want only the 300 from before", n)
	}
	if c := e.committed(t); c != 300 {
		t.Fatalf("ingress committed %d offsets while Redis was down, want 300 (nothing past what was parked)", c)
	}
	e.redis.Restart()
	waitUntil(t, "messages produced during the outage delivered", 60*time.Second, func() bool { return e.target.uniqueCount() >= 600 })
	for k, v := range during {
		before[k] = v
	}
	dups := ledger(t, before, e.target.snapshot(), "orders.delay")
	waitUntil(t, "every offset committed after the outage", 10*time.Second, func() bool { return e.committed(t) == 600 })
	t.Logf("redis outage: 600 messages, %d duplicates", dups)
}

func TestKafkaInvalidInputAndCancel(t *testing.T) {
	e := startKafkaEnv(t, "")
	ctx := context.Background()
	now := time.Now()
	bad := []kafka.Message{
		{Value: []byte("bad delay"), Time: now, Headers: []kafka.Header{{Key: "x-delay", Value: []byte("soon")}, {Key: "x-message-id", Value: []byte("bad-1")}}},
		{Value: []byte("too far"), Time: now, Headers: []kafka.Header{{Key: "x-delay", Value: []byte(strconv.FormatInt((400 * 24 * time.Hour).Milliseconds(), 10))}, {Key: "x-message-id", Value: []byte("bad-2")}}},
		{Value: []byte("bad deliver-at"), Time: now, Headers: []kafka.Header{{Key: "x-deliver-at", Value: []byte("tomorrow")}, {Key: "x-message-id", Value: []byte("bad-3")}}},
		{Value: []byte("to cancel by record"), Time: now, Headers: []kafka.Header{{Key: "x-delay", Value: []byte("3000")}, {Key: "x-message-id", Value: []byte("c-1")}}},
		{Value: []byte("to cancel by api"), Time: now, Headers: []kafka.Header{{Key: "x-delay", Value: []byte("3000")}, {Key: "x-message-id", Value: []byte("c-2")}}},
		{Value: []byte("kept"), Time: now, Headers: []kafka.Header{{Key: "x-deliver-at", Value: []byte(now.Add(3 * time.Second).UTC().Format(time.RFC3339Nano))}, {Key: "x-message-id", Value: []byte("ok-1")}}},
	}
	if err := e.writer.WriteMessages(ctx, bad...); err != nil {
		t.Fatal(err)
	}
	var msg struct {
		State string `json:"state"`
		DueAt int64  `json:"due_at"`
	}
	waitUntil(t, "c-2 pending", 10*time.Second, func() bool {
		return e.bridge.api("GET", "/v1/messages/c-2", nil, &msg) == 200 && msg.State == "pending"
	})
	if want := now.Truncate(time.Millisecond).Add(3 * time.Second).UnixMilli(); msg.DueAt != want {
		t.Errorf("c-2 due_at %d, want %d", msg.DueAt, want)
	}
	if code := e.bridge.api("DELETE", "/v1/messages/c-2", nil, nil); code != 200 {
		t.Fatalf("cancel over HTTP: status %d", code)
	}
	if code := e.bridge.api("DELETE", "/v1/messages/never-seen", nil, nil); code != 404 {
		t.Fatalf("cancel of an unknown id: status %d, want 404", code)
	}
	if err := e.writer.WriteMessages(ctx, kafka.Message{Value: []byte("cancel"), Headers: []kafka.Header{{Key: "x-delay-cancel", Value: []byte("c-1")}}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "ok-1 delivered", 20*time.Second, func() bool { return e.target.uniqueCount() >= 1 })
	time.Sleep(1500 * time.Millisecond) // c-1 and c-2 were due with ok-1: give them every chance to (wrongly) arrive
	for _, a := range e.target.snapshot() {
		if id := a.headers["x-message-id"]; id != "ok-1" {
			t.Errorf("%s arrived; only ok-1 should (the rest were invalid or cancelled)", id)
		}
	}
	var dead struct {
		Messages []struct {
			ID     string `json:"id"`
			Reason string `json:"reason"`
		} `json:"messages"`
	}
	if code := e.bridge.api("GET", "/v1/dead?limit=100", nil, &dead); code != 200 {
		t.Fatalf("GET /v1/dead: %d", code)
	}
	reasons := map[string]string{}
	for _, m := range dead.Messages {
		reasons[m.ID] = m.Reason
	}
	for _, id := range []string{"bad-1", "bad-2", "bad-3"} {
		if reasons[id] == "" {
			t.Errorf("%s not in the dead letters with a reason (got %v)", id, reasons)
		}
	}
	if code := e.bridge.api("GET", "/v1/messages/c-1", nil, &msg); code != 200 || msg.State != "cancelled" {
		t.Errorf("c-1 after cancel: status %d state %q, want cancelled", code, msg.State)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code := e.bridge.api("GET", path, nil, nil); code != 200 {
			t.Errorf("GET %s: %d", path, code)
		}
	}
}
