package kafka

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
	"github.com/delaybridge/delay-bridge/testkit"
)

// BenchmarkWritePath compares the sink's publish (one produce request per leader) with
// a kafka-go Writer configured as the sink used to be (BatchTimeout 1ns, BatchSize 128,
// RequiredAcks all, MaxAttempts 1, Murmur2), both building the same records from the
// same messages, against kfake in process (6 partitions, 100-byte values, keyed). It
// reports ns/msg; allocs/op are per publish.
func BenchmarkWritePath(b *testing.B) {
	for _, size := range []int{1, 16, 1000} {
		msgs := make([]*envelope.Envelope, size)
		for i := range msgs {
			msgs[i] = &envelope.Envelope{
				ID: fmt.Sprint("m", i), Route: "r", Source: "src.delay", SourceBroker: envelope.BrokerKafka, DueAt: 1795371368865,
				Key: []byte(fmt.Sprint("customer-", i)), Payload: bytes.Repeat([]byte("x"), 100),
				Headers: []envelope.Header{{Key: envelope.HeaderDelay, Value: "5000"}},
			}
		}
		b.Run(fmt.Sprintf("path=sink/msgs=%d", size), func(b *testing.B) {
			topic := testkit.Uniq(b, "bench")
			addr, _ := testkit.StartKafka(b, 6, topic)
			s, err := New(kafkaconn.Config{Brokers: []string{addr}}, map[string]string{"r": topic}, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			runWritePath(b, size, func() error {
				for _, err := range s.Publish(context.Background(), msgs) {
					if err != nil {
						return err
					}
				}
				return nil
			})
		})
		b.Run(fmt.Sprintf("path=writer/msgs=%d", size), func(b *testing.B) {
			topic := testkit.Uniq(b, "bench")
			addr, _ := testkit.StartKafka(b, 6, topic)
			tr, err := kafkaconn.Transport(kafkaconn.Config{Brokers: []string{addr}})
			if err != nil {
				b.Fatal(err)
			}
			w := &kafka.Writer{
				Addr: kafka.TCP(addr), Balancer: &kafka.Murmur2Balancer{}, RequiredAcks: kafka.RequireAll,
				BatchTimeout: time.Nanosecond, BatchSize: 128, BatchBytes: DefaultBatchBytes, MaxAttempts: 1,
				WriteTimeout: DefaultAnswerTimeout, Transport: tr,
			}
			defer tr.CloseIdleConnections()
			defer w.Close()
			runWritePath(b, size, func() error {
				recs := make([]kafka.Message, len(msgs))
				for i, env := range msgs {
					recs[i] = kafka.Message{Topic: topic, Key: kafkaKey(env), Value: env.Payload,
						Headers: kafkaHeaders(egress.OutgoingHeaders(env, env.Attempt+1))}
				}
				return w.WriteMessages(context.Background(), recs...)
			})
		})
	}
}

func runWritePath(b *testing.B, size int, publish func() error) {
	if err := publish(); err != nil { // connections and metadata before timing
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := publish(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/msg")
}
