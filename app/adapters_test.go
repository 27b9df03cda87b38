package app

import (
	"strings"
	"testing"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// TestAMQPConnConfigTLSFiles: amqp.tls is read when TLS is enabled or the URL is
// amqps://; a missing CA file is a permanent error naming ca_file. (Moved from
// internal/amqpconn, which now takes the *tls.Config built here.)
func TestAMQPConnConfigTLSFiles(t *testing.T) {
	c := config.AMQPConfig{URL: "amqp://127.0.0.1:5671/"}
	c.TLS.Enabled = true
	c.TLS.CAFile = "/nonexistent/ca.pem"
	_, err := amqpConnConfig(c, "test")
	if !fault.IsPermanent(err) || !strings.Contains(err.Error(), "ca_file") {
		t.Fatalf("missing CA file: %v", err)
	}
	c.TLS.Enabled = false
	if _, err := amqpConnConfig(c, "test"); err != nil {
		t.Fatalf("TLS off, amqp:// URL: the files must not be read: %v", err)
	}
	c.URL = "amqps://127.0.0.1:5671/"
	if _, err := amqpConnConfig(c, "test"); !fault.IsPermanent(err) {
		t.Fatalf("amqps:// URL with a missing CA file: %v, want permanent", err)
	}
	c.TLS.CAFile = ""
	cfg, err := amqpConnConfig(c, "test")
	if err != nil || cfg.TLS == nil || cfg.URL != c.URL || cfg.Name != "test" {
		t.Fatalf("amqps:// URL, no files: %+v, %v; want a TLS config", cfg, err)
	}
}
