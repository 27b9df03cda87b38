package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/ingress"
	kafkain "github.com/delaybridge/delay-bridge/ingress/kafka"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/conformance"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// producer is a franz-go client: a different Kafka client than the kafka-go reader under
// test, so the wire format is checked end to end.
func producer(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatalf("franz-go client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t *testing.T, cl *kgo.Client, topic string, key, payload []byte, headers map[string]string) {
	t.Helper()
	rec := &kgo.Record{Topic: topic, Key: key, Value: payload}
	for k, v := range headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// conf is a source of route "r-<topic>" for topic, committing to group, with the
// bridge's default limits (limits.max_delay 8760h, limits.max_payload_bytes 1 MiB), its
// partitions owned through a membership on a redis-server of its own (instance "solo").
func conf(t testing.TB, brokers []string, group, topic string) kafkain.Config {
	t.Helper()
	rdb := testkit.StartRedis(t).Client()
	return kafkain.Config{
		Conn:       kafkaconn.Config{Brokers: brokers},
		GroupID:    group,
		Topic:      topic,
		Rules:      ingress.Rules{Route: "r-" + topic, MaxDelay: 8760 * time.Hour, MaxPayloadBytes: 1 << 20},
		Membership: membership.New(rdb, "kt", testkit.Uniq(t, "c")),
		Instance:   "solo",
		LeaseTTL:   time.Second,
	}
}

// fixedNow is the real clock (timers, so the source waits as in production) whose Now
// is fixed: the receive time the source must stamp.
type fixedNow struct {
	clock.Real
	t time.Time
}

func (f fixedNow) Now() time.Time { return f.t }

func TestConformance(t *testing.T) {
	conformance.RunSourceSuite(t, conformance.SourceHarness{
		Broker: envelope.BrokerKafka,
		Keys:   true,
		Fresh: func(t *testing.T) conformance.SourceFixture {
			topic := testkit.Uniq(t, "delay")
			addr, _ := testkit.StartKafka(t, 1, topic)
			cfg := conf(t, []string{addr}, testkit.Uniq(t, "group"), topic)
			cl := producer(t, addr)
			return conformance.SourceFixture{
				Source: topic,
				NewSource: func(t *testing.T) ingress.Source {
					s, err := kafkain.New(cfg)
					if err != nil {
						t.Fatalf("New: %v", err)
					}
					return s
				},
				Produce: func(t *testing.T, key, payload []byte, headers map[string]string) {
					produce(t, cl, topic, key, payload, headers)
				},
			}
		},
	})
}

// collect runs src until want items were acknowledged, then stops it.
func collect(t *testing.T, src ingress.Source, want int) (batches [][]ingress.Item) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	n := 0
	done := make(chan error, 1)
	enough := make(chan struct{})
	go func() {
		done <- src.Run(ctx, func(_ context.Context, items []ingress.Item) error {
			mu.Lock()
			defer mu.Unlock()
			batches = append(batches, items)
			n += len(items)
			if n >= want && n-len(items) < want {
				close(enough)
			}
			return nil
		})
	}()
	select {
	case <-enough:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("fewer than %d items within 60s", want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return batches
}

func TestRecordToItem(t *testing.T) {
	topic := testkit.Uniq(t, "delay")
	addr, _ := testkit.StartKafka(t, 1, topic)
	cl := producer(t, addr)
	ts := time.Now().Add(-10 * time.Second).Truncate(time.Millisecond)
	rec := &kgo.Record{Topic: topic, Value: []byte("v"), Timestamp: ts, Headers: []kgo.RecordHeader{
		{Key: envelope.HeaderDelay, Value: []byte("30000")},
		{Key: "bin", Value: []byte{0, 0xff, 'a'}},
		{Key: "dup", Value: []byte("1")}, {Key: "dup", Value: []byte("2")},
		{Key: "empty", Value: nil},
	}}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	recv := time.Now().Add(time.Hour) // an injected clock far from the record time
	cfg := conf(t, []string{addr}, testkit.Uniq(t, "g"), topic)
	cfg.Clock = fixedNow{t: recv}
	src, err := kafkain.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	it := collect(t, src, 1)[0][0]
	e := it.Env
	if want := topic + "/0/0/"; !strings.HasPrefix(e.ID, want) || len(e.ID) != len(want)+12 {
		t.Errorf("default id %q, want %q + a 12-digit content hash", e.ID, want)
	}
	if want := ts.UnixMilli() + 30000; e.DueAt != want {
		t.Errorf("due %d, want record timestamp + 30000 = %d", e.DueAt, want)
	}
	if e.ReceivedAt != recv.UnixMilli() {
		t.Errorf("received_at %d, want the injected clock %d", e.ReceivedAt, recv.UnixMilli())
	}
	if e.Route != "r-"+topic || e.SourceBroker != envelope.BrokerKafka || e.Source != topic {
		t.Errorf("route/broker/source = %q/%q/%q", e.Route, e.SourceBroker, e.Source)
	}
	want := []envelope.Header{{Key: envelope.HeaderDelay, Value: "30000"}, {Key: "bin", Value: "\x00\xffa"}, {Key: "dup", Value: "1"}, {Key: "dup", Value: "2"}, {Key: "empty", Value: ""}}
	if fmt.Sprintf("%#v", e.Headers) != fmt.Sprintf("%#v", want) {
		t.Errorf("headers\n got %#v\nwant %#v (order, duplicates, string values)", e.Headers, want)
	}
	if e.Key != nil {
		t.Errorf("null key became %q", e.Key)
	}
}

func TestBatchSizeAndOversizedPayload(t *testing.T) {
	topic := testkit.Uniq(t, "delay")
	addr, _ := testkit.StartKafka(t, 1, topic)
	cl := producer(t, addr)
	for i := 0; i < 25; i++ {
		produce(t, cl, topic, nil, []byte("small"), nil)
	}
	produce(t, cl, topic, nil, make([]byte, 3000), map[string]string{envelope.HeaderMessageID: "big"})
	cfg := conf(t, []string{addr}, testkit.Uniq(t, "g"), topic)
	cfg.Rules.MaxPayloadBytes = 2000
	cfg.BatchSize, cfg.BatchWait = 10, 50*time.Millisecond
	src, err := kafkain.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	batches := collect(t, src, 26)
	var last ingress.Item
	for _, b := range batches {
		if len(b) > 10 {
			t.Errorf("batch of %d, BatchSize is 10", len(b))
		}
		last = b[len(b)-1]
	}
	if last.Invalid != ingress.InvalidPayloadTooLarge || last.Env.ID != "big" || len(last.Env.Payload) != 3000 {
		t.Errorf("oversized record: invalid %q id %q, want payload_too_large, kept whole", last.Invalid, last.Env.ID)
	}
}

func TestBadCredentialsArePermanent(t *testing.T) {
	port := testkit.FreePort(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "bridge", "right"), kfake.SeedTopics(1, "delay"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "delay"
	cfg := conf(t, c.ListenAddrs(), "g", topic)
	conn := kafkaconn.Config{Brokers: c.ListenAddrs(), SASL: kafkaconn.SASL{Mechanism: "SCRAM-SHA-512", Username: "bridge", Password: "wrong"}}
	cfg.Conn = conn
	src, err := kafkain.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = src.Run(ctx, func(context.Context, []ingress.Item) error { return nil })
	if !fault.IsPermanent(err) {
		t.Fatalf("Run with a wrong password: %v, want a permanent error", err)
	}

	// The right password consumes through SCRAM.
	conn.SASL.Password = "right"
	cfg.Conn = conn
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation(), kgo.SASL(scramAuth("bridge", "right")))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce(t, cl, topic, nil, []byte("over scram"), nil)
	src, err = kafkain.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(t, src, 1)[0][0]; string(got.Env.Payload) != "over scram" {
		t.Fatalf("got %q", got.Env.Payload)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := conf(t, []string{"127.0.0.1:1"}, "g", "t")
	with := func(f func(*kafkain.Config)) kafkain.Config {
		c := good
		f(&c)
		return c
	}
	cases := map[string]kafkain.Config{
		"no topic":                             with(func(c *kafkain.Config) { c.Topic = ""; c.Rules.Route = "x" }),
		"no group":                             with(func(c *kafkain.Config) { c.GroupID = "" }),
		"no brokers":                           with(func(c *kafkain.Config) { c.Conn = kafkaconn.Config{} }),
		"no connection":                        with(func(c *kafkain.Config) { c.Conn = nil }),
		"no membership":                        with(func(c *kafkain.Config) { c.Membership = nil }),
		"no instance":                          with(func(c *kafkain.Config) { c.Instance = "" }),
		"bad instance":                         with(func(c *kafkain.Config) { c.Instance = "a|b" }),
		"fetch min bytes over the fetch limit": with(func(c *kafkain.Config) { c.FetchMinBytes = kafkain.MaxFetchBytes + 1 }),
		"bad mechanism": with(func(c *kafkain.Config) {
			c.Conn = kafkaconn.Config{Brokers: []string{"127.0.0.1:1"}, SASL: kafkaconn.SASL{Mechanism: "KERBEROS"}}
		}),
	}
	for name, c := range cases {
		if _, err := kafkain.New(c); !fault.IsPermanent(err) {
			t.Errorf("%s: %v, want a permanent error", name, err)
		}
	}
	s, err := kafkain.New(with(func(c *kafkain.Config) { c.Topic = "orders.delay" }))
	if err != nil || !strings.HasPrefix(s.Name(), "kafka:orders.delay") {
		t.Fatalf("New: %v %v", s, err)
	}
}

// TestFetchMinBytesReachesTheReaders: Config.FetchMinBytes (ingress.kafka_fetch_min_bytes)
// is the partition readers' MinBytes, 1 (answer as soon as a record arrives) when unset.
func TestFetchMinBytesReachesTheReaders(t *testing.T) {
	for _, tc := range []struct{ set, want int }{{0, 1}, {64 << 10, 64 << 10}, {kafkain.MaxFetchBytes, kafkain.MaxFetchBytes}} {
		cfg := conf(t, []string{"127.0.0.1:1"}, "g", "t")
		cfg.FetchMinBytes = tc.set
		s, err := kafkain.New(cfg)
		if err != nil {
			t.Fatalf("FetchMinBytes %d: %v", tc.set, err)
		}
		if got := kafkain.ReaderMinBytes(s); got != tc.want {
			t.Errorf("FetchMinBytes %d: readers' MinBytes %d, want %d", tc.set, got, tc.want)
		}
	}
}

func scramAuth(user, pass string) sasl.Mechanism {
	return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
}

// TestResumesAfterBrokerOutage: a broker outage (every connection cut, new ones
// refused) is not an error of Run; the source reports it unreachable, keeps retrying
// and consumes again once the broker answers. (A kfake restart would lose the topic
// and the group's offsets: a recreated topic, see recreate_test.go.)
func TestResumesAfterBrokerOutage(t *testing.T) {
	topic := testkit.Uniq(t, "delay")
	addr, _, proxy := testkit.StartKafkaBehindProxy(t, 1, topic)
	produce(t, producer(t, addr), topic, nil, []byte("before"), nil)
	cfg := conf(t, []string{addr}, "g", topic)
	cfg.StallTimeout = time.Second
	src, err := kafkain.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(_ context.Context, items []ingress.Item) error {
			for _, it := range items {
				got <- string(it.Env.Payload)
			}
			return nil
		})
	}()
	wait := func(want string) {
		t.Helper()
		for {
			select {
			case p := <-got:
				if p == want {
					return
				}
			case err := <-done:
				t.Fatalf("Run returned during the outage: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatalf("%q not consumed within 60s", want)
			}
		}
	}
	wait("before")
	proxy.SetDown(true)
	proxy.Cut()
	// The source reports the outage (the broker is gone: not a stall to rebuild for).
	for deadline := time.Now().Add(60 * time.Second); src.Health().State != ingress.StateUnreachable; {
		if time.Now().After(deadline) {
			t.Fatalf("state %+v during the outage, want unreachable", src.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if h := src.Health(); h.Rebuilds != 0 {
		t.Errorf("rebuilt while the broker was down: %+v", h)
	}
	proxy.SetDown(false)
	produce(t, producer(t, addr), topic, nil, []byte("after"), nil)
	wait("after")
	for deadline := time.Now().Add(60 * time.Second); src.Health().State != ingress.StateConsuming; {
		if time.Now().After(deadline) {
			t.Fatalf("state %+v after the broker came back, want consuming", src.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// BenchmarkSource measures consumption through the Source (fetch, parse, hand over,
// commit) with a handler that does nothing: b.N records are produced first, untimed.
func BenchmarkSource(b *testing.B) {
	topic := testkit.Uniq(b, "bench")
	addr, _ := testkit.StartKafka(b, 4, topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	payload := make([]byte, 200)
	var wg sync.WaitGroup
	for i := 0; i < b.N; i++ {
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: payload,
			Headers: []kgo.RecordHeader{{Key: envelope.HeaderDelay, Value: []byte("60000")}, {Key: envelope.HeaderMessageID, Value: []byte(fmt.Sprint("m", i))}}},
			func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
	}
	wg.Wait()
	src, err := kafkain.New(conf(b, []string{addr}, testkit.Uniq(b, "g"), topic))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex // one handler call per partition at a time, the partitions at once
	var n, batches int
	all := make(chan struct{})
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		done <- src.Run(ctx, func(_ context.Context, items []ingress.Item) error {
			mu.Lock()
			defer mu.Unlock()
			n += len(items)
			batches++
			if n == b.N {
				close(all)
			}
			return nil
		})
	}()
	select {
	case <-all:
	case err := <-done:
		b.Fatalf("Run: %v", err)
	}
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(b.N)/float64(batches), "records/batch")
}

// TestRecordLargerThanTheFetchLimitStillArrives: the reader fetches at most 1 MiB at a
// time (larger fetches livelock against a lagging kfake), yet a 3 MiB record — far over
// limits.max_payload_bytes — must still be read, to be dead-lettered rather than stall
// the partition.
func TestRecordLargerThanTheFetchLimitStillArrives(t *testing.T) {
	topic := testkit.Uniq(t, "delay")
	addr, _ := testkit.StartKafka(t, 1, topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerBatchMaxBytes(8<<20), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	produce(t, cl, topic, nil, make([]byte, 3<<20), map[string]string{envelope.HeaderMessageID: "huge"})
	produce(t, cl, topic, nil, []byte("after"), map[string]string{envelope.HeaderMessageID: "after"})
	src, err := kafkain.New(conf(t, []string{addr}, testkit.Uniq(t, "g"), topic))
	if err != nil {
		t.Fatal(err)
	}
	var got []ingress.Item
	for _, b := range collect(t, src, 2) {
		got = append(got, b...)
	}
	if got[0].Env.ID != "huge" || got[0].Invalid != ingress.InvalidPayloadTooLarge || len(got[0].Env.Payload) != 3<<20 || got[1].Env.ID != "after" {
		t.Fatalf("got %q (%s, %d bytes) then %q; want the 3 MiB record as payload_too_large, then the next one", got[0].Env.ID, got[0].Invalid, len(got[0].Env.Payload), got[1].Env.ID)
	}
}
