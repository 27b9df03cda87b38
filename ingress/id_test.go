package ingress

import (
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// TestKafkaRecordID: the default Kafka id is stable for the same record and position,
// readable (the position first), and differs for a different record at the same
// position — whichever of timestamp, key (also null vs empty), value or headers differs.
func TestKafkaRecordID(t *testing.T) {
	ts := time.UnixMilli(1_700_000_000_123)
	hs := []envelope.Header{{Key: "x-delay", Value: "3600000"}, {Key: "traceparent", Value: "00-ab"}}
	id := KafkaRecordID("orders.delay", 3, 42, ts, []byte("k"), []byte("v"), hs)
	if again := KafkaRecordID("orders.delay", 3, 42, ts, []byte("k"), []byte("v"), append([]envelope.Header(nil), hs...)); again != id {
		t.Fatalf("same record: %q then %q", id, again)
	}
	if !strings.HasPrefix(id, "orders.delay/3/42/") || len(id) != len("orders.delay/3/42/")+12 {
		t.Fatalf("id %q: want topic/partition/offset/ and 12 hex digits", id)
	}
	others := map[string]string{
		"timestamp":    KafkaRecordID("orders.delay", 3, 42, ts.Add(time.Millisecond), []byte("k"), []byte("v"), hs),
		"key":          KafkaRecordID("orders.delay", 3, 42, ts, []byte("k2"), []byte("v"), hs),
		"null key":     KafkaRecordID("orders.delay", 3, 42, ts, nil, []byte("v"), hs),
		"empty key":    KafkaRecordID("orders.delay", 3, 42, ts, []byte{}, []byte("v"), hs),
		"value":        KafkaRecordID("orders.delay", 3, 42, ts, []byte("k"), []byte("v2"), hs),
		"header value": KafkaRecordID("orders.delay", 3, 42, ts, []byte("k"), []byte("v"), []envelope.Header{{Key: "x-delay", Value: "3600001"}, hs[1]}),
		"no headers":   KafkaRecordID("orders.delay", 3, 42, ts, []byte("k"), []byte("v"), nil),
		// Length prefixes: moving a byte from key to value is a different record.
		"split":  KafkaRecordID("orders.delay", 3, 42, ts, []byte(""), []byte("kv"), hs),
		"offset": KafkaRecordID("orders.delay", 3, 43, ts, []byte("k"), []byte("v"), hs),
	}
	seen := map[string]string{id: "original"}
	for what, other := range others {
		if prev, ok := seen[other]; ok {
			t.Errorf("%s: id %q equals the id of %s", what, other, prev)
		}
		seen[other] = what
	}
}

// TestKafkaRecordIDUnchanged pins the default id of a few records: a record consumed
// again by another build of the bridge (a rolling upgrade, a redelivery after a crash)
// must get the same id, or parking it is no longer idempotent. The values are those of
// the first implementation (one streamed SHA-256); the third record is larger than the
// pooled hash buffer.
func TestKafkaRecordIDUnchanged(t *testing.T) {
	ts := time.UnixMilli(1764000000123)
	hs := []envelope.Header{{Key: "x-delay", Value: "3600000"}, {Key: "trace", Value: "abc"}}
	for _, c := range []struct{ got, want string }{
		{KafkaRecordID("orders.delay", 3, 42, ts, []byte("k"), []byte("v"), hs), "orders.delay/3/42/5d225b121213"},
		{KafkaRecordID("t", 0, 0, time.UnixMilli(-1), nil, nil, nil), "t/0/0/aed5982ffd81"},
		{KafkaRecordID("topic-with-a-long-name.delayed.events", 117, 9876543210, ts, []byte{}, make([]byte, 70000), hs),
			"topic-with-a-long-name.delayed.events/117/9876543210/e5f681450ceb"},
		{KafkaRecordID("topic-with-a-long-name.delayed.events", 117, 9876543210, ts, []byte{}, make([]byte, 70000)[:100], hs),
			kafkaRecordIDStreamed("topic-with-a-long-name.delayed.events", 117, 9876543210, ts, []byte{}, make([]byte, 100), hs)},
	} {
		if c.got != c.want {
			t.Errorf("id %q, want %q", c.got, c.want)
		}
	}
}

// kafkaRecordIDStreamed is the id through the streamed hash only.
func kafkaRecordIDStreamed(topic string, partition int, offset int64, ts time.Time, key, value []byte, headers []envelope.Header) string {
	sum := streamRecordHash(ts, key, value, headers)
	return topic + "/" + strconv.Itoa(partition) + "/" + strconv.FormatInt(offset, 10) + "/" + hex.EncodeToString(sum[:6])
}

// BenchmarkKafkaRecordID: a 100-byte record with two headers (the bench's shape).
func BenchmarkKafkaRecordID(b *testing.B) {
	ts := time.UnixMilli(1764000000123)
	hs := []envelope.Header{{Key: "x-delay", Value: "3600000"}, {Key: "x-bench-sent-ns", Value: "1764000000123456789"}}
	val := make([]byte, 100)
	b.ReportAllocs()
	for i := range b.N {
		_ = KafkaRecordID("drain-bridge.in", 3, int64(i), ts, nil, val, hs)
	}
}
