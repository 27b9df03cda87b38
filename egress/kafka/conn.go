package kafka

import (
	"context"

	"github.com/segmentio/kafka-go"
)

// Conn is how the sink reaches the Kafka cluster: the brokers with their TLS and SASL
// settings (in the bridge, internal/kafkaconn.Config, built by app from the
// kafka section of the configuration). The sink declares the little it needs, so its
// exported API names no internal type.
type Conn interface {
	// Validate reports a configuration no retry can fix; its errors are permanent.
	Validate() error
	// Addrs are the bootstrap brokers, host:port.
	Addrs() []string
	// NewTransport returns the Transport the sink sends its metadata and produce
	// requests through.
	NewTransport() (*kafka.Transport, error)
	// Ping reads the cluster metadata from one broker (the health probe).
	Ping(ctx context.Context) error
}
