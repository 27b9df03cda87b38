package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	kafkaout "github.com/delaybridge/delay-bridge/egress/kafka"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/testkit"
)

// startCluster starts kfake with brokers brokers and the topics seeded with partitions
// partitions each (leaders spread over the brokers), plus opts.
func startCluster(t *testing.T, brokers, partitions int, topics []string, opts ...kfake.Opt) (string, *kfake.Cluster) {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(brokers), kfake.SeedTopics(int32(partitions), topics...)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0], c
}

// TestPublishOverLeadersAndTopicsKeepsPartitionOrder: one publish spread over every
// partition of two topics whose leaders are three brokers (several produce requests,
// some split for size) arrives complete, once, and in publish order per partition.
func TestPublishOverLeadersAndTopicsKeepsPartitionOrder(t *testing.T) {
	a, b := testkit.Uniq(t, "a"), testkit.Uniq(t, "b")
	addr, c := startCluster(t, 3, 6, []string{a, b})
	for _, topic := range []string{a, b} { // kfake picks leaders at random: spread them
		for p := int32(0); p < 6; p++ {
			if err := c.MoveTopicPartition(topic, p, p%3); err != nil {
				t.Fatalf("move %s/%d: %v", topic, p, err)
			}
		}
	}
	s := newSink(t, addr, nil, kafkaout.Options{})
	const n = 1200
	msgs := make([]*envelope.Envelope, n)
	for i := range msgs {
		msgs[i] = env(strconv.Itoa(i), "r", []byte(fmt.Sprint("key-", i%37)))
		msgs[i].Target = a
		if i%2 == 1 {
			msgs[i].Target = b
		}
	}
	for i, err := range s.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	recs := newReader(t, addr, a, b).records(t, n, 60*time.Second)
	seen := map[string]bool{}
	last := map[string]int{} // topic/partition -> last message number
	parts := map[string]bool{}
	for _, rec := range recs {
		id := string(rec.Value[len("p-"):])
		if seen[id] {
			t.Fatalf("message %s arrived twice", id)
		}
		seen[id] = true
		num, _ := strconv.Atoi(id)
		tp := fmt.Sprintf("%s/%d", rec.Topic, rec.Partition)
		parts[tp] = true
		if prev, ok := last[tp]; ok && num < prev {
			t.Fatalf("%s: message %d after %d, out of publish order", tp, num, prev)
		}
		last[tp] = num
	}
	if len(seen) != n || len(parts) != 12 {
		t.Fatalf("%d distinct messages over %d partitions, want %d over 12", len(seen), len(parts), n)
	}
}

