package redisstore

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// park.lua's quick path parks a whole batch at once when nothing in it can be refused.
// The conformance suite's Kafka-id cases check that it still refuses what it must (a
// replay of a pending, in-flight or delivered id, an id cancelled before it came);
// these check what the caller vouches for.

// TestParkSpansVouchOnlyForFetchShapedBatches: ParkEach offers the quick path (block
// spans) only for a batch of Kafka default ids whose offsets rise in each block, and
// the spans cover exactly the slots of the batch's offsets.
func TestParkSpansVouchOnlyForFetchShapedBatches(t *testing.T) {
	spansOf := func(ids ...string) []any {
		envs := make([]*envelope.Envelope, len(ids))
		ch := make([]encoded, len(ids))
		for i, id := range ids {
			envs[i], ch[i] = env(id, 1), encoded{idx: i}
		}
		return appendSpans([]any{int64(0), int64(-1), 0}, envs, ch)
	}
	p1, p2 := blockIDs(1, 3, 4), blockIDs(2, 1020, 8) // partition 2's run crosses a block
	got := spansOf(append(p1, p2...)...)
	want := []any{int64(0), int64(-1), 3,
		"orders.delay/1/0", uint64(30), uint64(69),
		"orders.delay/2/0", uint64(10200), uint64(10239),
		"orders.delay/2/1", uint64(0), uint64(39)}
	if len(got) != len(want) {
		t.Fatalf("spans %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("spans %v, want %v", got, want)
		}
	}
	for name, ids := range map[string][]string{
		"a user-given id":      {p1[0], "order-17"},
		"an id twice":          {p1[0], p1[1], p1[0]},
		"offsets that go back": {p1[1], p1[0]},
	} {
		if got := spansOf(ids...); len(got) != 3 || got[2] != 0 {
			t.Errorf("%s: spans %v, want none (the full path decides id by id)", name, got)
		}
	}
}

// TestParkQuickPathFirstOfTwinsWins: the same Kafka id twice in one batch (a replayed
// fetch merged with its first delivery) parks the first and reports the second as
// pending, as the full path does: the quick path would store the second over it.
func TestParkQuickPathFirstOfTwinsWins(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1})
	ctx := storeCtx(t)
	now := time.Now().UnixMilli()
	ids := blockIDs(1, 0, 2)
	first, twin := env(ids[0], now+1000), env(ids[0], now+9000)
	prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{first, env(ids[1], now+2000), twin})
	if err != nil {
		t.Fatal(err)
	}
	if prior[0] != StateUnknown || prior[1] != StateUnknown || prior[2] != StatePending {
		t.Fatalf("prior = %v, want parked, parked, pending", prior)
	}
	if due, err := c.ZScore(ctx, s.keys[0].due, ids[0]).Result(); err != nil || int64(due) != now+1000 {
		t.Fatalf("%s due at %v (%v), want the first's %d", ids[0], due, err, now+1000)
	}
}
