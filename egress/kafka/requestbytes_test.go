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
	"github.com/delaybridge/delay-bridge/testkit"
)

// TestProduceRequestsBoundedByBytes: one publish of 48 records of 256 KiB (12 MiB) over
// two partitions of one broker goes out in produce requests of at most RequestBytes
// (1 MiB) of records each, plus one record of 2 MiB (larger than the cap) alone; every
// record arrives once, in publish order per partition. The broker sees each request's
// record sets (kfake's control hook), so the bound is the bytes on the wire.
func TestProduceRequestsBoundedByBytes(t *testing.T) {
	const reqBytes = 1 << 20
	target := testkit.Uniq(t, "large")
	addr, c := startCluster(t, 1, 2, []string{target}, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(4 << 20)}))
	var mu sync.Mutex
	var sizes []int
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n := 0
		for _, tp := range r.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				n += len(p.Records)
			}
		}
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
		return nil, nil, false
	})
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{RequestBytes: reqBytes})
	msgs := make([]*envelope.Envelope, 49)
	for i := range msgs {
		msgs[i] = env(strconv.Itoa(i), "r", []byte(fmt.Sprint("key-", i%7)))
		size := 256 << 10
		if i == 20 {
			size = 2 << 20
		}
		msgs[i].Payload = append([]byte(fmt.Sprintf("p-%d.", i)), bytes.Repeat([]byte("x"), size)...)
	}
	for i, err := range s.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	recs := newReader(t, addr, target).records(t, len(msgs), 60*time.Second)
	last := map[int32]int{}
	seen := map[int]bool{}
	for _, rec := range recs {
		var num int
		if _, err := fmt.Sscanf(string(rec.Value), "p-%d.", &num); err != nil || seen[num] {
			t.Fatalf("record %.12q: %v (or arrived twice)", rec.Value, err)
		}
		seen[num] = true
		if prev, ok := last[rec.Partition]; ok && num < prev {
			t.Fatalf("partition %d: message %d after %d, out of publish order", rec.Partition, num, prev)
		}
		last[rec.Partition] = num
	}
	mu.Lock()
	defer mu.Unlock()
	big := 0
	for _, n := range sizes {
		switch {
		case n > 2<<20:
			big++ // the 2 MiB record's request: it must carry nothing else
			if n > 2<<20+4<<10 {
				t.Errorf("the request carrying the 2 MiB record has %d bytes of records: not alone", n)
			}
		case n > reqBytes:
			t.Errorf("a produce request carried %d bytes of records, over RequestBytes (%d)", n, reqBytes)
		}
	}
	if big != 1 || len(sizes) < 12 {
		t.Fatalf("%d produce requests (%d with the 2 MiB record): %v", len(sizes), big, sizes)
	}
	t.Logf("%d produce requests, record bytes %v", len(sizes), sizes)
}
