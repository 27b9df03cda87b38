package main

import (
	"context"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
)

// runPassthrough is `bench -child passthrough`: the ceiling the bridge is held against.
// It runs the bridge's Kafka path without Redis and without delay, with the bridge's own
// client settings: a consumer-group reader like ingress/kafka (MaxWait 5ms, backoff
// 1–5ms, batches of up to 1000 records or 2ms) with 1 MiB fetches like ingress/kafka
// (a larger fetch livelocks against kfake once a consumer lags: kafka-go's read deadline
// for the response is MaxWait, which a large answer misses), four writer workers like the egress
// dispatcher, a Writer like egress/kafka (acks=all, 1ms linger, batches of 1000,
// murmur2), and the egress headers x-delay-due-at (the record timestamp: zero delay) and
// x-message-id. Offsets are committed after the batch was written.
func runPassthrough(broker, from, to, group string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{broker}, GroupID: group, Topic: from,
		QueueCapacity: 1000, MinBytes: 1, MaxBytes: 1 << 20,
		MaxWait: 5 * time.Millisecond, ReadBackoffMin: time.Millisecond, ReadBackoffMax: 5 * time.Millisecond,
		StartOffset: kafka.FirstOffset, JoinGroupBackoff: time.Second,
	})
	defer r.Close()
	w := newWriter(broker, to)
	defer w.Close()

	type batch struct{ in []kafka.Message }
	work := make(chan batch, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				out := make([]kafka.Message, len(b.in))
				for i, m := range b.in {
					hs := make([]kafka.Header, 0, len(m.Headers)+2)
					hs = append(hs, m.Headers...)
					hs = append(hs,
						kafka.Header{Key: "x-message-id", Value: []byte(m.Topic + "/" + strconv.Itoa(m.Partition) + "/" + strconv.FormatInt(m.Offset, 10))},
						kafka.Header{Key: "x-delay-due-at", Value: []byte(strconv.FormatInt(m.Time.UnixMilli(), 10))})
					out[i] = kafka.Message{Key: m.Key, Value: m.Value, Headers: hs}
				}
				for ctx.Err() == nil {
					if err := w.WriteMessages(ctx, out...); err == nil {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				_ = r.CommitMessages(context.WithoutCancel(ctx), b.in...)
			}
		}()
	}
	defer wg.Wait()
	defer close(work)
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		msgs := []kafka.Message{m}
		bctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
		for len(msgs) < 1000 {
			m, err := r.FetchMessage(bctx)
			if err != nil {
				break
			}
			msgs = append(msgs, m)
		}
		cancel()
		select {
		case work <- batch{msgs}:
		case <-ctx.Done():
			return nil
		}
	}
}
