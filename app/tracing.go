package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/tracing"
)

// tracingShutdown bounds the flush of the spans still queued when the bridge stops.
const tracingShutdown = 5 * time.Second

// startTracing builds the egress tracer from the OTEL_* environment (internal/tracing;
// docs/OPERATIONS.md "Tracing"): nil when tracing is off, so the dispatcher does nothing
// per message. stop exports what is still queued, within tracingShutdown; Run calls it
// after the dispatcher has ended every span.
func (b *Bridge) startTracing(ctx context.Context) (tracer egress.Tracer, stop func(), err error) {
	p, err := tracing.Setup(ctx, b.version, b.log)
	if err != nil {
		return nil, func() {}, err
	}
	if p == nil {
		return nil, func() {}, nil
	}
	targets := map[string]string{}
	for _, r := range b.cfg.Routes {
		switch {
		case r.To.Kafka != nil:
			targets[r.Name] = r.To.Kafka.Topic
		case r.To.AMQP != nil:
			targets[r.Name] = r.To.AMQP.Exchange
		}
	}
	return p.Tracer(targets), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdown)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			b.log.Warn("tracing: spans not exported at shutdown", "err", err)
		}
	}, nil
}

// checkTracing refuses an OTEL_* environment that asks for an exporter or protocol the
// bridge does not have, when the bridge is built rather than when it runs.
func checkTracing() error {
	if _, err := tracing.FromEnv(os.Getenv); err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	return nil
}
