package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/ingress"
)

// TestTopicRecreatedUnderRunningSource: a source has consumed and committed 20 records
// of a one-partition topic; the topic is deleted and recreated under it and 10 new
// records are produced (offsets 0–9, below the reader's position 20). kafka-go alone
// keeps its old position and waits there (the records below it would never be read);
// the source finds its position beyond the partition's end (its own offset poll, or
// the reader's offset-out-of-range error), says so (a reset counted on the partition,
// the route's detail, an info line naming the recreated topic) and reads the new topic
// from its start. The stall timeout is far beyond the test, so a stall replacement is
// not what heals it.
func TestTopicRecreatedUnderRunningSource(t *testing.T) {
	e := newEnv(t, 1)
	e.stall = 10 * time.Minute
	e.produce(t, 20, 1, "old")
	a := e.start(t, "a", nil)
	waitFor(t, "the 20 records of the first topic handled and committed", func() bool {
		h := a.src.Health()
		return e.unique() == 20 && h.State == ingress.StateConsuming && h.Lag == 0
	})

	recreateTopic(t, e.addr(), e.topic)
	e.produce(t, 10, 1, "new")
	waitFor(t, "the 10 records of the recreated topic handled", func() bool { return e.unique() == 30 })

	h := a.src.Health()
	if h.Rebuilds < 1 || len(h.PartitionStates) != 1 || h.PartitionStates[0].Resets < 1 {
		t.Errorf("health %+v: want a reset of partition 0 after the topic was recreated", h)
	}
	if !strings.Contains(h.Detail, "recreated") {
		t.Errorf("route detail %q: want the reset named", h.Detail)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "the partition's reader") || !strings.Contains(logs, "deleted and recreated") {
		t.Errorf("no info line for the reset naming the recreated topic:\n%s", logs)
	}
}

// recreateTopic deletes topic and creates it again with one partition.
func recreateTopic(t *testing.T, addr, topic string) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(addr), Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topic}}); err != nil || res.Errors[topic] != nil {
		t.Fatalf("delete topic: %v %v", err, res)
	}
	waitFor(t, "the topic recreated", func() bool {
		res, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}}})
		if err != nil {
			return false
		}
		// The reader's metadata requests may have created it already (auto-creation).
		return res.Errors[topic] == nil || strings.Contains(res.Errors[topic].Error(), "already exists")
	})
}
