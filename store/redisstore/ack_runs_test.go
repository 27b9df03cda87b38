package redisstore

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// An ack writes its caller's done runs only when every id of the call was delivered:
// all were still in flight, and none had a successor. An id recovered before a stale
// ack of it arrives, or replaced while in flight, stays pending; cancelled afterwards
// it reads cancelled, not delivered (a delivered slot would win over the tombstone).
func TestAckRunsOnlyForIdsItDelivers(t *testing.T) {
	s, _, tok := newLeasedStore(t)
	ctx := storeCtx(t)
	now := time.Now().UnixMilli()
	stale, fresh, replaced := env(kafkaID(7, 1), now), env(kafkaID(7, 2), now), env(kafkaID(7, 3), now)

	// stale is claimed, then recovered to a later time; fresh is claimed after.
	mustPark(t, s, stale)
	if items, _, err := s.Claim(ctx, 0, "i1", tok, now, now+30_000, 10); err != nil || len(items) != 1 {
		t.Fatalf("claim stale: %d items, %v", len(items), err)
	}
	if moved, _, err := s.RecoverAll(ctx, 0, now+60_000, 10); err != nil || moved != 1 {
		t.Fatalf("recover: %d, %v", moved, err)
	}
	mustPark(t, s, fresh)
	if items, _, err := s.Claim(ctx, 0, "i1", tok, now, now+30_000, 10); err != nil || len(items) != 1 || items[0].ID != fresh.ID {
		t.Fatalf("claim fresh: %v, %v", items, err)
	}
	if err := s.AckEnvelopes(ctx, []*envelope.Envelope{stale, fresh}, now); err != nil {
		t.Fatal(err)
	}

	// replaced gets a successor while in flight, then its ack comes.
	mustPark(t, s, replaced)
	if items, _, err := s.Claim(ctx, 0, "i1", tok, now, now+30_000, 10); err != nil || len(items) != 1 {
		t.Fatalf("claim replaced: %d items, %v", len(items), err)
	}
	next := env(replaced.ID, now+120_000)
	if _, _, err := s.ReplaceEach(ctx, []*envelope.Envelope{next}); err != nil {
		t.Fatal(err)
	}
	if err := s.AckEnvelopes(ctx, []*envelope.Envelope{replaced}, now); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		id   string
		want State
	}{{stale.ID, StatePending}, {fresh.ID, StateDelivered}, {replaced.ID, StatePending}} {
		if st, _, _, err := s.Get(ctx, tc.id); err != nil || st != tc.want {
			t.Fatalf("%s after the acks: %s, %v; want %s", tc.id, st, err, tc.want)
		}
	}
	for _, id := range []string{stale.ID, replaced.ID} {
		if _, _, err := s.Cancel(ctx, id, now, CancelOptions{}); err != nil {
			t.Fatal(err)
		}
		if st, _, _, err := s.Get(ctx, id); err != nil || st != StateCancelled {
			t.Errorf("%s cancelled while pending: %s, %v; want cancelled (its ack must not have marked it delivered)", id, st, err)
		}
	}
}
