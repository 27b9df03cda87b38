package testkit

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Rabbit is a test's own connection to the RabbitMQ server on 127.0.0.1:5672, to set
// up exchanges and queues and to publish or read directly. It is closed when the test
// ends.
type Rabbit struct {
	T    testing.TB
	Conn *amqp091.Connection
}

// DialRabbit fails the test (never skips) when RabbitMQ is not reachable.
func DialRabbit(t testing.TB) *Rabbit {
	t.Helper()
	u := RequireRabbitMQ(t)
	conn, err := amqp091.Dial(u)
	if err != nil {
		t.Fatalf("testutil: dial %s: %v", u, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &Rabbit{T: t, Conn: conn}
}

// Channel opens a channel on the test's connection.
func (r *Rabbit) Channel() *amqp091.Channel {
	r.T.Helper()
	ch, err := r.Conn.Channel()
	if err != nil {
		r.T.Fatalf("testutil: open channel: %v", err)
	}
	return ch
}

// DeleteAtCleanup deletes the named queues, then exchanges, when the test ends (on a
// fresh channel; "" names are ignored). Register it before starting a bridge that
// declares them, so it runs after that bridge stopped.
func (r *Rabbit) DeleteAtCleanup(queues, exchanges []string) {
	r.T.Cleanup(func() {
		ch, err := r.Conn.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		for _, q := range queues {
			if q != "" {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
		}
		for _, x := range exchanges {
			if x != "" {
				_ = ch.ExchangeDelete(x, false, false)
			}
		}
	})
}

// FanoutQueue declares a fanout exchange and a queue bound to it (both non-durable,
// deleted when the test ends) and returns the channel it used, ready to consume the
// queue: what a test reading everything published to an exchange needs.
func (r *Rabbit) FanoutQueue(exchange, queue string) *amqp091.Channel {
	r.T.Helper()
	r.DeleteAtCleanup([]string{queue}, []string{exchange})
	ch := r.Channel()
	if err := ch.ExchangeDeclare(exchange, "fanout", false, false, false, false, nil); err != nil {
		r.T.Fatalf("testutil: declare exchange %s: %v", exchange, err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		r.T.Fatalf("testutil: declare queue %s: %v", queue, err)
	}
	if err := ch.QueueBind(queue, "", exchange, false, nil); err != nil {
		r.T.Fatalf("testutil: bind %s to %s: %v", queue, exchange, err)
	}
	return ch
}
