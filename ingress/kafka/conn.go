package kafka

import (
	"context"

	"github.com/segmentio/kafka-go"
)

// Conn is how the source reaches the Kafka cluster: the brokers with their TLS and SASL
// settings (in the bridge, internal/kafkaconn.Config, built by app from the
// kafka section of the configuration). The source declares the little it needs, so its
// exported API names no internal type.
type Conn interface {
	// Validate reports a configuration no retry can fix (no brokers, an unknown SASL
	// mechanism); its errors are marked fault.Permanent.
	Validate() error
	// Addrs are the bootstrap brokers, host:port.
	Addrs() []string
	// NewDialer returns a Dialer for Readers, with TLS and SASL.
	NewDialer() (*kafka.Dialer, error)
	// NewTransport returns a Transport for the lag poll's admin client; the caller
	// releases it with CloseIdleConnections.
	NewTransport() (*kafka.Transport, error)
	// Ping reads the cluster metadata from one broker (TLS and SASL included).
	Ping(ctx context.Context) error
}
