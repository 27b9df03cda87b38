package store

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/testkit"
)

// newV2Store is newTestStore writing layout 2 (the older layout, and compat mode): the
// tests of that layout's keys use it.
func newV2Store(t *testing.T, opt Options) (*Store, *testkit.Redis, *redis.Client) {
	t.Helper()
	s, r, c := newTestStore(t, opt)
	if err := s.forceLayout(layoutV2); err != nil {
		t.Fatal(err)
	}
	return s, r, c
}

// scanKeys lists the keys matching pattern.
func scanKeys(t *testing.T, c *redis.Client, pattern string) []string {
	t.Helper()
	var out []string
	iter := c.Scan(storeCtx(t), 0, pattern, 1000).Iterator()
	for iter.Next(storeCtx(t)) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// parkClaimAck parks ids on shard 0 of s, claims them and acks them at now.
func parkClaimAck(t *testing.T, s *Store, idList []string, now int64) {
	t.Helper()
	ctx := storeCtx(t)
	for start := 0; start < len(idList); start += 500 {
		var envs []*envelope.Envelope
		for _, id := range idList[start:min(start+500, len(idList))] {
			envs = append(envs, env(id, t0))
		}
		mustPark(t, s, envs...)
	}
	tok := mustLease(t, s, 0, "i1")
	for {
		items, _ := mustClaim(t, s, 0, tok, t0, 500)
		if len(items) == 0 {
			break
		}
		if err := s.AckEnvelopes(ctx, items, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ReleaseLease(ctx, 0, "i1", tok); err != nil {
		t.Fatal(err)
	}
}

// TestStoreIndexLayout: layout 3 keeps the done window in index sub-hashes that stay
// listpacks (split by linear hashing as they fill: entries/sub-hash stays near the
// target), keyed by the 12-byte fingerprint, with the entry count kept exactly, and in
// done slices that the trim deletes whole, leaving no key behind.
func TestStoreIndexLayout(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 1, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	k := s.keys[0]
	// More than 64 sub-hashes (the index's start) of 48 each: the index splits.
	const n = 5000
	idList := make([]string, n)
	for i := range idList {
		idList[i] = fmt.Sprintf("ix-%d", i)
	}
	parkClaimAck(t, s, idList, t0)

	state, err := c.HGetAll(ctx, k.ix).Result()
	if err != nil {
		t.Fatal(err)
	}
	level, _ := strconv.Atoi(state["level"])
	split, _ := strconv.Atoi(state["split"])
	if state["n"] != strconv.Itoa(n) {
		t.Fatalf("index state %v, want n=%d", state, n)
	}
	if nb := 1<<level + split; nb < n/48 || level != 6 || split == 0 {
		t.Fatalf("%d sub-hashes for %d entries (%v): not split to the target of 48", nb, n, state)
	}
	checkSubHashes(t, c, k, idList, 1<<level+split)
	// One done slice holds the 5000 fingerprints, one element per ack call.
	slices := c.ZRange(ctx, k.dn, 0, -1).Val()
	if len(slices) != 1 {
		t.Fatalf("done slices %v, want one", slices)
	}
	elems := c.LRange(ctx, k.dn+":"+slices[0], 0, -1).Val()
	if len(elems) != n/500 || len(strings.Join(elems, "")) != n*fpBytes {
		t.Fatalf("done slice of %d elements, %d bytes, want %d and %d", len(elems), len(strings.Join(elems, "")), n/500, n*fpBytes)
	}
	wantState(t, s, idList[7], StateDelivered, t0)

	// Past the window, tombstones trim a bounded number per call (16) until nothing is
	// left of the 5000 (only the tombstones themselves).
	later := t0 + time.Minute.Milliseconds() + s.doneSliceMs()
	for i := range 400 {
		if _, _, err := s.Cancel(ctx, fmt.Sprintf("trim-%d", i), later, CancelOptions{Route: "x", Tombstone: true}); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.HGet(ctx, k.ix, "n").Val(); got != "400" {
		t.Fatalf("index holds %s entries after the trim, want the 400 tombstones", got)
	}
	for _, key := range scanKeys(t, c, k.dn+":*") {
		if !strings.HasPrefix(key, fmt.Sprintf("%s:%d:", k.dn, later-later%s.doneSliceMs())) {
			t.Fatalf("done slice %s left after the trim", key)
		}
	}
	wantState(t, s, idList[7], StateUnknown, -1)
}

// checkSubHashes: the index has want sub-hashes, all listpacks, holding exactly the
// fingerprints of idList, each with the delivery time t0 in seconds.
func checkSubHashes(t *testing.T, c *redis.Client, k shardKeys, idList []string, want int) {
	t.Helper()
	ctx := storeCtx(t)
	n := len(idList)
	subs := scanKeys(t, c, k.ix+":*")
	if len(subs) != want {
		t.Fatalf("%d sub-hashes, want 2^level+split = %d", len(subs), want)
	}
	fps := map[string]bool{}
	total := 0
	for _, sub := range subs {
		if enc := c.ObjectEncoding(ctx, sub).Val(); enc != "listpack" && enc != "ziplist" {
			t.Fatalf("%s is a %s (%d entries), want a listpack", sub, enc, c.HLen(ctx, sub).Val())
		}
		m := c.HGetAll(ctx, sub).Val()
		total += len(m)
		for f, v := range m {
			fps[f] = true
			if v != strconv.FormatInt(t0/1000, 10) {
				t.Fatalf("%s: state %q, want the delivery time in seconds %d", sub, v, t0/1000)
			}
		}
	}
	if total != n {
		t.Fatalf("%d entries in the sub-hashes, want %d", total, n)
	}
	for _, id := range idList {
		if fp := fingerprint(id); len(fp) != fpBytes || !fps[fp] {
			t.Fatalf("%s: its fingerprint (%d bytes) is not an index field", id, len(fp))
		}
		if fps[id] {
			t.Fatalf("%s is an index field itself", id)
		}
	}
}

// TestStoreServesLayoutV2: a store written in layout 2 (by the previous release's
// scripts) is served by a layout-3 store: its done ids and tombstones are still
// refused, read and cancelled, and they are trimmed away as the window passes.
func TestStoreServesLayoutV2(t *testing.T) {
	old, r, c := newV2Store(t, Options{Shards: 1, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	k := old.keys[0]
	parkClaimAck(t, old, []string{"d1", "d2"}, t0)
	if _, _, err := old.Cancel(ctx, "tomb", t0, CancelOptions{Route: "orders", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	mustPark(t, old, env("p", t0+5000))
	if c.ZCard(ctx, k.done).Val() != 3 || c.Exists(ctx, k.ix).Val() != 0 {
		t.Fatal("the layout-2 store did not write layout 2")
	}

	s, err := New(ctx, r.Client(), Options{Shards: 1, DoneWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "d1", StateDelivered, t0)
	wantState(t, s, "tomb", StateCancelled, t0)
	prior, _, err := s.ParkEach(ctx, []*envelope.Envelope{env("d1", t0), env("tomb", t0), env("p", t0), env("new", t0)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []State{StateDelivered, StateCancelled, StatePending, StateUnknown}; fmt.Sprint(prior) != fmt.Sprint(want) {
		t.Fatalf("park over layout-2 states = %q, want %q", prior, want)
	}
	// Cancelling a layout-2 tombstone's id for another route adds to it in the index.
	if st, _, err := s.Cancel(ctx, "tomb", t0+1, CancelOptions{Route: "other", Tombstone: true}); err != nil || st != StateUnknown {
		t.Fatalf("second tombstone = %q %v", st, err)
	}
	if c.ZScore(ctx, k.done, "tomb").Err() != redis.Nil || c.HExists(ctx, k.cancelled, "tomb").Val() {
		t.Fatal("the tombstone stayed in layout 2 beside the index")
	}
	for _, route := range []string{"orders", "other"} {
		e := env("tomb", t0)
		e.Route = route
		if prior, _, _ := s.ParkEach(ctx, []*envelope.Envelope{e}); prior[0] != StateCancelled {
			t.Fatalf("route %s's message over the moved tombstone = %q, want cancelled", route, prior[0])
		}
	}
	// Reschedule reads the done state of layout 2 too.
	if st, err := s.Reschedule(ctx, "d2", t0); err != nil || st != StateDelivered {
		t.Fatalf("Reschedule(d2) = %q %v, want delivered", st, err)
	}
	// The pending message of layout 2 is claimed and acked into the index; acks past
	// the window trim layout 2's done set away.
	tok := mustLease(t, s, 0, "i1")
	items, _ := mustClaim(t, s, 0, tok, t0+5000, 10)
	if len(ids(items)) != 2 { // p and new
		t.Fatalf("claimed %v", ids(items))
	}
	later := t0 + time.Minute.Milliseconds() + s.doneSliceMs() + 10
	if err := s.AckEnvelopes(ctx, items, later); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, k.done, k.cancelled).Val(); n != 0 {
		t.Fatalf("%d layout-2 done keys left after the window", n)
	}
	wantState(t, s, "d1", StateUnknown, -1)
	wantState(t, s, "p", StateDelivered, later-later%1000)
}

// TestStoreCompatMode: while a member records no layout (a bridge of the release before
// layout 3), the store writes layout 2, so that member's scripts see every done id; once
// it is gone, layout 3 within one LiveMembers round, and layout 2's ids stay served.
func TestStoreCompatMode(t *testing.T) {
	var logs strings.Builder
	s, r, c := newTestStore(t, Options{Shards: 1, DoneWindow: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := storeCtx(t)
	k := s.keys[0]
	if l := s.WritingLayout(); l != layoutV3 {
		t.Fatalf("a store with no members writes layout %d, want 3", l)
	}
	// A bridge of the previous release joins: it heartbeats without a layout.
	ttl := 3 * time.Second
	if err := c.ZAdd(ctx, s.membersKey, redis.Z{Score: float64(t0), Member: "old"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "new", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LiveMembers(ctx, t0, ttl); err != nil {
		t.Fatal(err)
	}
	if l := s.WritingLayout(); l != layoutV2 {
		t.Fatalf("with a layout-2 member live the store writes layout %d, want 2", l)
	}
	if !strings.Contains(logs.String(), "compat mode") || !strings.Contains(logs.String(), "member=old") {
		t.Fatalf("the switch to compat mode was not logged: %q", logs.String())
	}
	// A store opened now starts in compat mode too.
	s2, err := New(ctx, r.Client(), Options{Shards: 1, DoneWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if l := s2.WritingLayout(); l != layoutV2 {
		t.Fatalf("a store opened beside a layout-2 member writes layout %d, want 2", l)
	}
	compatWritesLayoutV2(t, s, r, c)

	// The old member leaves: layout 3 from the next round on.
	if err := c.ZRem(ctx, s.membersKey, "old").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LiveMembers(ctx, t0+1000, ttl); err != nil {
		t.Fatal(err)
	}
	if l := s.WritingLayout(); l != layoutV3 {
		t.Fatalf("with only layout-3 members the store writes layout %d, want 3", l)
	}
	if !strings.Contains(logs.String(), "writing layout 3") {
		t.Fatalf("the end of compat mode was not logged: %q", logs.String())
	}
	parkClaimAck(t, s, []string{"b"}, t0+1000)
	if c.ZScore(ctx, k.done, "b").Err() != redis.Nil || c.HGet(ctx, k.ix, "n").Val() != "1" {
		t.Fatal("after compat mode the done id did not go to the index")
	}
	wantState(t, s, "a", StateDelivered, t0)
	wantState(t, s, "b", StateDelivered, t0+1000)
	// Leave forgets the instance's layout with its membership.
	if err := s.Leave(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if c.HExists(ctx, s.layoutsKey, "new").Val() {
		t.Fatal("Leave kept the layout of the instance")
	}
}

// compatWritesLayoutV2: s, in compat mode, records done ids in layout 2 only, where the
// previous release's scripts (a store forced to layout 2 runs them) see them.
func compatWritesLayoutV2(t *testing.T, s *Store, r *testkit.Redis, c *redis.Client) {
	t.Helper()
	ctx := storeCtx(t)
	k := s.keys[0]
	parkClaimAck(t, s, []string{"a"}, t0)
	if _, _, err := s.Cancel(ctx, "tomb", t0, CancelOptions{Route: "orders", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	if c.ZScore(ctx, k.done, "a").Val() != float64(t0) || !c.HExists(ctx, k.cancelled, "tomb").Val() || c.Exists(ctx, k.ix).Val() != 0 {
		t.Fatal("in compat mode the done ids did not go to layout 2's done set and cancelled hash only")
	}
	old, err := New(ctx, r.Client(), Options{Shards: 1, DoneWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.forceLayout(layoutV2); err != nil {
		t.Fatal(err)
	}
	wantState(t, old, "a", StateDelivered, t0)
	wantState(t, old, "tomb", StateCancelled, t0)
}
