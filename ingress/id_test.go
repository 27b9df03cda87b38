package ingress

import (
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
