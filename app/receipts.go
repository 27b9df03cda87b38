package app

import (
	"fmt"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	amqpout "github.com/delaybridge/delay-bridge/egress/amqp"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

// receiptRoutes lists the routes with receipts by the broker they go to: the receipts
// topic, or the exchange and routing key, per route name.
func (b *Bridge) receiptRoutes() (kafka map[string]string, amqp map[string]amqpout.Route) {
	kafka, amqp = map[string]string{}, map[string]amqpout.Route{}
	for _, r := range b.cfg.Routes {
		switch rc := r.Receipts; {
		case rc == nil:
		case rc.Kafka != nil:
			kafka[r.Name] = rc.Kafka.Topic
		case rc.AMQP != nil:
			amqp[r.Name] = amqpout.Route{Exchange: rc.AMQP.Exchange, RoutingKey: rc.AMQP.RoutingKey}
		}
	}
	return kafka, amqp
}

// startSides starts the side publishers: the dead-letter copies' and the receipts'
// queues (each only when configured). stop stops the receipts', then the copies'; Run
// calls it after ingress, the jobs and the scheduler (who offer to them) stopped and
// before the sinks close.
func (b *Bridge) startSides() (stop func(), err error) {
	dl, err := b.startDeadLetterCopies()
	if err != nil {
		return nil, err
	}
	rc, err := b.startReceipts()
	if err != nil {
		if dl != nil {
			dl.Stop()
		}
		return nil, err
	}
	return func() {
		for _, side := range []*egress.SidePublisher{rc, dl} {
			if side != nil {
				side.Stop()
			}
		}
	}, nil
}

// startReceipts starts the receipts' queue (egress.SidePublisher, queue "receipts", one
// target per broker that receives receipts, each bounded by receipts_backlog: beyond it
// receipts are dropped, counted as receipts_dropped_total{reason="full"} and logged) and
// the receipts maker when a route has receipts (nil otherwise). buildSinks made the targets; Run stops the queue after the
// scheduler and ingress, which are the ones offering to it, and before the sinks close.
func (b *Bridge) startReceipts() (*egress.SidePublisher, error) {
	if len(b.receiptTargets) == 0 {
		return nil, nil
	}
	side, err := egress.NewSidePublisher(egress.SideOptions{
		Queue: observe.SideQueueReceipts, Targets: b.receiptTargets,
		MaxBacklog: b.cfg.ReceiptsBacklog.MaxMessages, MaxBacklogBytes: b.cfg.ReceiptsBacklog.MaxBytes,
		Clock: b.clk, Observer: b.obs, Logger: b.log,
	})
	if err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	routes := map[string]egress.ReceiptRoute{}
	for _, r := range b.cfg.Routes {
		if r.Receipts == nil {
			continue
		}
		rr := egress.ReceiptRoute{Broker: envelope.BrokerKafka}
		if r.Receipts.AMQP != nil {
			rr.Broker = envelope.BrokerAMQP
		}
		if r.To.Kafka != nil {
			rr.To = egress.ReceiptTarget{Broker: envelope.BrokerKafka, Topic: r.To.Kafka.Topic}
		} else if r.To.AMQP != nil {
			rr.To = egress.ReceiptTarget{Broker: envelope.BrokerAMQP, Exchange: r.To.AMQP.Exchange, RoutingKey: r.To.AMQP.RoutingKey}
		}
		routes[r.Name] = rr
	}
	b.receipts = egress.NewReceipts(routes, side, b.clk)
	side.Start()
	return side, nil
}

// onDelivered is the dispatcher's OnDelivered: the delivered receipts, nil when no
// route has receipts (the dispatcher then does nothing more per batch).
func (b *Bridge) onDelivered() func(string, []*envelope.Envelope, time.Time) {
	if b.receipts == nil {
		return nil
	}
	return b.receipts.Delivered
}
