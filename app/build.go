package app

import (
	"context"
	"fmt"
	"time"

	"github.com/delaybridge/delay-bridge/app/adminapi"
	"github.com/delaybridge/delay-bridge/egress"
	amqpout "github.com/delaybridge/delay-bridge/egress/amqp"
	kafkaout "github.com/delaybridge/delay-bridge/egress/kafka"
	"github.com/delaybridge/delay-bridge/ingress"
	amqpin "github.com/delaybridge/delay-bridge/ingress/amqp"
	"github.com/delaybridge/delay-bridge/internal/amqpconn"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// connections the bridge owns for its whole run: one AMQP connection for ingress and one
// for egress (a blocked publisher connection — RabbitMQ's flow control — must not stall
// consuming), created only when a route uses AMQP.
type connections struct {
	amqpIn, amqpOut *amqpconn.Manager
}

// states lists the connections that exist, for /readyz.
func (c *connections) states() []adminapi.Conn {
	var out []adminapi.Conn
	if c.amqpIn != nil {
		out = append(out, adminapi.Conn{Name: "amqp ingress", State: c.amqpIn})
	}
	if c.amqpOut != nil {
		out = append(out, adminapi.Conn{Name: "amqp egress", State: c.amqpOut})
	}
	return out
}

func (c *connections) close() {
	for _, m := range []*amqpconn.Manager{c.amqpIn, c.amqpOut} {
		if m != nil {
			_ = m.Close()
		}
	}
}

func (b *Bridge) amqpManager(name string, heartbeat time.Duration) (*amqpconn.Manager, error) {
	cfg, err := amqpConnConfig(b.cfg.AMQP, name)
	if err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	cfg.Logger, cfg.Clock = b.log, b.clk
	if heartbeat > 0 {
		cfg.Heartbeat = heartbeat
	}
	m, err := amqpconn.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	return m, nil
}

// PublishTimeout is how long the dispatcher waits for a broker's answers before a
// publish's outcome is unknown: as long as the in-flight lease allows (the message is
// claimed up to a lookahead before it fires, and a message left in flight with an
// unknown outcome is fired again once the lease passed), so that a stalled broker is
// waited for rather than written to a second time.
func PublishTimeout(inflightLease, lookahead time.Duration) time.Duration {
	return max(inflightLease/2, inflightLease-lookahead-3*time.Second)
}

// buildSinks creates one sink per target broker used by the routes, the dispatcher's
// route table, and the dead-letter publishers.
func (b *Bridge) buildSinks(ctx context.Context, conns *connections) (map[string]egress.Sink, map[string]egress.RouteSink, error) {
	kafkaRoutes := map[string]string{}
	amqpRoutes := map[string]amqpout.Route{}
	for _, r := range b.cfg.Routes {
		if r.To.Kafka != nil {
			kafkaRoutes[r.Name] = r.To.Kafka.Topic
		} else if r.To.AMQP != nil {
			amqpRoutes[r.Name] = amqpSinkRoute(*r.To.AMQP)
		}
	}
	sinks := map[string]egress.Sink{}
	b.dlq = map[string]egress.SideTarget{}
	b.receiptTargets = map[string]egress.SideTarget{}
	rcKafka, rcAMQP := b.receiptRoutes()
	dlTopic := b.cfg.DeadLetter.Kafka.Topic
	if len(kafkaRoutes) > 0 || dlTopic != "" || len(rcKafka) > 0 {
		conn, err := kafkaConn(b.cfg.Kafka)
		if err != nil {
			return nil, nil, fmt.Errorf("kafka sink: %w", err)
		}
		ks, err := kafkaout.New(conn, kafkaRoutes, kafkaout.Options{Logger: b.log, Clock: b.clk,
			AnswerTimeout: b.cfg.Scheduler.InflightLease})
		if err != nil {
			return nil, nil, fmt.Errorf("kafka sink: %w", err)
		}
		sinks[envelope.BrokerKafka] = ks
		if dlTopic != "" {
			b.dlq[envelope.BrokerKafka] = ks.DeadLetters(dlTopic)
		}
		if len(rcKafka) > 0 {
			b.receiptTargets[envelope.BrokerKafka] = ks.Receipts(rcKafka)
		}
	}
	dlExchange := b.cfg.DeadLetter.AMQP.Exchange
	if len(amqpRoutes) > 0 || dlExchange != "" || len(rcAMQP) > 0 {
		// amqp091-go drops a connection after 1.5 heartbeats without a frame from the
		// broker, and the confirms of what it carried with it: a stalled broker would
		// then apply writes that are retried meanwhile. The egress connection therefore
		// outlives the publish timeout (ingress keeps the default, quicker detection).
		sc := b.cfg.Scheduler
		m, err := b.amqpManager("delay-bridge egress", PublishTimeout(sc.InflightLease, sc.Lookahead))
		if err != nil {
			return nil, nil, err
		}
		conns.amqpOut = m
		if len(amqpRoutes) > 0 {
			as, err := amqpout.New(ctx, m, amqpRoutes, amqpout.Options{Logger: b.log, Clock: b.clk})
			if err != nil {
				return sinks, nil, fmt.Errorf("amqp sink: %w", err)
			}
			sinks[envelope.BrokerAMQP] = as
		}
		if dlExchange != "" {
			ds, err := amqpout.NewDeadLetter(ctx, m, dlExchange, amqpout.Options{Logger: b.log, Clock: b.clk})
			if err != nil {
				return sinks, nil, fmt.Errorf("dead_letter.amqp.exchange: %w", err)
			}
			sinks["amqp-dead-letter"] = ds
			b.dlq[envelope.BrokerAMQP] = ds
		}
		if len(rcAMQP) > 0 {
			rs, err := amqpout.NewReceipts(ctx, m, rcAMQP, amqpout.Options{Logger: b.log, Clock: b.clk})
			if err != nil {
				return sinks, nil, fmt.Errorf("receipts: %w", err)
			}
			sinks["amqp-receipts"] = rs
			b.receiptTargets[envelope.BrokerAMQP] = rs
		}
	}
	routes := map[string]egress.RouteSink{}
	for _, r := range b.cfg.Routes {
		broker := envelope.BrokerKafka
		if r.To.AMQP != nil {
			broker = envelope.BrokerAMQP
		}
		routes[r.Name] = egress.RouteSink{Sink: sinks[broker], Broker: broker, MaxRate: r.MaxRate}
	}
	return sinks, routes, nil
}

// buildSources creates one source per route.
func (b *Bridge) buildSources(conns *connections) ([]ingress.Source, error) {
	var out []ingress.Source
	for _, r := range b.cfg.Routes {
		switch {
		case r.From.Kafka != nil:
			s, err := b.kafkaSource(r)
			if err != nil {
				return nil, fmt.Errorf("route %q: %w", r.Name, err)
			}
			out = append(out, s)
		case r.From.AMQP != nil:
			if conns.amqpIn == nil {
				m, err := b.amqpManager("delay-bridge ingress", 0)
				if err != nil {
					return nil, err
				}
				conns.amqpIn = m
			}
			s, err := amqpin.New(conns.amqpIn, b.amqpSourceConfig(r))
			if err != nil {
				return nil, fmt.Errorf("route %q: %w", r.Name, err)
			}
			out = append(out, s)
		}
	}
	return out, nil
}
