package envelope

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Version 1 layout (all integers varint/uvarint, byte strings length-prefixed by uvarint):
//
//	0x01 | flags | ID Route SourceBroker Source Target | DueAt ReceivedAt Attempt |
//	Key(present flag) RoutingKey Payload | nHeaders {key value}* | [AMQP props] | Reason
//
// flags bit0: Key present (distinguishes nil from empty), bit1: AMQP properties present.
// A header value is a one-byte type tag followed by its encoding (see appendValue; tags
// 0..18 only).
//
// Bridges before version 2 wrote it; Decode still reads it, so their parked messages
// fire after an upgrade. Nothing in the product writes it any more.
const (
	v1FlagKey  = 1 << 0
	v1FlagAMQP = 1 << 1
)

// EncodeV1 returns e in the version 1 layout, id included. The product never writes
// it; it exists so tests can park what an older bridge parked and prove it still fires.
func EncodeV1(e *Envelope) ([]byte, error) {
	var flags byte
	if e.Key != nil {
		flags |= v1FlagKey
	}
	if e.AMQP != nil {
		flags |= v1FlagAMQP
	}
	b := make([]byte, 0, 64+len(e.Payload)+len(e.Key)+16*len(e.Headers))
	b = append(b, version1, flags)
	b = appendString(b, e.ID)
	b = appendString(b, e.Route)
	b = appendString(b, e.SourceBroker)
	b = appendString(b, e.Source)
	b = appendString(b, e.Target)
	b = binary.AppendVarint(b, e.DueAt)
	b = binary.AppendVarint(b, e.ReceivedAt)
	b = binary.AppendVarint(b, int64(e.Attempt))
	b = appendBytes(b, e.Key)
	b = appendString(b, e.RoutingKey)
	b = appendBytes(b, e.Payload)
	b = binary.AppendUvarint(b, uint64(len(e.Headers)))
	var err error
	for _, h := range e.Headers {
		b = appendString(b, h.Key)
		if b, err = appendValue(b, h.Value, 0, false); err != nil {
			return nil, fmt.Errorf("header %q: %w", h.Key, err)
		}
	}
	if p := e.AMQP; p != nil {
		b = appendString(b, p.ContentType)
		b = appendString(b, p.ContentEncoding)
		b = append(b, p.DeliveryMode, p.Priority)
		b = appendString(b, p.CorrelationID)
		b = appendString(b, p.ReplyTo)
		b = appendString(b, p.Expiration)
		b = appendString(b, p.MessageID)
		var ts int64
		if !p.Timestamp.IsZero() {
			ts = p.Timestamp.Unix()
		}
		b = binary.AppendVarint(b, ts)
		b = appendString(b, p.Type)
		b = appendString(b, p.UserID)
		b = appendString(b, p.AppID)
	}
	b = appendString(b, e.Reason)
	return b, nil
}

// decodeV1 parses a version 1 envelope after its version byte.
func decodeV1(data []byte) (*Envelope, error) {
	d := decoder{buf: data}
	flags := d.byte()
	e := &Envelope{}
	e.ID = d.string()
	e.Route = d.string()
	e.SourceBroker = d.string()
	e.Source = d.string()
	e.Target = d.string()
	e.DueAt = d.varint()
	e.ReceivedAt = d.varint()
	attempt := d.varint()
	if attempt < 0 || attempt > math.MaxInt32 {
		d.fail()
	}
	e.Attempt = int32(attempt)
	key := d.bytes()
	if flags&v1FlagKey != 0 {
		e.Key = key
		if e.Key == nil {
			e.Key = []byte{}
		}
	}
	e.RoutingKey = d.string()
	e.Payload = d.bytes()
	n := d.count()
	if n > 0 {
		e.Headers = make([]Header, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		k := d.string()
		v := d.value(0)
		e.Headers = append(e.Headers, Header{Key: k, Value: v})
	}
	if flags&v1FlagAMQP != 0 {
		p := &AMQPProperties{}
		p.ContentType = d.string()
		p.ContentEncoding = d.string()
		p.DeliveryMode = d.byte()
		p.Priority = d.byte()
		p.CorrelationID = d.string()
		p.ReplyTo = d.string()
		p.Expiration = d.string()
		p.MessageID = d.string()
		if ts := d.varint(); ts != 0 {
			p.Timestamp = time.Unix(ts, 0).UTC()
		}
		p.Type = d.string()
		p.UserID = d.string()
		p.AppID = d.string()
		e.AMQP = p
	}
	e.Reason = d.string()
	return d.finish(e)
}
