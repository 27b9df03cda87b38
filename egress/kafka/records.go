package kafka

import (
	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// byTopic groups the indexes of recs by topic, in order of first appearance.
func byTopic(recs []kafka.Message) [][]int {
	var groups [][]int
	at := map[string]int{}
	for i := range recs {
		g, ok := at[recs[i].Topic]
		if !ok {
			g = len(groups)
			at[recs[i].Topic] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// removedIndex finds the record kafka-go left out of remaining (recs minus one record,
// in order), identifying records by their header slice, which publish allocates per
// record and which always holds the egress headers.
func removedIndex(recs, remaining []kafka.Message) int {
	if len(remaining) != len(recs)-1 {
		return -1
	}
	for i := range remaining {
		if len(recs[i].Headers) == 0 || len(remaining[i].Headers) == 0 || &recs[i].Headers[0] != &remaining[i].Headers[0] {
			return i
		}
	}
	return len(recs) - 1
}

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
