package scheduler

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/memstore"
)

// TestOwnsOnlyTheLatestCopyUnderTheHeldToken: of two claimed copies of one id, only the
// later may be published (a re-claim after a recovery supersedes the copy already on
// its way to egress), and a copy claimed under an older lease token may not be after
// the shard was taken again, nor a copy that was never claimed, nor any once the
// lease is no longer surely valid.
func TestOwnsOnlyTheLatestCopyUnderTheHeldToken(t *testing.T) {
	ms, err := memstore.New(memstore.Options{Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Store: ms, Instance: "i1"})
	if err != nil {
		t.Fatal(err)
	}
	const shard = 2
	claimed := func(id string) *envelope.Envelope {
		return &envelope.Envelope{ID: id, Route: "r", ClaimedFrom: shard + 1, ClaimedBytes: 100}
	}
	st := &shardState{shard: shard, token: 7}
	st.leaseUntil.Store(s.mono() + time.Hour.Milliseconds())
	s.mu.Lock()
	s.shards[shard] = st
	s.mu.Unlock()

	first := claimed("m")
	s.track(st, []*envelope.Envelope{first})
	if !s.Owns(first) {
		t.Fatal("the only claimed copy is not owned")
	}
	if s.Owns(claimed("m")) {
		t.Error("a copy never claimed (tracked) is owned")
	}
	second := claimed("m")
	s.track(st, []*envelope.Envelope{second})
	if s.Owns(first) {
		t.Error("a copy superseded by a later claim of its id is still owned")
	}
	if !s.Owns(second) {
		t.Error("the latest copy is not owned")
	}

	// The shard taken again under a new token: copies of the old one are not owned.
	again := &shardState{shard: shard, token: 8}
	again.leaseUntil.Store(s.mono() + time.Hour.Milliseconds())
	s.mu.Lock()
	s.shards[shard] = again
	s.mu.Unlock()
	if s.Owns(second) {
		t.Error("a copy claimed under an older lease token is owned")
	}
	third := claimed("n")
	s.track(again, []*envelope.Envelope{third})
	if !s.Owns(third) {
		t.Error("a copy claimed under the current token is not owned")
	}
	again.leaseUntil.Store(s.mono() - 1)
	if s.Owns(third) {
		t.Error("a copy is owned after the lease stopped being surely valid")
	}
}

// TestReclaimedCopyReplacesTheOneInTheWheel: a message claimed again while its older
// copy still waits in the wheel (recovered meanwhile) fires once, as the newer copy,
// and the older copy's credits come back; the held set is the only index by id the
// wheel has (wheel.Handle), so the rule is track's. CancelLocal then finds the newer
// copy through it, also when it is held under another shard than ShardOf(id) (a
// message of an ordered key is held under its key's shard).
func TestReclaimedCopyReplacesTheOneInTheWheel(t *testing.T) {
	ms, err := memstore.New(memstore.Options{Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Store: ms, Instance: "i1", MaxInMemory: 10})
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Hour).UnixMilli()
	claimed := func(id string, shard int) *envelope.Envelope {
		return &envelope.Envelope{ID: id, Route: "r", DueAt: due, ClaimedFrom: shard + 1, ClaimedBytes: 100}
	}
	other := (ms.ShardOf("m") + 1) % 4
	st := &shardState{shard: other, token: 7}
	take := func(n int) {
		t.Helper()
		if _, err := s.credits.acquire(t.Context(), n, 0, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	take(1)
	s.schedule(st, []*envelope.Envelope{claimed("m", other)})
	take(1)
	s.schedule(st, []*envelope.Envelope{claimed("m", other)})
	if got := s.InMemory(); got.Wheel != 1 || got.Held[other] != 1 || got.FreeCredits != 9 {
		t.Fatalf("after a re-claim: wheel %d, held %d, free credits %d; want 1, 1, 9", got.Wheel, got.Held[other], got.FreeCredits)
	}
	if s.CancelLocal("absent") {
		t.Error("CancelLocal of an id held nowhere reported true")
	}
	if !s.CancelLocal("m") {
		t.Fatal("CancelLocal did not find the copy held under another shard than ShardOf(id)")
	}
	if got := s.InMemory(); got.Wheel != 0 || got.Held[other] != 0 || got.FreeCredits != 10 {
		t.Fatalf("after CancelLocal: wheel %d, held %d, free credits %d; want 0, 0, 10", got.Wheel, got.Held[other], got.FreeCredits)
	}
	if s.CancelLocal("m") {
		t.Error("a second CancelLocal reported true")
	}
}

// TestHeldSetMapIsRebuiltAfterAPeak: a shard's held set that held thousands (a burst)
// and now holds an eighth of that is rebuilt, so the buckets of its peak are given
// back (a Go map never shrinks), keeping what it still holds; a set that never held
// heldShrinkMin is left as it is.
func TestHeldSetMapIsRebuiltAfterAPeak(t *testing.T) {
	ms, err := memstore.New(memstore.Options{Shards: 2, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Store: ms, Instance: "i1"})
	if err != nil {
		t.Fatal(err)
	}
	const shard, n = 1, 2 * heldShrinkMin
	st := &shardState{shard: shard, token: 7}
	st.leaseUntil.Store(s.mono() + time.Hour.Milliseconds())
	s.mu.Lock()
	s.shards[shard] = st
	s.mu.Unlock()
	envs := make([]*envelope.Envelope, n)
	for i := range envs {
		envs[i] = &envelope.Envelope{ID: "m" + strconv.Itoa(i), Route: "r", ClaimedFrom: shard + 1, ClaimedBytes: 100}
	}
	s.track(st, envs)
	h := &s.held[shard]
	before := reflect.ValueOf(h.byID).UnsafePointer()
	keep := n / 8 // the last removal leaves an eighth: the rebuild
	for _, e := range envs[keep:] {
		if current, _ := s.untrack(shard, e); !current {
			t.Fatalf("%s: not the latest claim", e.ID)
		}
	}
	if reflect.ValueOf(h.byID).UnsafePointer() == before || h.peak != keep || len(h.byID) != keep {
		t.Fatalf("after %d of %d left: map rebuilt %v, peak %d, %d entries; want rebuilt, %d, %d",
			n-keep, n, reflect.ValueOf(h.byID).UnsafePointer() != before, h.peak, len(h.byID), keep, keep)
	}
	for _, e := range envs[:keep] {
		if !s.Owns(e) {
			t.Fatalf("%s, still held, is not owned after the rebuild", e.ID)
		}
	}
	small := reflect.ValueOf(h.byID).UnsafePointer()
	for _, e := range envs[:keep] {
		s.untrack(shard, e)
	}
	if reflect.ValueOf(h.byID).UnsafePointer() != small {
		t.Error("a map that never held heldShrinkMin was rebuilt")
	}
}
