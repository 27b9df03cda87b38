package kafka

import (
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestReuseBatchHoldsNoRecord: the slice a partition's reader keeps between fetches
// must not keep the last batch's payloads alive, and must not keep a burst's large
// slice at all.
func TestReuseBatchHoldsNoRecord(t *testing.T) {
	msgs := make([]kafka.Message, 0, 64)
	for i := range 3 {
		msgs = append(msgs, kafka.Message{Topic: "t", Offset: int64(i), Value: make([]byte, 1<<20)})
	}
	kept := reuseBatch(msgs)
	if len(kept) != 0 || cap(kept) != 64 {
		t.Fatalf("kept len %d cap %d, want 0 and 64", len(kept), cap(kept))
	}
	for i, m := range kept[:3] {
		if m.Value != nil || m.Topic != "" || m.Offset != 0 {
			t.Errorf("kept slice's element %d still holds a record (value of %d bytes)", i, len(m.Value))
		}
	}
	if big := reuseBatch(make([]kafka.Message, 10, keptBatchCap+1)); big != nil {
		t.Errorf("a slice of capacity %d was kept; want it let go (cap bound %d)", cap(big), keptBatchCap)
	}
}
