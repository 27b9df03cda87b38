package kafka_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	kafkaout "github.com/delaybridge/delay-bridge/egress/kafka"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/testkit"
)

// TestPublishPlacesEachRecord: after Publish every confirmed message's envelope holds
// the partition and offset its record has on the broker (the receipts' target.partition
// and .offset), over 6 partitions led by 3 brokers, requests split by BatchSize, and a
// second publish continuing the offsets; a dead-letter copy is not placed.
func TestPublishPlacesEachRecord(t *testing.T) {
	target := testkit.Uniq(t, "placed")
	addr, c := startCluster(t, 3, 6, []string{target, "dlq"})
	for p := int32(0); p < 6; p++ {
		if err := c.MoveTopicPartition(target, p, p%3); err != nil {
			t.Fatalf("move %d: %v", p, err)
		}
	}
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{BatchSize: 7})
	var all []*envelope.Envelope
	for round := range 2 {
		msgs := make([]*envelope.Envelope, 150)
		for i := range msgs {
			msgs[i] = env(strconv.Itoa(round*150+i), "r", []byte(fmt.Sprint("key-", i%23)))
		}
		for i, err := range s.Publish(context.Background(), msgs) {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		all = append(all, msgs...)
	}
	at := map[string]string{} // id -> partition/offset on the broker
	for _, rec := range newReader(t, addr, target).records(t, len(all), 60*time.Second) {
		at[string(rec.Value[len("p-"):])] = fmt.Sprintf("%d/%d", rec.Partition, rec.Offset)
	}
	parts := map[int32]bool{}
	for _, e := range all {
		if e.Placed == nil {
			t.Fatalf("message %s: not placed", e.ID)
		}
		if got := fmt.Sprintf("%d/%d", e.Placed.Partition, e.Placed.Offset); got != at[e.ID] {
			t.Fatalf("message %s: placed at %s, on the broker at %s", e.ID, got, at[e.ID])
		}
		parts[e.Placed.Partition] = true
	}
	if len(parts) != 6 {
		t.Errorf("placed over %d partitions, want 6", len(parts))
	}
	dead := env("dead", "r", nil)
	if err := s.DeadLetters("dlq").PublishDead(context.Background(), []*envelope.Envelope{dead}); err != nil {
		t.Fatal(err)
	}
	if dead.Placed != nil {
		t.Errorf("a dead-letter copy was placed: %+v", *dead.Placed)
	}
}

// headersTracer is an egress.Tracer that opens no span: the dispatcher then publishes
// copies of the messages, as with tracing on.
type headersTracer struct{}

func (headersTracer) Start(env *envelope.Envelope, _ string, _, _ time.Time) ([]envelope.Header, func(time.Time, error)) {
	return append([]envelope.Header(nil), env.Headers...), func(time.Time, error) {}
}

// nopCompleter takes the dispatcher's outcomes and does nothing with them.
type nopCompleter struct{}

func (nopCompleter) Published(context.Context, []*envelope.Envelope)       {}
func (nopCompleter) Failed(context.Context, []*envelope.Envelope, []error) {}
func (nopCompleter) Dropped([]*envelope.Envelope)                          {}
func (nopCompleter) Unpublished([]*envelope.Envelope)                      {}

// TestDispatcherPlacesWithTracing: with a Tracer the dispatcher publishes copies; the
// delivered messages it reports (OnDelivered: the receipts) still carry the partition
// and offset their copies were appended at.
func TestDispatcherPlacesWithTracing(t *testing.T) {
	target := testkit.Uniq(t, "traced")
	addr, _ := startCluster(t, 1, 3, []string{target})
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{})
	got := make(chan []*envelope.Envelope, 1)
	d := egress.NewDispatcher(egress.DispatcherOptions{
		Routes:    map[string]egress.RouteSink{"r": {Sink: s, Broker: envelope.BrokerKafka}},
		Completer: nopCompleter{}, Tracer: headersTracer{},
		OnDelivered: func(_ string, envs []*envelope.Envelope, _ time.Time) { got <- envs },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	msgs := make([]*envelope.Envelope, 30)
	for i := range msgs {
		msgs[i] = env(strconv.Itoa(i), "r", []byte(fmt.Sprint("key-", i)))
	}
	d.Submit(msgs)
	var delivered []*envelope.Envelope
	for len(delivered) < len(msgs) {
		select {
		case envs := <-got:
			delivered = append(delivered, envs...)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d delivered", len(delivered), len(msgs))
		}
	}
	at := map[string]string{}
	for _, rec := range newReader(t, addr, target).records(t, len(msgs), 30*time.Second) {
		at[string(rec.Value[len("p-"):])] = fmt.Sprintf("%d/%d", rec.Partition, rec.Offset)
	}
	for _, e := range delivered {
		if e.Placed == nil || fmt.Sprintf("%d/%d", e.Placed.Partition, e.Placed.Offset) != at[e.ID] {
			t.Fatalf("message %s: placed %+v, on the broker at %s", e.ID, e.Placed, at[e.ID])
		}
	}
}
