package scheduler_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// A same-instant burst of large messages is held in memory no more than
// MaxInMemoryBytes at a time (counted as envelope.ClaimedBytes), however many message
// credits are free; a message larger than the whole budget goes through alone; every
// message is published once and none before its due time.
func TestByteBudgetBoundsHeldBytes(t *testing.T) {
	w := newWorld(t, 4)
	const payload = 10_000
	size := int64(payload + 200 + storeapi.MemOverhead) // envelope ~ payload + id, route, headers
	budget := 5 * size
	due := t0.Add(time.Second)
	ids := ids("big", 40)
	var envs []*envelope.Envelope
	for _, id := range ids {
		envs = append(envs, &envelope.Envelope{ID: id, Route: "r", DueAt: due.UnixMilli(), ReceivedAt: t0.UnixMilli(),
			Payload: bytes.Repeat([]byte("x"), payload)})
	}
	huge := &envelope.Envelope{ID: "huge", Route: "r", DueAt: due.UnixMilli(), ReceivedAt: t0.UnixMilli(),
		Payload: bytes.Repeat([]byte("h"), int(3*budget))}
	envs = append(envs, huge)
	if _, _, err := w.ms.Park(context.Background(), envs); err != nil {
		t.Fatal(err)
	}
	opt := w.options("i1")
	opt.MaxInMemoryBytes = budget
	var (
		mu      sync.Mutex
		maxHeld int64
		early   []string
		hugeAt  int64 = -1
		hugeSz  int64
	)
	var s *scheduler.Scheduler
	n := w.start(opt, func(env *envelope.Envelope) error {
		held := s.InMemory().HeldBytes
		mu.Lock()
		defer mu.Unlock()
		if env.ID == "huge" {
			hugeAt, hugeSz = held, env.ClaimedBytes
		} else {
			maxHeld = max(maxHeld, held)
		}
		if w.fc.Now().UnixMilli() < env.DueAt {
			early = append(early, env.ID)
		}
		return nil
	})
	s = n.s
	w.drive("all published", 30*time.Second, func() bool { return len(n.disp.published()) == len(envs) })
	mu.Lock()
	defer mu.Unlock()
	for id, c := range n.disp.published() {
		if c != 1 {
			t.Errorf("%s published %d times", id, c)
		}
	}
	if len(early) > 0 {
		t.Errorf("published before due: %v", early)
	}
	if maxHeld > budget {
		t.Errorf("held %d bytes at a publish, budget %d (%d messages' worth)", maxHeld, budget, budget/size)
	}
	if hugeSz <= 3*budget || hugeAt != hugeSz {
		t.Errorf("held %d bytes while the message of %d bytes (budget %d) was published; want it alone", hugeAt, hugeSz, budget)
	}
	ms := s.MemoryStats()
	if ms.Throttled == 0 || ms.BudgetBytes != budget {
		t.Errorf("memory stats %+v: want claims held back by the budget %d", ms, budget)
	}
	w.drive("bytes back", time.Second, func() bool { return s.InMemory().HeldBytes == 0 })
}
