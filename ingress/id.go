package ingress

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// KafkaRecordID is the default id of a Kafka record that has no x-message-id header:
// "topic/partition/offset/hash", the record's position plus the first 48 bits (12 hex
// digits) of a SHA-256 over its timestamp (unix ms), key, value and headers.
//
// The position keeps the id readable and tells where the record came from; the hash
// makes it distinct from any other record at the same position, which the bare
// position is not: after the topic is deleted and recreated, or the producer fails over
// to another cluster, offsets start again and a new record would collide with a parked
// or recently delivered one and be dropped as its duplicate. The same record consumed
// again (a redelivery after a crash or a failed commit) has the same position and
// content, so the same id: parking stays idempotent.
func KafkaRecordID(topic string, partition int, offset int64, ts time.Time, key, value []byte, headers []envelope.Header) string {
	h := sha256.New()
	var n [8]byte
	putLen := func(l int, isNil bool) {
		v := uint64(l)
		if isNil {
			v = ^uint64(0) // a null key or value differs from an empty one
		}
		binary.BigEndian.PutUint64(n[:], v)
		h.Write(n[:])
	}
	binary.BigEndian.PutUint64(n[:], uint64(ts.UnixMilli()))
	h.Write(n[:])
	putLen(len(key), key == nil)
	h.Write(key)
	putLen(len(value), value == nil)
	h.Write(value)
	putLen(len(headers), false)
	for _, hd := range headers {
		k := hd.Key
		v, _ := hd.Value.(string) // Kafka header values are kept as strings
		putLen(len(k), false)
		h.Write([]byte(k))
		putLen(len(v), false)
		h.Write([]byte(v))
	}
	sum := h.Sum(nil)
	return topic + "/" + strconv.Itoa(partition) + "/" + strconv.FormatInt(offset, 10) + "/" + hex.EncodeToString(sum[:6])
}
