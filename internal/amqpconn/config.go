package amqpconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// Config configures a Manager. Zero values take the defaults shown (negative ones are
// refused); New fills them in and calls Validate.
type Config struct {
	URL string // amqp:// or amqps://; required
	// TLS, when not nil, is the client TLS configuration, and upgrades an amqp:// URL
	// to amqps://. An amqps:// URL without it verifies the server against the system
	// roots. (The bridge builds it from amqp.tls in app.)
	TLS *tls.Config
	// Name is advertised as the connection_name client property (shown in the
	// management UI), e.g. "delay-bridge ingress".
	Name string

	Heartbeat   time.Duration // default 10s
	DialTimeout time.Duration // TCP connect + TLS + AMQP handshake; default 15s
	MinBackoff  time.Duration // first wait after a failed dial; default 100ms
	MaxBackoff  time.Duration // cap of the exponential backoff; default 10s (at least MinBackoff)
	// MaxAuthRefusals is how many handshakes in a row may end like a credentials or
	// vhost refusal before dialing fails permanently (fault.Permanent); default 3. (A
	// connection cut during the handshake ends the same way, so one is not enough.)
	MaxAuthRefusals int

	Logger *slog.Logger // default slog.Default()
	// Clock times the waits between dials and how long a connection lived; default
	// clock.Real.
	Clock clock.Clock
}

func (c Config) withDefaults() Config {
	if c.Heartbeat == 0 {
		c.Heartbeat = 10 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 15 * time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.MaxBackoff > 0 {
		c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	}
	if c.MaxAuthRefusals == 0 {
		c.MaxAuthRefusals = 3
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// Validate checks c as New would use it (call it after the defaults are filled in,
// or expect zero durations to be refused): a parsable amqp:// or amqps:// URL and
// positive durations. Its errors are permanent.
func (c Config) Validate() error {
	if c.URL == "" {
		return fault.Permanent(errors.New("amqpconn: amqp.url is required"))
	}
	url, _ := c.dialURL()
	if _, err := amqp.ParseURI(url); err != nil {
		return fault.Permanent(fmt.Errorf("amqpconn: amqp.url: %w", err))
	}
	if c.Heartbeat <= 0 || c.DialTimeout <= 0 || c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
		return fault.Permanent(fmt.Errorf("amqpconn: heartbeat %v, dial timeout %v, backoff %v..%v: want positive durations, max ≥ min",
			c.Heartbeat, c.DialTimeout, c.MinBackoff, c.MaxBackoff))
	}
	if c.MaxAuthRefusals <= 0 {
		return fault.Permanent(fmt.Errorf("amqpconn: max auth refusals %d: want at least 1", c.MaxAuthRefusals))
	}
	return nil
}

// dialURL is the URL to dial (amqp:// upgraded to amqps:// when TLS is set) and the
// TLS configuration to dial it with (nil for plain amqp://).
func (c Config) dialURL() (string, *tls.Config) {
	url := c.URL
	if c.TLS != nil && strings.HasPrefix(url, "amqp://") {
		url = "amqps://" + strings.TrimPrefix(url, "amqp://")
	}
	if uri, err := amqp.ParseURI(url); err != nil || uri.Scheme != "amqps" {
		return url, nil
	}
	if c.TLS != nil {
		return url, c.TLS.Clone()
	}
	return url, &tls.Config{MinVersion: tls.VersionTLS12}
}
