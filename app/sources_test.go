package app

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/config"
	kafkain "github.com/delaybridge/delay-bridge/ingress/kafka"
)

// TestKafkaSourceConfigCarriesIngressSettings: ingress.kafka_fetch_min_bytes and
// ingress.stall_timeout reach the Kafka source, and the configuration's bound on the
// former is the source's own fetch limit.
func TestKafkaSourceConfigCarriesIngressSettings(t *testing.T) {
	cfg := config.Default()
	cfg.Ingress.KafkaFetchMinBytes = 64 << 10
	cfg.Ingress.StallTimeout = 42 * time.Second
	b := &Bridge{cfg: cfg}
	r := config.Route{Name: "orders"}
	r.From.Kafka = &config.KafkaEndpoint{Topic: "orders.delay"}
	got := b.kafkaSourceConfig(r, nil)
	if got.FetchMinBytes != 64<<10 || got.StallTimeout != 42*time.Second || got.Topic != "orders.delay" {
		t.Errorf("kafka source config: FetchMinBytes %d, StallTimeout %s, Topic %q; want 65536, 42s, orders.delay",
			got.FetchMinBytes, got.StallTimeout, got.Topic)
	}
	if config.MaxKafkaFetchMinBytes != kafkain.MaxFetchBytes {
		t.Errorf("config.MaxKafkaFetchMinBytes %d, ingress/kafka.MaxFetchBytes %d: the bound must be the readers' fetch limit",
			config.MaxKafkaFetchMinBytes, kafkain.MaxFetchBytes)
	}
}
