package app

import (
	"fmt"
	"strings"

	"github.com/delaybridge/delay-bridge/config"
	amqpout "github.com/delaybridge/delay-bridge/egress/amqp"
	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// The adapters (egress/kafka, egress/amqp, internal/amqpconn) take their own config
// structs; these build them from config.Config.

// amqpConnConfig is the connection manager's Config for the amqp section. The TLS
// configuration is read from the amqp.tls files when TLS is enabled or the URL is
// amqps:// (errors are permanent: a missing or unreadable file).
func amqpConnConfig(c config.AMQPConfig, name string) (amqpconn.Config, error) {
	cfg := amqpconn.Config{URL: c.URL, Name: name}
	if c.TLS.Enabled || strings.HasPrefix(strings.ToLower(c.URL), "amqps://") {
		tc, err := c.TLS.ClientTLS()
		if err != nil {
			return cfg, fault.Permanent(fmt.Errorf("amqp.%w", err))
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

// amqpSinkRoute is the AMQP sink's target of a route (its to.amqp).
func amqpSinkRoute(ep config.AMQPEndpoint) amqpout.Route {
	return amqpout.Route{Exchange: ep.Exchange, RoutingKey: ep.RoutingKey, Declare: ep.Declare}
}
