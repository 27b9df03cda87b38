package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/memstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

type parkAnswer = parkOutcome

// Parks that arrive while one is under way go to the store together in one call, and
// each caller gets its own messages' states and claimed flags (one caller's want flags
// beside callers without any); a combined call that could try nothing
// (one caller's envelope does not encode) is made again caller by caller, so only that
// caller fails.
func TestParkGroupMergesParksQueuedBehindOne(t *testing.T) {
	ms, err := memstore.New(memstore.Options{Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msg := func(id string) *envelope.Envelope {
		return &envelope.Envelope{ID: id, Route: "r", DueAt: time.Now().Add(time.Hour).UnixMilli(), Payload: []byte("p")}
	}
	if _, _, err := ms.ParkEach(ctx, []*envelope.Envelope{msg("old")}); err != nil {
		t.Fatal(err)
	}
	// "i1" holds the lease of b2's shard: a park that wants b2 claimed claims it.
	b2 := ms.ShardOf("b2")
	tok, err := ms.AcquireLease(ctx, b2, "i1", time.Hour)
	if err != nil || tok == 0 {
		t.Fatal(tok, err)
	}
	leases := map[int]storeapi.ParkLease{b2: {Token: tok, LeaseDeadline: time.Now().Add(time.Hour).UnixMilli()}}
	fn := func(ctx context.Context, envs []*envelope.Envelope, want []bool) parkOutcome {
		var o parkOutcome
		o.prior, o.claimed, o.minDue, o.err = ms.ParkClaimEach(ctx, envs, storeapi.ParkClaim{Instance: "i1", Want: want, Leases: leases})
		return o
	}
	var g parkGroup
	// The first store call of a round is held until the others are queued.
	var armed atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	ms.SetHook(func(ctx context.Context, op string) error {
		if op == memstore.OpPark && armed.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
		return nil
	})
	defer ms.SetHook(nil)
	// round parks first (held in the store), then the others while it is held; it
	// returns the answers in the order of the batches.
	round := func(first parkBatch, others ...parkBatch) []parkAnswer {
		t.Helper()
		out := make([]parkAnswer, 1+len(others))
		done := make(chan int, len(out))
		start := func(i int, b parkBatch) {
			go func() {
				out[i] = g.park(ctx, b, fn)
				done <- i
			}()
		}
		armed.Store(true)
		start(0, first)
		<-held
		for i, b := range others {
			start(i+1, b)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			g.mu.Lock()
			n := len(g.queue)
			g.mu.Unlock()
			if n == len(others) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d parks queued, want %d", n, len(others))
			}
		}
		close(release)
		for range out {
			<-done
		}
		release = make(chan struct{})
		return out
	}

	calls := ms.Calls(memstore.OpPark)
	out := round(parkBatch{envs: []*envelope.Envelope{msg("a")}},
		parkBatch{envs: []*envelope.Envelope{msg("b1"), msg("b2")}, want: []bool{false, true}},
		parkBatch{envs: []*envelope.Envelope{msg("old"), msg("c")}})
	if n := ms.Calls(memstore.OpPark) - calls; n != 2 {
		t.Fatalf("%d store calls for three parks, two of them queued behind the first: want 2", n)
	}
	want := [][]storeapi.State{{storeapi.StateUnknown}, {storeapi.StateUnknown, storeapi.StateUnknown}, {storeapi.StatePending, storeapi.StateUnknown}}
	for i, a := range out {
		if a.err != nil || len(a.prior) != len(want[i]) {
			t.Fatalf("park %d: %v, %v", i, a.prior, a.err)
		}
		for j := range want[i] {
			if a.prior[j] != want[i][j] {
				t.Fatalf("park %d message %d: %v, want %v", i, j, a.prior[j], want[i][j])
			}
		}
	}
	if c := out[1].claimed; len(c) != 2 || c[0] || !c[1] || slices.Contains(out[2].claimed, true) {
		t.Fatalf("claimed flags of the combined call: %v and %v; want [false true] and none", out[1].claimed, out[2].claimed)
	}
	// The combined call's minDue goes to whichever of the two led it, whole.
	if (len(out[1].minDue) == 0) == (len(out[2].minDue) == 0) {
		t.Fatalf("minDue of the combined call: %v and %v; want it all with one caller", out[1].minDue, out[2].minDue)
	}
	if got, want := len(out[1].minDue)+len(out[2].minDue), shardsOf(ms, "b1", "c"); got != want {
		t.Fatalf("minDue of the combined call names %d shards, want %d (those of b1 and c: b2 was claimed)", got, want)
	}

	bad := &envelope.Envelope{Route: "r", DueAt: time.Now().UnixMilli(), Payload: []byte("p")} // no id: does not encode
	out = round(parkBatch{envs: []*envelope.Envelope{msg("d")}}, parkBatch{envs: []*envelope.Envelope{msg("e")}}, parkBatch{envs: []*envelope.Envelope{bad}})
	if out[1].err != nil || len(out[1].prior) != 1 || out[1].prior[0] != storeapi.StateUnknown {
		t.Fatalf("a park queued beside one that does not encode: %v, %v; want parked", out[1].prior, out[1].err)
	}
	if !errors.Is(out[2].err, storeapi.ErrInvalid) || out[2].prior != nil {
		t.Fatalf("the park that does not encode: %v, %v; want ErrInvalid and no states", out[2].prior, out[2].err)
	}
	if st, _, _, err := ms.Get(ctx, "b2"); err != nil || st != storeapi.StateInflight {
		t.Fatalf("b2: %v, %v; want in flight (claimed as parked)", st, err)
	}
	for _, id := range []string{"a", "b1", "c", "d", "e"} {
		if st, _, _, err := ms.Get(ctx, id); err != nil || st != storeapi.StatePending {
			t.Fatalf("%s: %v, %v; want pending", id, st, err)
		}
	}
}

// shardsOf is how many distinct shards ids fall in.
func shardsOf(ms *memstore.Store, ids ...string) int {
	seen := map[int]bool{}
	for _, id := range ids {
		seen[ms.ShardOf(id)] = true
	}
	return len(seen)
}
