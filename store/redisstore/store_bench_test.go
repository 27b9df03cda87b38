package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/testkit"
)

// Store throughput against a local redis-server (AOF on, everysec), one client, no
// concurrency: what one pump or one ingress batch loop gets per Redis round trip.
//
//	go test ./scheduler/ -run '^$' -bench 'BenchmarkStore' -benchtime 2s

var benchBatches = []int{1, 10, 100, 1000}

func benchStore(b *testing.B, shards int) (*Store, *redis.Client) {
	b.Helper()
	r := testkit.StartRedis(b)
	c := r.Client()
	s, err := New(context.Background(), c, Options{Shards: shards, DoneWindow: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	return s, c
}

// benchEnv is a typical small Kafka message: 100-byte payload, key, two headers.
func benchEnv(id string, due int64) *envelope.Envelope {
	return &envelope.Envelope{
		ID: id, Route: "orders", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
		DueAt: due, ReceivedAt: due, Key: []byte("customer-42"), Payload: make([]byte, 100),
		Headers: []envelope.Header{{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, {Key: "x-delay", Value: "60000"}},
	}
}

func reportRate(b *testing.B, msgs int) {
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkStorePark: one Park call per batch, ids spread over 64 shards (one pipelined
// round trip carrying one script call per touched shard).
func BenchmarkStorePark(b *testing.B) {
	for _, n := range benchBatches {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			s, _ := benchStore(b, 64)
			ctx := context.Background()
			envs := make([]*envelope.Envelope, n)
			seq := 0
			b.ResetTimer()
			for range b.N {
				for j := range envs {
					envs[j] = benchEnv(fmt.Sprintf("park-%d", seq), t0+int64(seq))
					seq++
				}
				if _, _, err := s.Park(ctx, envs); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, seq)
		})
	}
}

// BenchmarkStoreClaim: one Claim call per batch from one shard; the untimed refill parks
// the next 50k messages whenever the shard runs dry.
func BenchmarkStoreClaim(b *testing.B) {
	for _, n := range benchBatches {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			s, c := benchStore(b, 1)
			ctx := context.Background()
			tok, err := s.AcquireLease(ctx, 0, "bench", time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			seq, left, claimed := 0, 0, 0
			refill := func() {
				b.StopTimer()
				// Drop what was claimed so memory stays flat over long runs.
				c.Del(ctx, s.keys[0].inflight, s.keys[0].msg)
				const chunk = 50_000
				envs := make([]*envelope.Envelope, 0, 1000)
				for i := 0; i < chunk; i++ {
					envs = append(envs, benchEnv(fmt.Sprintf("claim-%d", seq), t0))
					seq++
					if len(envs) == cap(envs) {
						if _, _, err := s.Park(ctx, envs); err != nil {
							b.Fatal(err)
						}
						envs = envs[:0]
					}
				}
				left += chunk
				b.StartTimer()
			}
			b.ResetTimer()
			for range b.N {
				if left < n {
					refill()
				}
				items, _, err := s.Claim(ctx, 0, "bench", tok, t0, t0+30_000, n)
				if err != nil || len(items) != n {
					b.Fatalf("claimed %d of %d: %v", len(items), n, err)
				}
				left -= n
				claimed += n
			}
			reportRate(b, claimed)
		})
	}
}

// BenchmarkStoreClaimAck: the pump's steady state per batch, claim then ack.
func BenchmarkStoreClaimAck(b *testing.B) {
	for _, n := range benchBatches {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			s, _ := benchStore(b, 1)
			ctx := context.Background()
			tok, err := s.AcquireLease(ctx, 0, "bench", time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			seq, left, done := 0, 0, 0
			ackIDs := make([]string, 0, n)
			b.ResetTimer()
			for range b.N {
				if left < n {
					b.StopTimer()
					envs := make([]*envelope.Envelope, 0, 1000)
					for range 20 {
						envs = envs[:0]
						for range 1000 {
							envs = append(envs, benchEnv(fmt.Sprintf("ca-%d", seq), t0))
							seq++
						}
						if _, _, err := s.Park(ctx, envs); err != nil {
							b.Fatal(err)
						}
					}
					left += 20_000
					b.StartTimer()
				}
				items, _, err := s.Claim(ctx, 0, "bench", tok, t0, t0+30_000, n)
				if err != nil || len(items) != n {
					b.Fatalf("claimed %d of %d: %v", len(items), n, err)
				}
				ackIDs = ackIDs[:0]
				for _, e := range items {
					ackIDs = append(ackIDs, e.ID)
				}
				if err := s.Ack(ctx, 0, ackIDs, t0); err != nil {
					b.Fatal(err)
				}
				left -= n
				done += n
			}
			reportRate(b, done)
		})
	}
}
