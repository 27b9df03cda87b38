package envelope

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Version 2 layout, what Encode writes. Integers are varints (zigzag) or uvarints, byte
// strings are length-prefixed by a uvarint, [x] is present only when its flag says so:
//
//	0x02 | flags | Route | [SourceBroker] | Source | [Target] |
//	DueAt | DueAt-ReceivedAt | [Attempt] | [Key] | [RoutingKey] | Payload |
//	nHeaders {key value}* | [AMQP] | [Reason]
//
// It does not carry the id: the envelope is stored under its id (the msg hash field),
// so every reader has it already and passes it to Decode. Fields that
// are usually empty cost nothing but a flag bit.
//
// flags: bit0 Key present (nil and empty differ), bit1 AMQP properties present,
// bit2 Target, bit3 Attempt, bit4 RoutingKey, bit5 Reason present (non-zero);
// bits 6-7 the source broker: 1 kafka, 2 amqp, 3 http, 0 = its name follows as text.
//
// DueAt-ReceivedAt (the requested delay) is a few bytes where ReceivedAt itself would
// be six; the difference wraps, so any pair of int64s round-trips.
//
// A header key is a uvarint k: k < 16 is a well-known name (wellKnownKeys[k]; the rest of
// 0..15 are reserved), otherwise k-16 bytes of name follow. A header value is a type tag
// and its encoding (see appendValue); string values that are canonical decimal text
// are numbers (tDecText), and a top-level x-delay written that way is stored relative to
// DueAt-ReceivedAt (tDelayText), both decoded back to the exact original text.
//
// AMQP: a uvarint mask with bit i set for each non-zero property, in the order
// ContentType ContentEncoding DeliveryMode Priority CorrelationID ReplyTo Expiration
// MessageID Timestamp Type UserID AppID, then those properties (strings, the two
// modes as one byte each, Timestamp as varint unix seconds).
const (
	v2FlagKey        = 1 << 0
	v2FlagAMQP       = 1 << 1
	v2FlagTarget     = 1 << 2
	v2FlagAttempt    = 1 << 3
	v2FlagRoutingKey = 1 << 4
	v2FlagReason     = 1 << 5
	v2BrokerShift    = 6

	v2BrokerText  = 0
	v2BrokerKafka = 1
	v2BrokerAMQP  = 2
	v2BrokerHTTP  = 3

	v2KnownKeys  = 16 // header key codes below this name a well-known key
	v2AMQPFields = 12
)

// wellKnownKeys are the header names stored as one byte in version 2. The list is part
// of the format: entries are never changed or reordered, only appended (up to 16).
var wellKnownKeys = [...]string{
	HeaderDelay, HeaderDeliverAt, HeaderMessageID, HeaderDelayTarget,
	HeaderDueAt, HeaderSource, HeaderAttempt,
	"traceparent", "tracestate", "baggage", "content-type",
}

var wellKnownCode = func() map[string]uint64 {
	m := make(map[string]uint64, len(wellKnownKeys))
	for i, k := range wellKnownKeys {
		m[k] = uint64(i)
	}
	return m
}()

// Encode returns the binary form of e in the current version (2). e.ID is not part of
// it: the caller stores the result under e.ID and passes that id to Decode. It fails
// only for header values of a type the format cannot carry.
func Encode(e *Envelope) ([]byte, error) {
	return AppendEncode(make([]byte, 0, 32+len(e.Route)+len(e.Source)+len(e.Payload)+len(e.Key)+16*len(e.Headers)), e)
}

// AppendEncode appends the binary form of e (as Encode) to dst.
func AppendEncode(dst []byte, e *Envelope) ([]byte, error) {
	var flags byte
	if e.Key != nil {
		flags |= v2FlagKey
	}
	if e.AMQP != nil {
		flags |= v2FlagAMQP
	}
	if e.Target != "" {
		flags |= v2FlagTarget
	}
	if e.Attempt != 0 {
		flags |= v2FlagAttempt
	}
	if e.RoutingKey != "" {
		flags |= v2FlagRoutingKey
	}
	if e.Reason != "" {
		flags |= v2FlagReason
	}
	broker := byte(v2BrokerText)
	switch e.SourceBroker {
	case BrokerKafka:
		broker = v2BrokerKafka
	case BrokerAMQP:
		broker = v2BrokerAMQP
	case BrokerHTTP:
		broker = v2BrokerHTTP
	}
	flags |= broker << v2BrokerShift

	b := append(dst, version2, flags)
	b = appendString(b, e.Route)
	if broker == v2BrokerText {
		b = appendString(b, e.SourceBroker)
	}
	b = appendString(b, e.Source)
	if flags&v2FlagTarget != 0 {
		b = appendString(b, e.Target)
	}
	ref := e.DueAt - e.ReceivedAt // wraps for extreme values; decoding wraps back
	b = binary.AppendVarint(b, e.DueAt)
	b = binary.AppendVarint(b, ref)
	if flags&v2FlagAttempt != 0 {
		b = binary.AppendVarint(b, int64(e.Attempt))
	}
	if flags&v2FlagKey != 0 {
		b = appendBytes(b, e.Key)
	}
	if flags&v2FlagRoutingKey != 0 {
		b = appendString(b, e.RoutingKey)
	}
	b = appendBytes(b, e.Payload)
	b = binary.AppendUvarint(b, uint64(len(e.Headers)))
	var err error
	for _, h := range e.Headers {
		if code, ok := wellKnownCode[h.Key]; ok {
			b = binary.AppendUvarint(b, code)
		} else {
			b = binary.AppendUvarint(b, v2KnownKeys+uint64(len(h.Key)))
			b = append(b, h.Key...)
		}
		if s, ok := h.Value.(string); ok && h.Key == HeaderDelay {
			if n, ok := decText(s); ok {
				b = binary.AppendVarint(append(b, tDelayText), n-ref)
				continue
			}
		}
		if b, err = appendValue(b, h.Value, 0); err != nil {
			return nil, fmt.Errorf("header %q: %w", h.Key, err)
		}
	}
	if p := e.AMQP; p != nil {
		b = appendAMQPv2(b, p)
	}
	if flags&v2FlagReason != 0 {
		b = appendString(b, e.Reason)
	}
	return b, nil
}

