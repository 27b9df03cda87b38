package testkit

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaProcessServesAndStops: the kfake process answers as a broker (a record
// produced to a seeded topic is fetched back) and is gone once its test ended.
func TestKafkaProcessServesAndStops(t *testing.T) {
	var addr string
	t.Run("serves", func(t *testing.T) {
		addr = StartKafkaProcess(t, 2, "kp.in")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("kp.in"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "kp.in", Value: []byte("hello")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		for {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("the record produced was not fetched back: %v", err)
			}
			got := ""
			fs.EachRecord(func(r *kgo.Record) { got = string(r.Value) })
			if got == "hello" {
				return
			}
		}
	})
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("kfake still listens on %s after its test ended", addr)
	}
}
