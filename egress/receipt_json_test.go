package egress

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestReceiptAppendJSON: the hand-written encoder makes the document encoding/json
// makes (decoded, they are equal; byte for byte too when no string needs HTML
// escaping), for every outcome's fields and strings that need escaping or are not
// valid UTF-8.
func TestReceiptAppendJSON(t *testing.T) {
	late, att := int64(-3), int32(10)
	part, off := int32(2), int64(123456789012)
	cases := []Receipt{
		{V: 1, Outcome: ReceiptCancelled, ID: "a", Route: "r", At: "2026-11-24T23:00:00.000Z"},
		{V: 1, Outcome: ReceiptDelivered, ID: "id-1", Route: "orders", At: "x", DueAt: "y", PublishedAt: "x", LatenessMs: &late,
			Target: &ReceiptTarget{Broker: "kafka", Topic: "t", Partition: &part, Offset: &off}, Traceparent: "00-1", Correlation: "c"},
		{V: 1, Outcome: ReceiptDelivered, ID: "id-2", Route: "r", At: "x", DueAt: "y", PublishedAt: "x", LatenessMs: &late,
			Target: &ReceiptTarget{Broker: "amqp", Exchange: "ex", RoutingKey: "k.1"}},
		{V: 1, Outcome: ReceiptDeadLettered, ID: "q\"\\\n\r\t\x00\x1f</>&é😀", Route: "r", At: "x", Reason: "bad\xff\xfe utf-8", Attempts: &att},
	}
	for _, rc := range cases {
		got := rc.AppendJSON(nil)
		want, err := json.Marshal(rc)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("AppendJSON made invalid JSON %s: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("AppendJSON\n got %s\nwant %s", got, want)
		}
		if rc.Outcome != ReceiptDeadLettered && string(got) != string(want) {
			t.Errorf("bytes differ:\n got %s\nwant %s", got, want)
		}
	}
}
