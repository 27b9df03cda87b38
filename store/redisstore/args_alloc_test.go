package redisstore

import (
	"fmt"
	"testing"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// The hot path's argument lists allocate per call, not per message: a park call's
// quick layout passes its envelopes and an ack's done runs their strings by pointer
// (go-redis writes a *string as its value), so no []byte is boxed into an interface
// one by one. Each test compares a call of many messages with a call of few.
func TestQuickParkArgsAllocatePerCall(t *testing.T) {
	s, _, _ := newTestStore(t, Options{Shards: 1})
	allocs := func(n int) float64 {
		envs := make([]*envelope.Envelope, n)
		ch := make([]encoded, n)
		for i := range envs {
			envs[i] = env(kafkaID(1, 1000+i), 1_800_000_000_000)
			data, err := envelope.Encode(envs[i])
			if err != nil {
				t.Fatal(err)
			}
			ch[i] = encoded{idx: i, data: data}
		}
		claim := storeapi.ParkClaim{Instance: "i1", Leases: map[int]storeapi.ParkLease{0: {Token: 1, LeaseDeadline: 1}}}
		c, _ := s.parkCall(envs, 0, ch, 1_700_000_000_000, -1, claim, true)
		if c.args[2] == 0 {
			t.Fatalf("%d Kafka default ids of one block: not a quick call", n)
		}
		return testing.AllocsPerRun(50, func() { s.parkCall(envs, 0, ch, 1_700_000_000_000, -1, claim, true) })
	}
	// Slices that grow with the call (appendSpans', the header's) may double a few times.
	if few, many := allocs(10), allocs(200); many > few+8 {
		t.Fatalf("a quick park call allocates %.0f times for 10 messages, %.0f for 200: want no allocation per message", few, many)
	}
}

func TestAckRunsArgsAllocatePerCall(t *testing.T) {
	allocs := func(n int) float64 {
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("orders.delay/%d/%d/%012x", i%6, 100_000+i*37, i))
		}
		args := make([]any, 0, 8*n)
		return testing.AllocsPerRun(50, func() { appendAckRuns(args[:0], ids, 1_795_956_257_123) })
	}
	if few, many := allocs(10), allocs(200); many > few+8 {
		t.Fatalf("the done runs of 10 ids allocate %.0f times, of 200 %.0f: want no allocation per run", few, many)
	}
}
