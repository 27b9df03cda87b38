package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// An ack writes its caller's done runs only when every id of the call was delivered:
// all were still in flight, and none had a successor. An id recovered before a stale
// ack of it arrives, or replaced while in flight, stays pending; cancelled afterwards
// it reads cancelled, not delivered (a delivered slot would win over the tombstone).
// Offsets near 2^52 check that ack.lua builds the fingerprints the runs stood for
// (kbackfp) exactly, across a block's end.
func TestAckRunsOnlyForIdsItDelivers(t *testing.T) {
	for _, base := range []int{1, 1<<52 + 1022} {
		t.Run(fmt.Sprint(base), func(t *testing.T) {
			s, _, tok := newLeasedStore(t)
			ctx := storeCtx(t)
			now := time.Now().UnixMilli()
			stale, fresh, replaced := env(kafkaID(7, base), now), env(kafkaID(7, base+1), now), env(kafkaID(7, base+2), now)

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
		})
	}
}

// BenchmarkAckRuns measures what an ack's done runs cost the bridge per call of 100
// Kafka default ids spread over six partitions' blocks (as at a steady rate), beside
// the fingerprints of those ids ("fingerprints"), which the call no longer carries
// where the runs cover them: the runs move work from Redis, a shared core, to the
// bridge.
func BenchmarkAckRuns(b *testing.B) {
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("orders.delay/%d/%d/%012x", i%6, 100_000+i*37, i))
	}
	b.Run("runs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, n, _ := appendAckRuns(make([]any, 0, 512), ids, 1_795_956_257_123); n == 0 {
				b.Fatal("no runs")
			}
		}
	})
	b.Run("fingerprints", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, id := range ids {
				_ = ackFingerprint(id)
			}
		}
	})
}

// The runs group a call's Kafka default ids by block and consecutive slots, whatever
// their order in the call; an id of another form is left to the fingerprints; two ids
// at one slot (a recreated topic's offset) keep the later's hash, as a later SETRANGE
// would.
func TestAckRunsGroupBlocksAndSlots(t *testing.T) {
	sec := func(now int64) string { return string([]byte{0, 0, byte(now / 1000 >> 8), byte(now / 1000)}) }
	const now = 300_000
	ids := []string{
		"t/1/1025/00000000000b", // block 1 of partition 1, slot 1
		"user-given",
		"t/0/3/000000000003", // block 0 of partition 0, slots 2-3 with the next
		"t/1/1024/00000000000a",
		"t/0/2/000000000002",
		"t/0/9/000000000009",
		"t/0/3/0000000000ff", // slot 3 again: the later wins
	}
	args, n, covered := appendAckRuns(nil, ids, now)
	if want := []bool{true, false, true, true, true, true, true}; fmt.Sprint(covered) != fmt.Sprint(want) {
		t.Errorf("covered %v, want %v (every Kafka default id, not the user-given one)", covered, want)
	}
	var got []string
	for _, a := range args {
		switch v := a.(type) {
		case *string:
			got = append(got, fmt.Sprintf("%q", *v))
		default:
			got = append(got, fmt.Sprint(v))
		}
	}
	slot := func(h byte) string { return string([]byte{0, 0, 0, 0, 0, h}) + sec(now) }
	want := []string{ // partitions in the order met, blocks and slots rising
		`"t/1/1"`, "1", `"0"`, fmt.Sprintf("%q", slot(0x0a)+slot(0x0b)),
		`"t/0/0"`, "2", `"20"`, fmt.Sprintf("%q", slot(2)+slot(0xff)), `"90"`, fmt.Sprintf("%q", slot(9)),
	}
	if n != len(args) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs (%d) = %v\nwant %v", n, got, want)
	}
}

// An id at an offset of 2^53 or more is in the runs but not covered: ack.lua could not
// rebuild its fingerprint from a Lua number, so the call carries it.
func TestAckRunsCoverOnlyExactOffsets(t *testing.T) {
	ids := []string{"t/0/9007199254740991/000000000001", "t/0/9007199254740992/000000000002"}
	_, n, covered := appendAckRuns(nil, ids, 300_000)
	if n == 0 || fmt.Sprint(covered) != "[true false]" {
		t.Fatalf("runs %d, covered %v; want runs, covered [true false]", n, covered)
	}
}

// A call that mixes Kafka default ids with others writes the runs for the first and
// the index for the rest: both read delivered.
func TestAckRunsBesideOtherIds(t *testing.T) {
	s, _, tok := newLeasedStore(t)
	ctx := storeCtx(t)
	now := time.Now().UnixMilli()
	var envs []*envelope.Envelope
	for _, id := range append(idsOnShard(s, 0, 2, "user"), kafkaID(7, 5), kafkaID(7, 6)) {
		envs = append(envs, env(id, now))
	}
	mustPark(t, s, envs...)
	if items, _, err := s.Claim(ctx, 0, "i1", tok, now, now+30_000, 10); err != nil || len(items) != len(envs) {
		t.Fatalf("claim: %d items, %v", len(items), err)
	}
	if err := s.AckEnvelopes(ctx, envs, now); err != nil {
		t.Fatal(err)
	}
	for _, e := range envs {
		if st, _, _, err := s.Get(ctx, e.ID); err != nil || st != StateDelivered {
			t.Errorf("%s: %s, %v; want delivered", e.ID, st, err)
		}
	}
}
