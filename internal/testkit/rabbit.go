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
