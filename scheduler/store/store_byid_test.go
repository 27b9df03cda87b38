package store

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

func envOn(id, route string, due int64) *envelope.Envelope {
	e := env(id, due)
	e.Route = route
	return e
}

// TestStoreCancelUnknownLeavesNoTrace: without Tombstone an unknown id is reported
// unknown and nothing is recorded: a later message with that id parks.
func TestStoreCancelUnknownLeavesNoTrace(t *testing.T) {
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	keysBefore := c.DBSize(ctx).Val()
	if st, _, err := s.Cancel(ctx, "ghost", t0, CancelOptions{}); err != nil || st != StateUnknown {
		t.Fatalf("Cancel(unknown) = %q %v", st, err)
	}
	wantState(t, s, "ghost", StateUnknown, -1)
	if n := c.DBSize(ctx).Val(); n != keysBefore {
		t.Fatalf("a cancel of an unknown id left %d keys", n-keysBefore)
	}
	if p := mustPark(t, s, env("ghost", t0)); !p[0] {
		t.Fatal("a message with an id once cancelled while unknown was refused")
	}
	if _, _, err := s.Cancel(ctx, "ghost", t0, CancelOptions{Tombstone: true}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("tombstone without a route: %v, want ErrInvalid", err)
	}
}

// TestStoreCancelScriptRefusesStaleEnvelope: the script cancels only the envelope the
// caller checked; after a change (here: a retry re-encoded it) it answers stale and
// changes nothing, and Store.Cancel reads again and succeeds.
func TestStoreCancelScriptRefusesStaleEnvelope(t *testing.T) {
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	mustPark(t, s, env("st", t0+1000))
	k := s.keys[s.ShardOf("st")]
	raw, err := c.HGet(ctx, k.msg, "st").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(append(raw, 'x'))
	remember, before, limit := s.trimArgs(t0, 1)
	cl := s.cancelCall(s.ShardOf("st"), "st", t0, remember, before, limit, "orders", hex.EncodeToString(sum[:]), 0)
	v, err := s.eval(ctx, cl.sc, cl.keys, cl.args...).Text()
	if err != nil || v != "stale" {
		t.Fatalf("cancel with another envelope's sum = %q %v, want stale", v, err)
	}
	cl = s.cancelCall(s.ShardOf("st"), "st", t0, remember, before, limit, "orders", "", 0)
	v, err = s.eval(ctx, cl.sc, cl.keys, cl.args...).Text()
	if err != nil || v != "stale" {
		t.Fatalf("cancel by a caller that saw no envelope = %q %v, want stale", v, err)
	}
	wantState(t, s, "st", StatePending, t0+1000)
	if st, _, err := s.Cancel(ctx, "st", t0, CancelOptions{Route: "orders"}); err != nil || st != StatePending {
		t.Fatalf("Cancel = %q %v", st, err)
	}
	wantState(t, s, "st", StateCancelled, t0)
}

// TestStoreDoneLayoutV2: in layout 2 a done entry without a cancelled field (an older
// bridge's, which recorded cancels there too) reads delivered; an ack turns another
// route's tombstone into delivered; trimming forgets done entries and their cancelled
// fields together.
func TestStoreDoneLayoutV2(t *testing.T) {
	s, _, c := newV2Store(t, Options{Shards: 1, DoneWindow: time.Minute})
	ctx := storeCtx(t)
	k := s.keys[0]
	c.ZAdd(ctx, k.done, redis.Z{Score: float64(t0), Member: "old"})
	wantState(t, s, "old", StateDelivered, t0)
	if prior, _, _ := s.ParkEach(ctx, []*envelope.Envelope{env("old", t0)}); prior[0] != StateDelivered {
		t.Fatalf("park over an old done entry = %q, want delivered", prior[0])
	}

	if _, _, err := s.Cancel(ctx, "t", t0, CancelOptions{Route: "B", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	mustPark(t, s, envOn("t", "A", t0))
	tok := mustLease(t, s, 0, "i1")
	if items, _ := mustClaim(t, s, 0, tok, t0, 10); len(items) != 1 {
		t.Fatalf("claimed %v", ids(items))
	}
	if err := s.Ack(ctx, 0, []string{"t"}, t0+1); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "t", StateDelivered, t0+1)

	if _, _, err := s.Cancel(ctx, "u", t0+2, CancelOptions{Route: "B", Tombstone: true}); err != nil {
		t.Fatal(err)
	}
	if n := c.HLen(ctx, k.cancelled).Val(); n != 1 {
		t.Fatalf("cancelled hash has %d fields, want 1", n)
	}
	// A minute later every entry above is past the window: the next ack trims them.
	mustPark(t, s, env("late", t0+61_000))
	if items, _ := mustClaim(t, s, 0, tok, t0+61_000, 10); len(items) != 1 {
		t.Fatalf("claimed %v", ids(items))
	}
	if err := s.Ack(ctx, 0, []string{"late"}, t0+62_010); err != nil {
		t.Fatal(err)
	}
	if n, h := c.ZCard(ctx, k.done).Val(), c.HLen(ctx, k.cancelled).Val(); n != 1 || h != 0 {
		t.Fatalf("after the trim done has %d entries and cancelled %d fields, want 1 (late) and 0", n, h)
	}
	wantState(t, s, "u", StateUnknown, -1)
}
