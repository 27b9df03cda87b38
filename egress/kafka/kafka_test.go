package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	kafkaout "github.com/delaybridge/delay-bridge/egress/kafka"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/conformance"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reader consumes a topic with franz-go: a different client than the kafka-go sink
// under test.
type reader struct {
	cl *kgo.Client
	// buffered records fetched but not yet returned
	buf []*kgo.Record
}

func newReader(t testing.TB, addr string, topics ...string) *reader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("franz-go client: %v", err)
	}
	t.Cleanup(cl.Close)
	return &reader{cl: cl}
}

func (r *reader) records(t testing.TB, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(r.buf) < n {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records within %s", len(r.buf), n, timeout)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		r.buf = append(r.buf, fs.Records()...)
	}
	out := r.buf[:n]
	r.buf = r.buf[n:]
	return out
}

func received(recs []*kgo.Record) []conformance.Received {
	out := make([]conformance.Received, len(recs))
	for i, rec := range recs {
		h := map[string]string{}
		for _, kv := range rec.Headers {
			h[kv.Key] = string(kv.Value)
		}
		out[i] = conformance.Received{Key: rec.Key, Payload: rec.Value, Headers: h}
	}
	return out
}

func newSink(t testing.TB, addr string, routes map[string]string, opts kafkaout.Options) *kafkaout.Sink {
	t.Helper()
	s, err := kafkaout.New(kafkaconn.Config{Brokers: []string{addr}}, routes, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	conformance.RunSinkSuite(t, conformance.SinkHarness{
		Broker: "kafka",
		Keys:   true,
		Fresh: func(t *testing.T) conformance.SinkFixture {
			target := testkit.Uniq(t, "target")
			addr, _ := testkit.StartKafka(t, 3, target)
			r := newReader(t, addr, target)
			return conformance.SinkFixture{
				Sink:          newSink(t, addr, map[string]string{"orders": target}, kafkaout.Options{}),
				Route:         "orders",
				Target:        target,
				MissingTarget: target + "-missing",
				Consume: func(t *testing.T, n int, timeout time.Duration) []conformance.Received {
					return received(r.records(t, n, timeout))
				},
			}
		},
	})
}

func env(id, route string, key []byte) *envelope.Envelope {
	return &envelope.Envelope{ID: id, Route: route, Source: "src.delay", SourceBroker: envelope.BrokerKafka, DueAt: time.Now().UnixMilli(), Key: key, Payload: []byte("p-" + id)}
}

// TestKeyPartitionMatchesJavaClient publishes keyed messages through the sink and the
// same keys through franz-go's default partitioner (murmur2, as the Java client), and
// checks every key landed on the same partition number.
func TestKeyPartitionMatchesJavaClient(t *testing.T) {
	ours, theirs := testkit.Uniq(t, "ours"), testkit.Uniq(t, "theirs")
	addr, _ := testkit.StartKafka(t, 12, ours, theirs)
	s := newSink(t, addr, map[string]string{"r": ours}, kafkaout.Options{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr)) // default: sticky key partitioner, Kafka-compatible murmur2
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 300
	var msgs []*envelope.Envelope
	for i := 0; i < n; i++ {
		key := []byte(fmt.Sprintf("customer-%d-%x", i, i*7919))
		msgs = append(msgs, env(fmt.Sprint("m", i), "r", key))
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: theirs, Key: key, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for i, err := range s.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	partOf := func(topic string) map[string]int32 {
		m := map[string]int32{}
		for _, rec := range newReader(t, addr, topic).records(t, n, 30*time.Second) {
			m[string(rec.Key)] = rec.Partition
		}
		return m
	}
	a, b := partOf(ours), partOf(theirs)
	used := map[int32]bool{}
	for k, p := range b {
		used[p] = true
		if a[k] != p {
			t.Errorf("key %q: sink chose partition %d, the Java-compatible partitioner %d", k, a[k], p)
		}
	}
	if len(used) < 6 {
		t.Errorf("keys spread over only %d of 12 partitions", len(used))
	}
}

func TestMissingTopicIsRetryableAndRecovers(t *testing.T) {
	target := testkit.Uniq(t, "late")
	addr, _ := testkit.StartKafka(t, 1)
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{})
	errs := s.Publish(context.Background(), []*envelope.Envelope{env("a", "r", nil)})
	if errs[0] == nil {
		t.Fatal("publish to a topic that does not exist succeeded (auto-creation must be off)")
	}
	if fault.IsPermanent(errs[0]) {
		t.Fatalf("missing topic must be retryable (it may be created later): %v", errs[0])
	}
	// The topic is created; a retry succeeds once the sink's metadata lists it.
	adm, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = target, 1, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), adm)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic: %v %+v", err, resp)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		errs = s.Publish(context.Background(), []*envelope.Envelope{env("a", "r", nil)})
		if errs[0] == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after the topic was created: %v", errs[0])
		}
		time.Sleep(200 * time.Millisecond) // the dispatcher's retry backoff, compressed
	}
	if got := newReader(t, addr, target).records(t, 1, 30*time.Second); got[0].Headers[0].Key == "" {
		t.Fatal("no headers")
	}
}

