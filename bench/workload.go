package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// payloadSize is the size of every benchmark payload.
const payloadSize = 100

var payload = func() []byte {
	b := make([]byte, payloadSize)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

// delayed builds message i with x-delay uniform in [minD, maxD], timestamped now (the
// x-delay base), keyed uniquely with prefix.
func delayed(prefix string, minD, maxD time.Duration) func(int, time.Time) kafka.Message {
	span := int64(maxD - minD)
	return func(i int, now time.Time) kafka.Message {
		d := minD
		if span > 0 {
			d += time.Duration(rand.Int64N(span + 1))
		}
		return kafka.Message{
			Key: []byte(prefix + strconv.Itoa(i)), Value: payload, Time: now,
			Headers: []kafka.Header{
				{Key: "x-delay", Value: []byte(strconv.FormatInt(d.Milliseconds(), 10))},
				{Key: hdrSentNs, Value: []byte(strconv.FormatInt(now.UnixNano(), 10))},
			},
		}
	}
}

// deliverAt builds message i due at the absolute time at (x-deliver-at, unix ms).
func deliverAt(prefix string, at time.Time, class string) func(int, time.Time) kafka.Message {
	v := []byte(strconv.FormatInt(at.UnixMilli(), 10))
	return func(i int, now time.Time) kafka.Message {
		hs := []kafka.Header{{Key: "x-deliver-at", Value: v}}
		if class != "" {
			hs = append(hs, kafka.Header{Key: hdrClass, Value: []byte(class)})
		}
		return kafka.Message{Key: []byte(prefix + strconv.Itoa(i)), Value: payload, Time: now, Headers: hs}
	}
}

// warmUp sends one due-now message through the path and waits for it, so a step
// starts with the consumer group joined and every connection open.
func warmUp(ctx context.Context, addr, topic string, c *collector) error {
	w := newWriter(addr, topic)
	defer w.Close()
	before := c.warm.Load()
	m := kafka.Message{Key: []byte("warmup"), Value: payload, Time: time.Now(), Headers: []kafka.Header{
		{Key: "x-delay", Value: []byte("0")}, {Key: hdrSentNs, Value: []byte(strconv.FormatInt(time.Now().UnixNano(), 10))},
		{Key: hdrClass, Value: []byte("w")},
	}}
	if err := w.WriteMessages(ctx, m); err != nil {
		return fmt.Errorf("warm-up write: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for c.warm.Load() <= before {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("warm-up message did not arrive within 60s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.reset()
	return nil
}
