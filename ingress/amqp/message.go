package amqp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// raw turns a delivery into the broker-neutral record ingress.Parse takes.
func (s *Source) raw(d *amqp.Delivery, received time.Time) ingress.Raw {
	var base time.Time
	if !d.Timestamp.IsZero() && d.Timestamp.Unix() != 0 {
		base = d.Timestamp
	}
	id := d.MessageId
	if id == "" {
		id = ContentID(s.cfg.Endpoint.Queue, d)
	}
	return ingress.Raw{
		Broker:     envelope.BrokerAMQP,
		Source:     s.cfg.Endpoint.Queue,
		RoutingKey: d.RoutingKey,
		Payload:    d.Body,
		Headers:    Headers(d.Headers),
		AMQP: &envelope.AMQPProperties{
			ContentType:     d.ContentType,
			ContentEncoding: d.ContentEncoding,
			DeliveryMode:    d.DeliveryMode,
			Priority:        d.Priority,
			CorrelationID:   d.CorrelationId,
			ReplyTo:         d.ReplyTo,
			Expiration:      d.Expiration,
			MessageID:       d.MessageId,
			Timestamp:       d.Timestamp,
			Type:            d.Type,
			UserID:          d.UserId,
			AppID:           d.AppId,
		},
		BaseTime:   base,
		ReceivedAt: received,
		DefaultID:  id,
	}
}

// Headers converts an AMQP header table to envelope headers, sorted by key, keeping each
// value's type (amqp.Decimal becomes envelope.Decimal, nested tables map[string]any).
func Headers(t amqp.Table) []envelope.Header {
	if len(t) == 0 {
		return nil
	}
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]envelope.Header, len(keys))
	for i, k := range keys {
		out[i] = envelope.Header{Key: k, Value: FromAMQP(t[k])}
	}
	return out
}

// FromAMQP converts one value decoded by amqp091-go to the envelope's representation.
func FromAMQP(v any) any {
	switch x := v.(type) {
	case amqp.Decimal:
		return envelope.Decimal{Scale: x.Scale, Value: x.Value}
	case amqp.Table:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = FromAMQP(e)
		}
		return m
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = FromAMQP(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = FromAMQP(e)
		}
		return a
	}
	return v
}

// ContentID is the id of a message that has neither x-message-id nor message_id: see
// the package documentation.
func ContentID(queue string, d *amqp.Delivery) string {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put(queue)
	put(d.Exchange)
	put(d.RoutingKey)
	for _, p := range []string{d.ContentType, d.ContentEncoding, d.CorrelationId, d.ReplyTo,
		d.Expiration, d.Type, d.UserId, d.AppId} {
		put(p)
	}
	put(fmt.Sprintf("%d/%d/%d", d.DeliveryMode, d.Priority, d.Timestamp.Unix()))
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		if k != HeaderDeliveryCount {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		put(k)
		// fmt prints maps with sorted keys, so nested tables hash deterministically.
		v := d.Headers[k]
		put(fmt.Sprintf("%T=%v", v, v))
	}
	put(string(d.Body))
	sum := h.Sum(nil)
	return queue + "/" + hex.EncodeToString(sum[:16])
}
