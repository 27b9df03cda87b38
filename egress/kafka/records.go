package kafka

import (
	"strconv"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// kafkaHeaders renders typed header values as Kafka record headers. Every value is
// appended to one buffer (sized from the text values, which dominate) and each header
// gets a capacity-limited slice of it: two allocations per message instead of one or two
// per header, on the path every fired message takes.
func kafkaHeaders(hs []envelope.Header) []kafka.Header {
	size := 0
	for _, h := range hs {
		switch v := h.Value.(type) {
		case string:
			size += len(v)
		case []byte:
			size += len(v)
		default:
			size += 20 // a decimal int64
		}
	}
	buf := make([]byte, 0, size)
	kh := make([]kafka.Header, len(hs))
	for j, h := range hs {
		if h.Value == nil {
			kh[j] = kafka.Header{Key: h.Key}
			continue
		}
		start := len(buf)
		buf = egress.AppendHeaderBytes(buf, h.Value)
		kh[j] = kafka.Header{Key: h.Key, Value: buf[start:len(buf):len(buf)]}
	}
	return kh
}

// outgoingKafkaHeaders is kafkaHeaders(egress.OutgoingHeaders(env, attempt)) without
// the typed headers in between: the four headers the bridge adds are appended as bytes
// straight from the envelope, so their values are never boxed into an interface (three
// allocations and a header slice less per fired message; TestOutgoingKafkaHeadersMatch
// keeps the two equal).
func outgoingKafkaHeaders(env *envelope.Envelope, attempt int32) []kafka.Header {
	size := len(env.ID) + len(env.Source) + 2*20
	for _, h := range env.Headers {
		switch v := h.Value.(type) {
		case string:
			size += len(v) + 1 // a negated x-delay gains a sign
		case []byte:
			size += len(v) + 1
		default:
			size += 20
		}
	}
	buf := make([]byte, 0, size)
	kh := make([]kafka.Header, 0, len(env.Headers)+4)
	add := func(key string, start int) {
		kh = append(kh, kafka.Header{Key: key, Value: buf[start:len(buf):len(buf)]})
	}
	for _, h := range env.Headers {
		v := h.Value
		switch h.Key {
		case envelope.HeaderMessageID, envelope.HeaderDueAt, envelope.HeaderSource, envelope.HeaderAttempt:
			continue // replaced below, as OutgoingHeaders does
		case envelope.HeaderDelay:
			if text, ok := v.(string); ok { // as producers send it: negated in place
				start := len(buf)
				buf = egress.AppendNegatedDelayText(buf, text)
				add(h.Key, start)
				continue
			}
			v = egress.NegateDelay(v)
		}
		if v == nil {
			kh = append(kh, kafka.Header{Key: h.Key})
			continue
		}
		start := len(buf)
		buf = egress.AppendHeaderBytes(buf, v)
		add(h.Key, start)
	}
	start := len(buf)
	buf = append(buf, env.ID...)
	add(envelope.HeaderMessageID, start)
	start = len(buf)
	buf = strconv.AppendInt(buf, env.DueAt, 10)
	add(envelope.HeaderDueAt, start)
	start = len(buf)
	buf = append(buf, env.Source...)
	add(envelope.HeaderSource, start)
	start = len(buf)
	buf = strconv.AppendInt(buf, int64(attempt), 10)
	add(envelope.HeaderAttempt, start)
	return kh
}

// kafkaKey is the record key: the message's Kafka key; for a message without one that
// came from AMQP, its routing key, so messages published with the same routing key keep
// their order on one partition (the reverse of the AMQP sink, which routes a Kafka
// message by its key).
func kafkaKey(env *envelope.Envelope) []byte {
	if env.Key == nil && env.RoutingKey != "" {
		return []byte(env.RoutingKey)
	}
	return env.Key
}

// recordSize is the size kafka-go's Writer checks against BatchBytes before sending
// (Message.totalSize: the v1 message framing plus the record headers), so a record the
// Writer refused is refused here too.
func recordSize(r *record) int64 {
	n := 4 + 1 + 1 + 4 + len(r.key) + 4 + len(r.value) + 8 + varIntLen(len(r.headers))
	for _, h := range r.headers {
		n += varIntLen(len(h.Key)) + len(h.Key) + varIntLen(len(h.Value)) + len(h.Value)
	}
	return int64(n)
}

// varIntLen is the length of n as a zig-zag varint.
func varIntLen(n int) int {
	u := uint64(n) << 1 // n >= 0
	l := 1
	for u >= 0x80 {
		u >>= 7
		l++
	}
	return l
}
