package amqp

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// Route is where a route's messages go (the route's to.amqp).
type Route struct {
	// Exchange is the target exchange; required (the default exchange cannot be one).
	Exchange string
	// RoutingKey replaces the message's own routing key when set.
	RoutingKey string
	// Declare declares the exchange (durable, topic) at start instead of requiring it.
	Declare bool
}

// Validate checks r; its errors are permanent.
func (r Route) Validate() error {
	if r.Exchange == "" {
		return fault.Permanent(errors.New("to.amqp.exchange is required"))
	}
	return nil
}

// Defaults of Options.
const (
	DefaultChannels      = 4
	DefaultMaxInflight   = 256
	DefaultConnectWait   = 5 * time.Second
	DefaultCloseWait     = 5 * time.Second
	DefaultProbeInterval = 5 * time.Second
)

// Options tunes a Sink. Zero values take the defaults; negative ones are refused.
type Options struct {
	// Channels is the number of confirm channels, one publisher goroutine each; default 4.
	Channels int
	// MaxInflight bounds unconfirmed publishes per channel (the chunk size); default 256.
	MaxInflight int
	// ConnectWait is how long a publish waits for a connection before failing its chunk
	// with ErrUnavailable; default 5s.
	ConnectWait time.Duration
	// CloseWait bounds how long Close waits for publisher goroutines blocked in a
	// socket write (a broker that applies TCP back-pressure); default 5s. Past it they
	// stop when the connection manager is closed.
	CloseWait time.Duration
	// ProbeInterval is how often the health probe checks the connection and, while
	// there is none, dials one (so readiness recovers without a publish); default 5s.
	ProbeInterval time.Duration
	Logger        *slog.Logger // default slog.Default()
	// Clock times the probe and the CloseWait bounds; default clock.Real.
	Clock clock.Clock
}

func (o Options) withDefaults() Options {
	if o.Channels == 0 {
		o.Channels = DefaultChannels
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.ConnectWait == 0 {
		o.ConnectWait = DefaultConnectWait
	}
	if o.CloseWait == 0 {
		o.CloseWait = DefaultCloseWait
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return o
}

// Validate checks o as the constructors use it (defaults filled in): every count and
// duration positive. Its errors are permanent.
func (o Options) Validate() error {
	if o.Channels <= 0 || o.MaxInflight <= 0 {
		return fault.Permanent(fmt.Errorf("egress/amqp: channels %d, max in-flight %d: want at least 1", o.Channels, o.MaxInflight))
	}
	if o.ConnectWait <= 0 || o.CloseWait <= 0 || o.ProbeInterval <= 0 {
		return fault.Permanent(fmt.Errorf("egress/amqp: connect wait %v, close wait %v, probe interval %v: want positive durations",
			o.ConnectWait, o.CloseWait, o.ProbeInterval))
	}
	return nil
}