func TestOversizedRecordIsPermanentAndAlone(t *testing.T) {
	target := testkit.Uniq(t, "t")
	addr, _ := testkit.StartKafka(t, 1, target)
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{BatchBytes: 4096})
	big := env("big", "r", nil)
	big.Payload = bytes.Repeat([]byte("x"), 10000)
	big2 := env("big2", "r", nil)
	big2.Headers = []envelope.Header{{Key: "h", Value: string(bytes.Repeat([]byte("y"), 10000))}}
	errs := s.Publish(context.Background(), []*envelope.Envelope{env("a", "r", nil), big, env("b", "r", nil), big2, env("c", "r", nil)})
	for _, i := range []int{0, 2, 4} {
		if errs[i] != nil {
			t.Fatalf("neighbour %d of an oversized record failed: %v", i, errs[i])
		}
	}
	for _, i := range []int{1, 3} {
		if !fault.IsPermanent(errs[i]) {
			t.Fatalf("oversized record %d: %v, want a permanent error", i, errs[i])
		}
	}
	got := newReader(t, addr, target).records(t, 3, 30*time.Second)
	if string(got[0].Value) != "p-a" || string(got[1].Value) != "p-b" || string(got[2].Value) != "p-c" {
		t.Fatalf("arrived %q %q %q, want a, b, c in order", got[0].Value, got[1].Value, got[2].Value)
	}
}

func TestDeadLetters(t *testing.T) {
	dlq := testkit.Uniq(t, "dlq")
	addr, _ := testkit.StartKafka(t, 1, dlq)
	s := newSink(t, addr, nil, kafkaout.Options{})
	d := s.DeadLetters(dlq)
	if d.Topic() != dlq {
		t.Fatal(d.Topic())
	}
	e := env("dead-1", "orders", []byte("k"))
	e.Attempt, e.Reason = 10, "publish failed 10 times: unknown topic"
	e.Headers = []envelope.Header{{Key: envelope.HeaderDelay, Value: "100"}, {Key: "traceparent", Value: "t"}}
	if err := d.PublishDead(context.Background(), []*envelope.Envelope{e}); err != nil {
		t.Fatal(err)
	}
	got := received(newReader(t, addr, dlq).records(t, 1, 30*time.Second))[0]
	want := map[string]string{
		envelope.HeaderDelay: "-100", "traceparent": "t", envelope.HeaderMessageID: "dead-1",
		envelope.HeaderAttempt: "10", envelope.HeaderSource: "src.delay", envelope.HeaderDueAt: fmt.Sprint(e.DueAt),
		kafkaout.HeaderDeadReason: e.Reason,
	}
	if fmt.Sprint(got.Headers) != fmt.Sprint(want) || string(got.Key) != "k" || string(got.Payload) != "p-dead-1" {
		t.Fatalf("dead letter\n got %v %q %q\nwant %v", got.Headers, got.Key, got.Payload, want)
	}
	if err := s.DeadLetters("").PublishDead(context.Background(), []*envelope.Envelope{e}); !fault.IsPermanent(err) {
		t.Fatalf("no DLQ topic: %v", err)
	}
}

func TestBrokerGoneFailsWithinDeadline(t *testing.T) {
	target := testkit.Uniq(t, "t")
	addr, c := testkit.StartKafka(t, 1, target)
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{})
	if errs := s.Publish(context.Background(), []*envelope.Envelope{env("a", "r", nil)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan []error, 1)
	go func() { done <- s.Publish(ctx, []*envelope.Envelope{env("b", "r", nil), env("c", "r", nil)}) }()
	select {
	case errs := <-done:
		for i, err := range errs {
			if err == nil {
				t.Errorf("message %d published to a closed broker", i)
			} else if fault.IsPermanent(err) {
				t.Errorf("broker outage must be retryable: %v", err)
			}
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Publish did not return after its context expired")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := kafkaout.New(kafkaconn.Config{}, nil, kafkaout.Options{}); !fault.IsPermanent(err) {
		t.Errorf("no brokers: %v", err)
	}
	if _, err := kafkaout.New(kafkaconn.Config{Brokers: []string{"x:1"}}, map[string]string{"r": ""}, kafkaout.Options{}); !fault.IsPermanent(err) {
		t.Errorf("empty topic: %v", err)
	}
}

// BenchmarkPublish measures the sink's Publish throughput against kfake (in process, so
// it measures the client path and kfake, not a network or disk).
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			target := testkit.Uniq(b, "bench")
			addr, _ := testkit.StartKafka(b, 8, target)
			s := newSink(b, addr, map[string]string{"r": target}, kafkaout.Options{})
			msgs := make([]*envelope.Envelope, size)
			for i := range msgs {
				msgs[i] = env(fmt.Sprint("m", i), "r", []byte(fmt.Sprint("key", i)))
				msgs[i].Payload = bytes.Repeat([]byte("x"), 200)
				msgs[i].Headers = []envelope.Header{{Key: envelope.HeaderDelay, Value: "1000"}, {Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, err := range s.Publish(context.Background(), msgs) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
