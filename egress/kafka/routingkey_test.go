package kafka_test

import (
	"context"
	"testing"
	"time"

	kafkaout "github.com/delaybridge/delay-bridge/egress/kafka"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/testkit"
)

func TestAMQPRoutingKeyBecomesKafkaKey(t *testing.T) {
	topic := testkit.Uniq(t, "rk")
	addr, _ := testkit.StartKafka(t, 4, topic)
	s := newSink(t, addr, map[string]string{"r": topic}, kafkaout.Options{})
	fromAMQP := env("a1", "r", nil)
	fromAMQP.SourceBroker, fromAMQP.RoutingKey = envelope.BrokerAMQP, "invoice.eu"
	keyed := env("a2", "r", []byte("own-key"))
	keyed.RoutingKey = "ignored"
	for i, err := range s.Publish(context.Background(), []*envelope.Envelope{fromAMQP, keyed}) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := map[string]string{}
	for _, rec := range newReader(t, addr, topic).records(t, 2, 30*time.Second) {
		got[string(rec.Value)] = string(rec.Key)
	}
	if got["p-a1"] != "invoice.eu" || got["p-a2"] != "own-key" {
		t.Fatalf("keys by payload %v; want the routing key for the key-less AMQP message and the own key otherwise", got)
	}
}