// TestLeaderMoveIsRetriedWithinPublish: after a partition's leader moved, the old leader
// answers "not leader" (nothing appended); the sink refreshes its metadata and writes
// the record again within the same Publish, to the new leader.
func TestLeaderMoveIsRetriedWithinPublish(t *testing.T) {
	target := testkit.Uniq(t, "moving")
	addr, c := startCluster(t, 3, 1, []string{target})
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{})
	if errs := s.Publish(context.Background(), []*envelope.Envelope{env("a", "r", nil)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	old := c.LeaderFor(target, 0)
	if err := c.MoveTopicPartition(target, 0, (old+1)%3); err != nil {
		t.Fatalf("move partition: %v", err)
	}
	if errs := s.Publish(context.Background(), []*envelope.Envelope{env("b", "r", nil)}); errs[0] != nil {
		t.Fatalf("publish after the leader moved: %v", errs[0])
	}
	got := newReader(t, addr, target).records(t, 2, 30*time.Second)
	if string(got[0].Value) != "p-a" || string(got[1].Value) != "p-b" {
		t.Fatalf("arrived %q %q, want a, b", got[0].Value, got[1].Value)
	}
}

// TestBrokerRefusedSetFailsOnlyTheCulprit: the broker (message.max.bytes 2000) refuses
// a partition's record set as too large; the sink writes its records again one by one,
// so only the record too large on its own fails (permanently) and its neighbours
// arrive in order. The client-side limit (BatchBytes, 16 MiB) lets all of them pass.
func TestBrokerRefusedSetFailsOnlyTheCulprit(t *testing.T) {
	target := testkit.Uniq(t, "small")
	addr, _ := startCluster(t, 1, 1, []string{target}, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2000"}))
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{})
	msgs := make([]*envelope.Envelope, 5)
	for i, id := range []string{"a", "b", "big", "c", "d"} {
		msgs[i] = env(id, "r", nil)
		msgs[i].Payload = append([]byte("p-"+id), bytes.Repeat([]byte("x"), 300)...)
	}
	msgs[2].Payload = append([]byte("p-big"), bytes.Repeat([]byte("x"), 2500)...)
	errs := s.Publish(context.Background(), msgs)
	for i, err := range errs {
		switch {
		case i == 2 && !fault.IsPermanent(err):
			t.Errorf("the record too large for the broker: %v, want a permanent error", err)
		case i != 2 && err != nil:
			t.Errorf("neighbour %d of the record too large: %v", i, err)
		}
	}
	got := newReader(t, addr, target).records(t, 4, 30*time.Second)
	for i, want := range []string{"p-a", "p-b", "p-c", "p-d"} {
		if !bytes.HasPrefix(got[i].Value, []byte(want+"x")) {
			t.Fatalf("record %d is %.8q, want %s (a, b, c, d in order)", i, got[i].Value, want)
		}
	}
}

// TestUnansweredProduceIsUnknownOutcome: a broker that stops answering (the proxy
// freezes every connection) leaves the produce request of unknown outcome after
// AnswerTimeout; the sink does not write it again, so once the broker wakes and
// applies it, the record is there once.
func TestUnansweredProduceIsUnknownOutcome(t *testing.T) {
	target := testkit.Uniq(t, "stall")
	addr, _, proxy := testkit.StartKafkaBehindProxy(t, 1, target)
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{AnswerTimeout: 300 * time.Millisecond})
	if errs := s.Publish(context.Background(), []*envelope.Envelope{env("a", "r", nil)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	proxy.Freeze()
	errs := s.Publish(context.Background(), []*envelope.Envelope{env("b", "r", nil)})
	proxy.Thaw()
	if !fault.IsUnknownOutcome(errs[0]) || fault.IsPermanent(errs[0]) {
		t.Fatalf("unanswered produce: %v, want a retryable unknown-outcome error", errs[0])
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if errs := s.Publish(context.Background(), []*envelope.Envelope{env("c", "r", nil)}); errs[0] == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("publish after the thaw: %v", errs[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	count := countUntil(t, newReader(t, addr, target), "p-c")
	if count["p-b"] > 1 {
		t.Fatalf("the unanswered record was written %d times: %v", count["p-b"], count)
	}
}

// countUntil reads r until a record with value last arrived and returns how often each
// value was read (the last record published shows that everything before it is in).
func countUntil(t *testing.T, r *reader, last string) map[string]int {
	t.Helper()
	count := map[string]int{}
	for count[last] == 0 {
		for _, rec := range r.records(t, 1, 30*time.Second) {
			count[string(rec.Value)]++
		}
	}
	return count
}

// TestUnknownOutcomeIsNotWrittenAgain: the broker holds a produce request past
// AnswerTimeout while it keeps answering other connections; the sink must not write
// the record again (a second request would be appended at once, and the held one
// when it wakes: a duplicate). The held request is released after Publish returned.
func TestUnknownOutcomeIsNotWrittenAgain(t *testing.T) {
	target := testkit.Uniq(t, "held")
	addr, c := startCluster(t, 1, 1, []string{target})
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{AnswerTimeout: 300 * time.Millisecond})
	if errs := s.Publish(context.Background(), []*envelope.Envelope{env("a", "r", nil)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	held := false
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !held {
			held = true
			c.SleepControl(func() { <-release })
		} else {
			free() // a second produce request: let the first one through as well
		}
		return nil, nil, false
	})
	errs := s.Publish(context.Background(), []*envelope.Envelope{env("b", "r", nil)})
	free()
	if !fault.IsUnknownOutcome(errs[0]) {
		t.Fatalf("held produce: %v, want unknown outcome", errs[0])
	}
	if errs := s.Publish(context.Background(), []*envelope.Envelope{env("c", "r", nil)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	count := countUntil(t, newReader(t, addr, target), "p-c")
	if count["p-b"] > 1 {
		t.Fatalf("the record of unknown outcome was written %d times: %v", count["p-b"], count)
	}
}
