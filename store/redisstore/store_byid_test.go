package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"testing"

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
