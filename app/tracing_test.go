package app

import (
	"strings"
	"testing"

	"github.com/delaybridge/delay-bridge/config"
)

// An OTEL_* environment asking for an exporter or protocol the bridge does not have is
// refused when the bridge is built, naming the variable, rather than tracing nothing.
func TestNewRefusesUnsupportedTracingEnvironment(t *testing.T) {
	cfg := config.Default()
	cfg.Routes = []config.Route{{
		Name: "r",
		From: config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: "r.delay"}},
		To:   config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: "r.out"}},
	}}
	for _, c := range []struct{ key, value, want string }{
		{"OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "http/json"},
	} {
		t.Run(c.key, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
			t.Setenv(c.key, c.value)
			_, err := New(cfg, Options{}) // refused before anything is built
			if err == nil {
				t.Fatalf("New with %s=%s: no error", c.key, c.value)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not name %q", err, c.want)
			}
		})
	}
}
