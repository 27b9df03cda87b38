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

// TestReceiptsBacklog: receipts_backlog defaults to 100,000 receipts and 64 MiB per
// receipts broker, loads from the file, the environment and flags, and refuses a bound
// that is not positive, naming the key.
func TestReceiptsBacklog(t *testing.T) {
	c, err := load(t, "", nil, minimalRoute...)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ReceiptsBacklog; got.MaxMessages != 100_000 || got.MaxBytes != 8<<20 {
		t.Fatalf("receipts_backlog by default = %+v, want 100000 and 8 MiB", got)
	}
	file := writeFile(t, "receipts_backlog: { max_messages: 600000, max_bytes: 268435456 }\n")
	c, err = load(t, file, nil, minimalRoute...)
	if err != nil || c.ReceiptsBacklog.MaxMessages != 600_000 || c.ReceiptsBacklog.MaxBytes != 256<<20 {
		t.Fatalf("receipts_backlog from the file = %+v, %v", c.ReceiptsBacklog, err)
	}
	c, err = load(t, "", []string{"DELAYBRIDGE_RECEIPTS_BACKLOG__MAX_MESSAGES=7"}, append(minimalRoute, "receipts_backlog.max_bytes=9000")...)
	if err != nil || c.ReceiptsBacklog.MaxMessages != 7 || c.ReceiptsBacklog.MaxBytes != 9000 {
		t.Fatalf("receipts_backlog from env and flag = %+v, %v", c.ReceiptsBacklog, err)
	}

	cases := []struct {
		name, set, key, want string
	}{
		{"zero messages", "receipts_backlog.max_messages=0", "receipts_backlog.max_messages", "must be > 0, got 0"},
		{"negative messages", "receipts_backlog.max_messages=-5", "receipts_backlog.max_messages", "must be > 0, got -5"},
		{"zero bytes", "receipts_backlog.max_bytes=0", "receipts_backlog.max_bytes", "must be > 0, got 0"},
		{"negative bytes", "receipts_backlog.max_bytes=-1", "receipts_backlog.max_bytes", "must be > 0, got -1"},
		{"not a number", "receipts_backlog.max_bytes=64MiB", "receipts_backlog.max_bytes", "want an integer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, "", nil, append(append([]string{}, minimalRoute...), c.set)...)
			mustFieldError(t, err, c.key, "", c.want)
		})
	}
}
