package amqp_test

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/conformance"
)

// TestConformance runs the shared Source suite against a RabbitMQ queue. The fixture
// declares the same topology the source declares, so records produced before the first
// Source runs are routed to the queue; record keys are used as routing keys.
func TestConformance(t *testing.T) {
	conformance.RunSourceSuite(t, conformance.SourceHarness{
		Broker: envelope.BrokerAMQP,
		Keys:   false,
		Fresh: func(t *testing.T) conformance.SourceFixture {
			b := newBroker(t)
			ep := route(t, b)
			if err := b.ch.ExchangeDeclare(ep.Exchange, "topic", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := b.ch.QueueDeclare(ep.Queue, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := b.ch.QueueBind(ep.Queue, "#", ep.Exchange, false, nil); err != nil {
				t.Fatal(err)
			}
			m := manager(t, testkit.AMQPURL())
			return conformance.SourceFixture{
				Source:    ep.Queue,
				NewSource: func(t *testing.T) ingress.Source { return source(t, m, ep, 100) },
				Produce: func(t *testing.T, key, payload []byte, headers map[string]string) {
					table := amqp091.Table{}
					for k, v := range headers {
						table[k] = v
					}
					b.publish(ep.Exchange, string(key), amqp091.Publishing{Headers: table, Body: payload})
				},
			}
		},
	})
}
