package app

import (
	"crypto/tls"
	"fmt"

	"github.com/delaybridge/delay-bridge/config"
	amqpin "github.com/delaybridge/delay-bridge/ingress/amqp"
	kafkain "github.com/delaybridge/delay-bridge/ingress/kafka"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
	"github.com/delaybridge/delay-bridge/membership"
)

// kafkaConn is kafka.* as the Kafka connection helper takes it: the TLS files read
// (nil when kafka.tls.enabled is false), the SASL settings copied.
func kafkaConn(c config.KafkaConfig) (kafkaconn.Config, error) {
	var tc *tls.Config
	if c.TLS.Enabled {
		var err error
		if tc, err = c.TLS.ClientTLS(); err != nil {
			return kafkaconn.Config{}, fault.Permanent(fmt.Errorf("kafka.%w", err))
		}
	}
	return kafkaconn.Config{
		Brokers: c.Brokers,
		TLS:     tc,
		SASL:    kafkaconn.SASL{Mechanism: c.SASL.Mechanism, Username: c.SASL.Username, Password: c.SASL.Password},
	}, nil
}

// kafkaSource is the Kafka source of route r (from.kafka), from kafka.*, the route's
// parsing rules and ingress.*; its partitions are owned through the bridge's
// membership (the members the scheduler heartbeats, scheduler.lease_ttl).
func (b *Bridge) kafkaSource(r config.Route) (*kafkain.Source, error) {
	conn, err := kafkaConn(b.cfg.Kafka)
	if err != nil {
		return nil, err
	}
	return kafkain.New(b.kafkaSourceConfig(r, conn))
}

// kafkaSourceConfig is kafkaSource's configuration of route r over conn.
func (b *Bridge) kafkaSourceConfig(r config.Route, conn kafkain.Conn) kafkain.Config {
	return kafkain.Config{
		Conn: conn, GroupID: b.cfg.Kafka.GroupID,
		Membership: membership.New(b.rdb, b.cfg.Prefix, b.cfg.Cluster),
		Instance:   b.cfg.Instance,
		LeaseTTL:   b.cfg.Scheduler.LeaseTTL, Admission: b.admission,
		Topic: r.From.Kafka.Topic, Rules: b.rules[r.Name], FetchMinBytes: b.cfg.Ingress.KafkaFetchMinBytes,
		StallTimeout: b.cfg.Ingress.StallTimeout, Clock: b.clk, Logger: b.log, Observer: b.obs,
	}
}

// amqpSourceConfig is the AMQP source of route r (from.amqp), from amqp.prefetch, the
// route's parsing rules and ingress.*.
func (b *Bridge) amqpSourceConfig(r config.Route) amqpin.Config {
	ep := r.From.AMQP
	return amqpin.Config{
		Endpoint: amqpin.Endpoint{Queue: ep.Queue, Exchange: ep.Exchange, ExchangeType: ep.ExchangeType, BindingKey: ep.BindingKey},
		Rules:    b.rules[r.Name], Prefetch: b.cfg.AMQP.Prefetch,
		StallTimeout: b.cfg.Ingress.StallTimeout, Clock: b.clk, Logger: b.log, Observer: b.obs,
	}
}
