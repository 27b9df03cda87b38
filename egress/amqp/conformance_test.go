package amqp_test

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/egress/amqp"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/conformance"
)

// TestConformance runs the shared Sink suite against a RabbitMQ topic exchange with one
// queue bound with "#". Received.Key is the routing key (the Kafka key for these
// Kafka-origin envelopes), not compared by the suite (Keys: false).
func TestConformance(t *testing.T) {
	conformance.RunSinkSuite(t, conformance.SinkHarness{
		Broker: "amqp",
		Keys:   false,
		Fresh: func(t *testing.T) conformance.SinkFixture {
			b := newBroker(t)
			ex, q := b.target(true)
			r := b.read(q)
			m := manager(t, testkit.AMQPURL())
			s := newSink(t, m, map[string]amqp.Route{"conformance": {Exchange: ex}}, amqp.Options{})
			return conformance.SinkFixture{
				Sink:          s,
				Route:         "conformance",
				Target:        ex,
				MissingTarget: testkit.Uniq(t, "missing-x"),
				Consume: func(t *testing.T, n int, timeout time.Duration) []conformance.Received {
					var out []conformance.Received
					for _, d := range r.next(n, timeout) {
						h := make(map[string]string, len(d.Headers))
						for k, v := range d.Headers {
							h[k] = string(egress.HeaderBytes(fromAMQP(v)))
						}
						out = append(out, conformance.Received{Key: []byte(d.RoutingKey), Payload: d.Body, Headers: h})
					}
					return out
				},
			}
		},
	})
}

// fromAMQP renders amqp091 decimals the way envelope decimals are rendered.
func fromAMQP(v any) any {
	if d, ok := v.(amqp091.Decimal); ok {
		return envelope.Decimal{Scale: d.Scale, Value: d.Value}
	}
	return v
}
