package ingress

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"sync"
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
//
// It runs once per consumed record: the hashed bytes are gathered in a pooled buffer and
// hashed with sha256.Sum256, and the id is built in one allocation (BenchmarkKafkaRecordID:
// one allocation per record; TestKafkaRecordIDUnchanged keeps the ids stable).
func KafkaRecordID(topic string, partition int, offset int64, ts time.Time, key, value []byte, headers []envelope.Header) string {
	var sum [sha256.Size]byte
	size := 8 + 16 + len(key) + len(value) + 8
	for _, hd := range headers {
		v, _ := hd.Value.(string)
		size += 16 + len(hd.Key) + len(v)
	}
	if size > maxPooledHashInput {
		sum = streamRecordHash(ts, key, value, headers)
	} else {
		bp := hashInputs.Get().(*[]byte)
		b := appendRecordHashInput((*bp)[:0], ts, key, value, headers)
		sum = sha256.Sum256(b)
		*bp = b
		hashInputs.Put(bp)
	}
	var stack [96]byte
	id := append(stack[:0], topic...)
	id = append(id, '/')
	id = strconv.AppendInt(id, int64(partition), 10)
	id = append(id, '/')
	id = strconv.AppendInt(id, offset, 10)
	id = append(id, '/')
	id = hex.AppendEncode(id, sum[:6])
	return string(id)
}

// maxPooledHashInput bounds the records hashed through the pooled buffer (and so the
// buffers the pool keeps); larger ones are streamed through a hash.Hash.
const maxPooledHashInput = 64 << 10

var hashInputs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendRecordHashInput appends what KafkaRecordID hashes: the timestamp (unix ms), then
// each of key, value, the header count and every header's key and value, each field
// after its length (all as 8 bytes big endian; a null key or value has length ^0, so it
// differs from an empty one).
func appendRecordHashInput(b []byte, ts time.Time, key, value []byte, headers []envelope.Header) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(ts.UnixMilli()))
	b = binary.BigEndian.AppendUint64(b, hashLen(len(key), key == nil))
	b = append(b, key...)
	b = binary.BigEndian.AppendUint64(b, hashLen(len(value), value == nil))
	b = append(b, value...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(headers)))
	for _, hd := range headers {
		v, _ := hd.Value.(string) // Kafka header values are kept as strings
		b = binary.BigEndian.AppendUint64(b, uint64(len(hd.Key)))
		b = append(b, hd.Key...)
		b = binary.BigEndian.AppendUint64(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

func hashLen(l int, isNil bool) uint64 {
	if isNil {
		return ^uint64(0)
	}
	return uint64(l)
}

// streamRecordHash hashes the same bytes as appendRecordHashInput without gathering
// them (records above maxPooledHashInput).
func streamRecordHash(ts time.Time, key, value []byte, headers []envelope.Header) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	putLen := func(v uint64) {
		binary.BigEndian.PutUint64(n[:], v)
		h.Write(n[:])
	}
	putLen(uint64(ts.UnixMilli()))
	putLen(hashLen(len(key), key == nil))
	h.Write(key)
	putLen(hashLen(len(value), value == nil))
	h.Write(value)
	putLen(uint64(len(headers)))
	for _, hd := range headers {
		v, _ := hd.Value.(string)
		putLen(uint64(len(hd.Key)))
		h.Write([]byte(hd.Key))
		putLen(uint64(len(v)))
		h.Write([]byte(v))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
