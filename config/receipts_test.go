package config

import (
	"strings"
	"testing"
)

// TestReceiptsValidate: routes[].receipts takes one broker, a topic other than the
// route's own or an exchange with an optional routing key, and Kafka receipts need
// kafka.brokers; each problem names its key.
func TestReceiptsValidate(t *testing.T) {
	amqpRoute := func() Route {
		return Route{Name: "r",
			From: Endpoint{AMQP: &AMQPEndpoint{Queue: "q"}},
			To:   Endpoint{AMQP: &AMQPEndpoint{Exchange: "t"}}}
	}
	kafkaRoute := func() Route {
		return Route{Name: "r",
			From: Endpoint{Kafka: &KafkaEndpoint{Topic: "in"}},
			To:   Endpoint{Kafka: &KafkaEndpoint{Topic: "out"}}}
	}
	cases := []struct {
		name     string
		route    Route
		receipts *Endpoint
		brokers  []string
		key      string // "" = valid
		want     string
	}{
		{"kafka", kafkaRoute(), &Endpoint{Kafka: &KafkaEndpoint{Topic: "rc"}}, []string{"k:9092"}, "", ""},
		{"amqp", kafkaRoute(), &Endpoint{AMQP: &AMQPEndpoint{Exchange: "rc", RoutingKey: "k"}}, []string{"k:9092"}, "", ""},
		{"neither", kafkaRoute(), &Endpoint{}, []string{"k:9092"}, "routes[0].receipts", "set one of kafka or amqp"},
		{"both", kafkaRoute(), &Endpoint{Kafka: &KafkaEndpoint{Topic: "rc"}, AMQP: &AMQPEndpoint{Exchange: "x"}}, []string{"k:9092"}, "routes[0].receipts", "not both"},
		{"no topic", kafkaRoute(), &Endpoint{Kafka: &KafkaEndpoint{}}, []string{"k:9092"}, "routes[0].receipts.kafka.topic", "required"},
		{"source topic", kafkaRoute(), &Endpoint{Kafka: &KafkaEndpoint{Topic: "in"}}, []string{"k:9092"}, "routes[0].receipts.kafka.topic", "differ"},
		{"target topic", kafkaRoute(), &Endpoint{Kafka: &KafkaEndpoint{Topic: "out"}}, []string{"k:9092"}, "routes[0].receipts.kafka.topic", "differ"},
		{"no exchange", kafkaRoute(), &Endpoint{AMQP: &AMQPEndpoint{RoutingKey: "k"}}, []string{"k:9092"}, "routes[0].receipts.amqp.exchange", "required"},
		{"queue", kafkaRoute(), &Endpoint{AMQP: &AMQPEndpoint{Exchange: "x", Queue: "q"}}, []string{"k:9092"}, "routes[0].receipts.amqp", "only exchange and routing_key"},
		{"kafka without brokers", amqpRoute(), &Endpoint{Kafka: &KafkaEndpoint{Topic: "rc"}}, nil, "routes[0].receipts.kafka", "kafka.brokers is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			cfg.Kafka.Brokers = c.brokers
			cfg.Routes = []Route{c.route}
			cfg.Routes[0].Receipts = c.receipts
			err := cfg.Validate()
			if c.key == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.key+": ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate() = %v, want %s: …%s…", err, c.key, c.want)
			}
		})
	}
}

// TestReceiptsLoad: receipts are off by default and load from keys.
func TestReceiptsLoad(t *testing.T) {
	c, err := load(t, "", nil, append(append([]string{}, minimalRoute...), "routes.0.receipts.kafka.topic=orders.receipts")...)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Routes[0].Receipts; r == nil || r.Kafka == nil || r.Kafka.Topic != "orders.receipts" || r.AMQP != nil {
		t.Fatalf("receipts = %+v", r)
	}
	c, err = load(t, "", nil, minimalRoute...)
	if err != nil || c.Routes[0].Receipts != nil {
		t.Fatalf("receipts by default = %+v, %v; want off", c.Routes[0].Receipts, err)
	}
}
