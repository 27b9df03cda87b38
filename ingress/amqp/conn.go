package amqp

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Conn is the shared RabbitMQ connection the source consumes through (in the bridge,
// internal/amqpconn.Manager: one connection per process, redialled with backoff, shared
// with the AMQP sinks). The source declares the little it needs, so its exported API
// names no internal type.
type Conn interface {
	// Channel opens a channel on the live connection, dialing until one is up or ctx
	// ends; a dial that cannot succeed is marked fault.Permanent.
	Channel(ctx context.Context) (*amqp.Channel, error)
	// CloseChannel closes ch (unacknowledged deliveries return to their queue),
	// waiting at most grace for the server's answer.
	CloseChannel(ch *amqp.Channel, grace time.Duration)
	// Do runs fn, a blocking amqp091 call without a context, and returns its error or
	// ctx's error as soon as ctx ends (fn then finishes in the background, owned by
	// the connection).
	Do(ctx context.Context, fn func() error) error
	// Connected reports whether a connection is open now.
	Connected() bool
}
