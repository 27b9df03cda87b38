package config

import "fmt"

// validateRoutes checks routes[*] and fills their dependent defaults; it returns the
// brokers they use.
func validateRoutes(routes []Route, p *problems) brokers {
	if len(routes) == 0 {
		p.add("routes", "at least one route is required")
	}
	var use brokers
	names := map[string]bool{}
	for i := range routes {
		r := &routes[i]
		key := fmt.Sprintf("routes[%d]", i)
		if r.Name == "" {
			p.add(key+".name", "is required")
		} else if names[r.Name] {
			p.add(key+".name", "duplicate route name %q", r.Name)
		}
		names[r.Name] = true
		r.From.validate(key+".from", &use, p)
		r.To.validate(key+".to", &use, p)
		if a := r.From.AMQP; a != nil {
			a.validateSource(key+".from.amqp", p)
		}
		if a := r.To.AMQP; a != nil && a.Exchange == "" {
			p.add(key+".to.amqp.exchange", "is required (the default exchange cannot be checked or declared)")
		}
		if r.From.Kafka != nil && r.To.Kafka != nil && r.From.Kafka.Topic == r.To.Kafka.Topic {
			p.add(key+".to.kafka.topic", "must differ from the source topic (it would loop)")
		}
		if r.Order != "" && r.Order != OrderKey {
			p.add(key+".order", "must be %q or empty, got %q", OrderKey, r.Order)
		}
		if r.MaxRate < 0 {
			p.add(key+".max_rate", "must be >= 0, got %g", r.MaxRate)
		}
		if r.OnInvalid == "" {
			r.OnInvalid = OnInvalidDeadLetter
		}
		if r.OnInvalid != OnInvalidDeadLetter && r.OnInvalid != OnInvalidDeliver {
			p.add(key+".on_invalid", "must be %q or %q, got %q", OnInvalidDeadLetter, OnInvalidDeliver, r.OnInvalid)
		}
		if r.Receipts != nil {
			r.validateReceipts(key+".receipts", &use, p)
		}
	}
	return use
}

// validateReceipts checks routes[i].receipts: one broker, a topic (not one of the
// route's own: receipts would loop or mix with the messages) or an exchange with an
// optional routing key, nothing else.
func (r *Route) validateReceipts(key string, use *brokers, p *problems) {
	e := r.Receipts
	e.validate(key, use, p)
	if k := e.Kafka; k != nil && k.Topic != "" {
		if (r.From.Kafka != nil && r.From.Kafka.Topic == k.Topic) || (r.To.Kafka != nil && r.To.Kafka.Topic == k.Topic) {
			p.add(key+".kafka.topic", "must differ from the route's own topics, got %q", k.Topic)
		}
	}
	if a := e.AMQP; a != nil {
		if a.Exchange == "" {
			p.add(key+".amqp.exchange", "is required (the default exchange cannot be checked)")
		}
		if a.Queue != "" || a.ExchangeType != "" || a.BindingKey != "" || a.Declare {
			p.add(key+".amqp", "takes only exchange and routing_key (queue, exchange_type, binding_key and declare belong to a route's from/to)")
		}
	}
}

// validate checks that exactly one broker is named at key and notes it in use.
func (e Endpoint) validate(key string, use *brokers, p *problems) {
	switch {
	case e.Kafka != nil && e.AMQP != nil:
		p.add(key, "set exactly one of kafka or amqp, not both")
	case e.Kafka != nil:
		use.kafka = true
		if e.Kafka.Topic == "" {
			p.add(key+".kafka.topic", "is required")
		}
	case e.AMQP != nil:
		use.amqp = true
	default:
		p.add(key, "set one of kafka or amqp")
	}
}

// validateSource checks an AMQP source (key is routes[i].from.amqp) and fills its
// exchange_type ("topic") and, when it binds an exchange, its binding_key ("#").
func (a *AMQPEndpoint) validateSource(key string, p *problems) {
	if a.Queue == "" {
		p.add(key+".queue", "is required")
	}
	if a.ExchangeType == "" {
		a.ExchangeType = "topic"
	}
	switch a.ExchangeType {
	case "direct", "topic", "fanout", "headers":
	default:
		p.add(key+".exchange_type", "must be direct, topic, fanout or headers, got %q", a.ExchangeType)
	}
	if a.Exchange != "" && a.BindingKey == "" {
		a.BindingKey = "#"
	}
	if a.Exchange != "" && a.ExchangeType == "direct" && a.BindingKey == "#" {
		p.add(key+".exchange_type", "direct with binding_key \"#\" would drop every message: \"#\" is no wildcard on a direct exchange; use topic or fanout (the routing key is kept for the target)")
	}
}

// validate checks kafka.* when a route or the dead-letter store uses Kafka.
func (k KafkaConfig) validate(p *problems) {
	if len(k.Brokers) == 0 {
		p.add("kafka.brokers", "at least one broker is required by a kafka route")
	}
	if k.GroupID == "" {
		p.add("kafka.group_id", "is required by a kafka route")
	}
	switch k.SASL.Mechanism {
	case "":
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if k.SASL.Username == "" {
			p.add("kafka.sasl.username", "is required with kafka.sasl.mechanism %s", k.SASL.Mechanism)
		}
	default:
		p.add("kafka.sasl.mechanism", "must be empty, PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", k.SASL.Mechanism)
	}
}

// validate checks amqp.* when a route or the dead-letter store uses RabbitMQ; amqp.url is
// checked with the other credentials (validateCredentials).
func (a AMQPConfig) validate(p *problems) {
	if a.Prefetch < 1 || a.Prefetch > 65535 {
		p.add("amqp.prefetch", "must be between 1 and 65535, got %d", a.Prefetch)
	}
}