func appendAMQPv2(b []byte, p *AMQPProperties) []byte {
	strs := [...]*string{
		0: &p.ContentType, 1: &p.ContentEncoding, 4: &p.CorrelationID, 5: &p.ReplyTo,
		6: &p.Expiration, 7: &p.MessageID, 9: &p.Type, 10: &p.UserID, 11: &p.AppID,
	}
	var mask uint64
	for i, s := range strs {
		if s != nil && *s != "" {
			mask |= 1 << i
		}
	}
	if p.DeliveryMode != 0 {
		mask |= 1 << 2
	}
	if p.Priority != 0 {
		mask |= 1 << 3
	}
	if !p.Timestamp.IsZero() {
		mask |= 1 << 8
	}
	b = binary.AppendUvarint(b, mask)
	for i := range v2AMQPFields {
		if mask&(1<<i) == 0 {
			continue
		}
		switch i {
		case 2:
			b = append(b, p.DeliveryMode)
		case 3:
			b = append(b, p.Priority)
		case 8:
			b = binary.AppendVarint(b, p.Timestamp.Unix())
		default:
			b = appendString(b, *strs[i])
		}
	}
	return b
}

// decodeV2 parses a version 2 envelope after its version byte. The caller sets ID.
func decodeV2(data []byte, src string) (*Envelope, error) {
	d := decoder{buf: data}
	if src != "" {
		d.src = src[len(src)-len(data):]
	}
	flags := d.byte()
	e := &Envelope{}
	e.Route = d.internedString()
	switch flags >> v2BrokerShift {
	case v2BrokerText:
		e.SourceBroker = d.string()
	case v2BrokerKafka:
		e.SourceBroker = BrokerKafka
	case v2BrokerAMQP:
		e.SourceBroker = BrokerAMQP
	case v2BrokerHTTP:
		e.SourceBroker = BrokerHTTP
	}
	e.Source = d.string()
	if flags&v2FlagTarget != 0 {
		e.Target = d.internedString()
	}
	e.DueAt = d.varint()
	d.ref = d.varint()
	e.ReceivedAt = e.DueAt - d.ref
	if flags&v2FlagAttempt != 0 {
		attempt := d.varint()
		if attempt < 0 || attempt > math.MaxInt32 {
			d.fail()
		}
		e.Attempt = int32(attempt)
	}
	if flags&v2FlagKey != 0 {
		e.Key = d.bytes()
		if e.Key == nil {
			e.Key = []byte{}
		}
	}
	if flags&v2FlagRoutingKey != 0 {
		e.RoutingKey = d.string()
	}
	e.Payload = d.bytes()
	n := d.count()
	if n > 0 {
		e.Headers = make([]Header, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		var k string
		switch code := d.uvarint(); {
		case code < uint64(len(wellKnownKeys)):
			k = wellKnownKeys[code]
		case code < v2KnownKeys:
			d.fail()
		case code-v2KnownKeys > uint64(len(d.buf)):
			d.fail()
		default:
			k = d.fixedString(int(code - v2KnownKeys))
		}
		v := d.value(0)
		e.Headers = append(e.Headers, Header{Key: k, Value: v})
	}
	if flags&v2FlagAMQP != 0 {
		e.AMQP = d.amqpV2()
	}
	if flags&v2FlagReason != 0 {
		e.Reason = d.string()
	}
	return d.finish(e)
}

func (d *decoder) amqpV2() *AMQPProperties {
	p := &AMQPProperties{}
	mask := d.uvarint()
	if mask >= 1<<v2AMQPFields {
		d.fail()
		return p
	}
	strs := [...]*string{
		0: &p.ContentType, 1: &p.ContentEncoding, 4: &p.CorrelationID, 5: &p.ReplyTo,
		6: &p.Expiration, 7: &p.MessageID, 9: &p.Type, 10: &p.UserID, 11: &p.AppID,
	}
	for i := range v2AMQPFields {
		if mask&(1<<i) == 0 {
			continue
		}
		switch i {
		case 2:
			p.DeliveryMode = d.byte()
		case 3:
			p.Priority = d.byte()
		case 8:
			p.Timestamp = time.Unix(d.varint(), 0).UTC()
		default:
			*strs[i] = d.string()
		}
	}
	return p
}
