package kafka_test

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	kafkain "github.com/delaybridge/delay-bridge/ingress/kafka"
)

// TestRawCopiesHeaderValuesOnce: a record's header values are copied into one string
// (one allocation for all of them, not one per header) and come out unchanged.
func TestRawCopiesHeaderValuesOnce(t *testing.T) {
	m := &kafka.Message{Topic: "t", Partition: 1, Offset: 7, Time: time.UnixMilli(1700000000000), Key: []byte("k"), Value: []byte("v"),
		Headers: []kafka.Header{{Key: "x-delay", Value: []byte("60000")}, {Key: "a", Value: []byte("one")}, {Key: "empty"}, {Key: "b", Value: []byte("two")}}}
	var src kafkain.Source
	raw := kafkain.Raw(&src, m, time.Now())
	want := []string{"60000", "one", "", "two"}
	for i, h := range raw.Headers {
		if h.Key != m.Headers[i].Key || h.Value != want[i] {
			t.Fatalf("header %d = %q: %#v, want %q: %q", i, h.Key, h.Value, m.Headers[i].Key, want[i])
		}
	}
	// The record's id (one string) and the header slice are the other allocations; the
	// values cost one copy and one interface box each.
	base := testing.AllocsPerRun(100, func() {
		m2 := *m
		m2.Headers = nil
		kafkain.Raw(&src, &m2, time.Now())
	})
	got := testing.AllocsPerRun(100, func() { kafkain.Raw(&src, m, time.Now()) })
	if max := base + 1 + 1 + float64(len(m.Headers)); got > max {
		t.Fatalf("raw allocates %.0f times for %d headers (%.0f without), want at most %.0f", got, len(m.Headers), base, max)
	}
}

// TestReleasedBatchKeepsNoRecord: a fetch's slice given back for the next batch holds
// no record (their payloads and keys are the converted items' now, not the pool's).
func TestReleasedBatchKeepsNoRecord(t *testing.T) {
	msgs := []kafka.Message{{Topic: "t", Offset: 1, Value: []byte("payload")}, {Topic: "t", Offset: 2, Key: []byte("k")}}
	kept := msgs[:cap(msgs)]
	kafkain.Release(&kafkain.Source{}, msgs)
	for i, m := range kept {
		if m.Value != nil || m.Key != nil || m.Topic != "" {
			t.Fatalf("record %d still held after release: %+v", i, m)
		}
	}
}
