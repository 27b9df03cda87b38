package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/testkit"
)

// inputEnv is a running bridge with one Kafka route in.delay -> in.out (kfake, 2
// partitions), its own redis-server, a writer to the delay topic and a reader of the
// target.
type inputEnv struct {
	b      *Bridge
	writer *kafka.Writer
	target *kgo.Client
}

func startInputBridge(t *testing.T, shards int) *inputEnv {
	t.Helper()
	rs := testkit.StartRedis(t)
	kafkaAddr, _ := testkit.StartKafka(t, 2, "in.delay", "in.out")
	cfg := config.Default()
	cfg.Instance = testkit.Uniq(t, "input")
	cfg.Shards = shards
	cfg.Prefix = testkit.Uniq(t, "input")
	cfg.Redis.Addrs = []string{rs.Addr()}
	cfg.Kafka.Brokers = []string{kafkaAddr}
	cfg.Kafka.GroupID = testkit.Uniq(t, "g")
	cfg.Routes = []config.Route{{
		Name: "in",
		From: config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: "in.delay"}},
		To:   config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: "in.out"}},
	}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "ready", 60*time.Second, func() (bool, string) {
		if err := b.Backend().Ready(context.Background()); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(kafkaAddr), Topic: "in.delay", RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Balancer: &kafka.Murmur2Balancer{}, Transport: tr}
	t.Cleanup(func() { w.Close(); tr.CloseIdleConnections() })
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeTopics("in.out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &inputEnv{b: b, writer: w, target: cl}
}

// readTarget returns the first n records of the target topic (all partitions, each in
// partition order), failing after limit.
func (e *inputEnv) readTarget(t *testing.T, n int, limit time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := e.target.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d target records within %s", len(out), n, limit)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// An x-deliver-at in unix seconds (10 digits) is not taken as milliseconds (due in 1970,
// so at once): the message ends in the dead letters with reason bad_deliver_at and is
// never delivered, while a good one beside it is.
func TestUnixSecondsDeliverAtIsDeadLettered(t *testing.T) {
	e := startInputBridge(t, 4)
	now := time.Now()
	secs := strconv.FormatInt(now.Add(time.Second).Unix(), 10)
	ms := strconv.FormatInt(now.Add(time.Second).UnixMilli(), 10)
	err := e.writer.WriteMessages(context.Background(),
		kafka.Message{Key: []byte("k"), Value: []byte("seconds"), Headers: []kafka.Header{
			{Key: "x-deliver-at", Value: []byte(secs)}, {Key: "x-message-id", Value: []byte("secs-1")}}},
		kafka.Message{Key: []byte("k"), Value: []byte("millis"), Headers: []kafka.Header{
			{Key: "x-deliver-at", Value: []byte(ms)}, {Key: "x-message-id", Value: []byte("ms-1")}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	var got admin.Message
	waitFor(t, "secs-1 dead", 30*time.Second, func() (bool, string) {
		m, err := e.b.Backend().Get(context.Background(), "secs-1")
		if err != nil {
			return false, err.Error()
		}
		got = m
		return m.State == admin.StateDead, fmt.Sprintf("%+v", m)
	})
	if !strings.HasPrefix(got.Reason, "bad_deliver_at") || !strings.Contains(got.Reason, secs) {
		t.Errorf("reason %q, want bad_deliver_at naming %s", got.Reason, secs)
	}
	recs := e.readTarget(t, 1, 30*time.Second)
	if id := headerOf(recs[0], "x-message-id"); id != "ms-1" || string(recs[0].Value) != "millis" {
		t.Errorf("delivered %s %q, want only ms-1", id, recs[0].Value)
	}
	// The dead one stays dead: nothing else arrives while the good one's due time passes
	// again (a generous second, not a timing assertion: any arrival is a failure).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if more := e.target.PollFetches(ctx).Records(); len(more) > 0 {
		t.Errorf("unexpected deliveries: %s", headerOf(more[0], "x-message-id"))
	}
}

func headerOf(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Same key, same due time: messages are published in the order the bridge received them
// (to the millisecond), although they sit on different shards and are claimed in
// whatever order the shards' pumps run. Each message is produced only after the previous
// one is parked and the clock has moved past its receive millisecond, so receive order
// is source order; ids are shuffled so shard and claim order are not.
func TestSameKeySameDueTimeKeepsReceiveOrder(t *testing.T) {
	const n = 100
	e := startInputBridge(t, 16)
	ctx := context.Background()
	ids := make([]string, n)
	for i, p := range rand.Perm(n) {
		ids[i] = fmt.Sprintf("ord-%03d", p)
	}
	var due time.Time
	var last int64
	for i, id := range ids {
		if i == 0 {
			// Far enough ahead for all n to be parked before it (each takes a few ms).
			due = time.Now().Add(20 * time.Second).Truncate(time.Millisecond)
		}
		err := e.writer.WriteMessages(ctx, kafka.Message{Key: []byte("same-key"), Value: []byte(strconv.Itoa(i)),
			Headers: []kafka.Header{
				{Key: "x-deliver-at", Value: []byte(strconv.FormatInt(due.UnixMilli(), 10))},
				{Key: "x-message-id", Value: []byte(id)},
			}})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, id+" parked", 30*time.Second, func() (bool, string) {
			m, err := e.b.Backend().Get(ctx, id)
			if err != nil {
				return false, err.Error()
			}
			if m.State != admin.StatePending && m.State != admin.StateInflight {
				return false, m.State
			}
			last = m.ReceivedAt
			return true, ""
		})
		for time.Now().UnixMilli() <= last {
			time.Sleep(time.Millisecond)
		}
	}
	// Every message must be in the wheel before the due tick for the order to be judged:
	// parked more than the claim lookahead (2s) ahead leaves the pumps time to claim.
	if left := time.Until(due); left < 3*time.Second {
		t.Fatalf("producing left only %s before the due time; cannot judge order", left)
	}
	t.Logf("%d messages parked one by one, %s before their common due time", n, time.Until(due).Round(time.Millisecond))
	recs := e.readTarget(t, n, 60*time.Second)
	outOfOrder := 0
	var got []string
	for i, r := range recs {
		got = append(got, string(r.Value))
		if i > 0 {
			a, _ := strconv.Atoi(string(recs[i-1].Value))
			b, _ := strconv.Atoi(string(r.Value))
			if b < a {
				outOfOrder++
			}
		}
		if d := headerOf(r, "x-delay-due-at"); d != strconv.FormatInt(due.UnixMilli(), 10) {
			t.Fatalf("record %d due %s, want %d", i, d, due.UnixMilli())
		}
	}
	if outOfOrder > 0 {
		t.Errorf("%d of %d adjacent same-key pairs out of source order: %v", outOfOrder, n-1, got)
	}
}
