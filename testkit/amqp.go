package testkit

import (
	"net"
	"os"
	"testing"
	"time"
)

// AMQPURL is the RabbitMQ server the tests use; DELAYBRIDGE_TEST_AMQP_URL overrides it.
func AMQPURL() string {
	if u := os.Getenv("DELAYBRIDGE_TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// RequireRabbitMQ fails the test (never skips) when no RabbitMQ listens on 127.0.0.1:5672.
func RequireRabbitMQ(t testing.TB) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:5672", 3*time.Second)
	if err != nil {
		t.Fatalf("testutil: RabbitMQ is not reachable on 127.0.0.1:5672 (start it with `rabbitmq-server -detached`; .ci/run does): %v", err)
	}
	c.Close()
	return AMQPURL()
}
