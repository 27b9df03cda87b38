package storetest

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// The done window and the by-id operations on ids of the form of a Kafka record's
// default id, "<topic>/<partition>/<offset>/<12 lowercase hex>" (ingress.KafkaRecordID),
// which a store places by block of storeapi.ShardBlock offsets (storeapi.ShardOf) and may
// remember by block: every rule of the window holds for them as for any other id.

func init() {
	register("KafkaIDsDoneWindowAcrossBlocks", caseKafkaIDsDoneWindowAcrossBlocks)
	register("KafkaIDsTombstoneThenAck", caseKafkaIDsTombstoneThenAck)
	register("KafkaIDsReplaceDelivered", caseKafkaIDsReplaceDelivered)
	register("KafkaIDsCancelDelivered", caseKafkaIDsCancelDelivered)
	register("KafkaIDsDoneTrim", caseKafkaIDsDoneTrim)
	register("KafkaIDsNoDoneWindow", caseKafkaIDsNoDoneWindow)
}

// kafkaID is the id of a Kafka record of topic/partition/offset; gen picks its hash, so
// that the record at the same offset of a recreated topic (gen 1) has another id.
func kafkaID(topic string, partition int, offset int64, gen int) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%d|%d|%d", topic, partition, offset, gen)
	return fmt.Sprintf("%s/%d/%d/%012x", topic, partition, offset, h.Sum64()&(1<<48-1))
}

// kafkaRange is kafkaID (gen 0) of offsets from..to of one partition.
func kafkaRange(topic string, partition int, from, to int64) []string {
	var out []string
	for off := from; off <= to; off++ {
		out = append(out, kafkaID(topic, partition, off, 0))
	}
	return out
}

// wantKafkaPlaced checks that the store places every id by its block (the shard of
// "<topic>/<partition>/<offset/ShardBlock>"), so that the ids take the path of the Kafka
// form, and returns the shards that hold them.
func wantKafkaPlaced(t *testing.T, s storeapi.Store, idList []string) []int {
	t.Helper()
	var shards []int
	for _, id := range idList {
		rest := id[:len(id)-13] // "<topic>/<partition>/<offset>"
		j := strings.LastIndexByte(rest, '/')
		off, err := strconv.ParseInt(rest[j+1:], 10, 64)
		if err != nil {
			t.Fatalf("id %s: %v", id, err)
		}
		block := rest[:j+1] + strconv.FormatInt(off/storeapi.ShardBlock, 10)
		want := fnvShard(block, s.Shards())
		if got := s.ShardOf(id); got != want {
			t.Fatalf("ShardOf(%s) = %d, want %d (the shard of its block %s)", id, got, want, block)
		}
		if !slices.Contains(shards, want) {
			shards = append(shards, want)
		}
	}
	slices.Sort(shards)
	return shards
}

// claimAllOf claims every message of idList (parked due at or before upTo) from the
// shards that hold them, and returns the claimed ids by shard. A claim may return fewer
// than are due (the cold tier promotes a bucket first), so each shard is claimed until
// all of its ids are in flight, a bounded number of times.
func claimAllOf(t *testing.T, s storeapi.Store, idList []string, upTo int64) map[int][]string {
	t.Helper()
	want := map[int]int{}
	for _, id := range idList {
		want[s.ShardOf(id)]++
	}
	out := map[int][]string{}
	for sh, n := range want {
		tok := mustLease(t, s, sh, "i1")
		for range 50 {
			if len(out[sh]) >= n {
				break
			}
			items, _ := mustClaim(t, s, sh, tok, upTo, 500)
			out[sh] = append(out[sh], ids(items)...)
		}
		if len(out[sh]) != n {
			t.Fatalf("claimed %d of the %d messages of shard %d", len(out[sh]), n, sh)
		}
	}
	return out
}

// wantPrior parks envs with ParkEach and checks each one's prior state.
func wantPrior(t *testing.T, s storeapi.Store, envs []*envelope.Envelope, want storeapi.State) {
	t.Helper()
	prior, _, err := s.ParkEach(storeCtx(t), envs)
	if err != nil {
		t.Fatalf("ParkEach: %v", err)
	}
	for i, st := range prior {
		if st != want {
			t.Fatalf("ParkEach of %s (route %s) = %q, want %q", envs[i].ID, envs[i].Route, st, want)
		}
	}
}

func envsOf(idList []string, route string, due int64) []*envelope.Envelope {
	out := make([]*envelope.Envelope, len(idList))
	for i, id := range idList {
		out[i] = envOn(id, route, due)
	}
	return out
}

// ackShuffled acks the claimed ids of byShard in an order of its own (shuffled, the
// shards taking turns), chunk ids per Ack call, call i at base + i*step, and returns
// each id's ack time.
func ackShuffled(t *testing.T, s storeapi.Store, byShard map[int][]string, chunk int, base, step int64) map[string]int64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	left := map[int][]string{}
	var shards []int
	for sh, list := range byShard {
		list = slices.Clone(list)
		rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
		left[sh], shards = list, append(shards, sh)
	}
	slices.Sort(shards)
	acked := map[string]int64{}
	for call := 0; len(acked) < countAll(byShard); {
		for _, sh := range shards {
			part := left[sh][:min(chunk, len(left[sh]))]
			if len(part) == 0 {
				continue
			}
			left[sh] = left[sh][len(part):]
			now := base + int64(call)*step
			if err := s.Ack(storeCtx(t), sh, part, now); err != nil {
				t.Fatalf("Ack: %v", err)
			}
			for _, id := range part {
				acked[id] = now
			}
			call++
		}
	}
	return acked
}

func countAll(byShard map[int][]string) int {
	n := 0
	for _, list := range byShard {
		n += len(list)
	}
	return n
}

// ackOthers parks, claims and acks at now a few messages of short ids of its own in
// each of shards: acks of other messages, whose trim of the done window runs on the way.
func ackOthers(t *testing.T, s storeapi.Store, shards []int, now int64, tag string) {
	t.Helper()
	for _, sh := range shards {
		others := idsOnShard(s, sh, 4, fmt.Sprintf("other-%s-%d", tag, now))
		mustPark(t, s, envsOf(others, "orders", now-1000)...)
		claimAllOf(t, s, others, now)
		if err := s.Ack(storeCtx(t), sh, others, now); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
}

// Thousands of ids of several blocks (offsets 1000..3100 of a partition), partitions
// and topics, acked in another order than parked over many Ack calls at several times:
// a replay of each is refused as delivered and Get shows its own ack's second. A new
// offset of a delivered block and the record at a delivered offset of a recreated topic
// (another hash) are new ids.
func caseKafkaIDsDoneWindowAcrossBlocks(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	const topic = "orders.delay"
	all := kafkaRange(topic, 0, 1000, 3100)
	for _, off := range []int64{5, 6, 1023, 1024, 70_000} {
		all = append(all, kafkaID(topic, 7, off, 0))
	}
	for _, off := range []int64{1000, 1001, 4096} {
		all = append(all, kafkaID("pay.delay", 0, off, 0))
	}
	if sh := wantKafkaPlaced(t, s, all); len(sh) < 2 {
		t.Fatalf("the ids are all in shards %v: want them spread", sh)
	}
	mustPark(t, s, envsOf(all, "orders", t0)...)
	acked := ackShuffled(t, s, claimAllOf(t, s, all, t0), 300, t0+10_000, 1_337)
	wantPrior(t, s, envsOf(all, "orders", t0), storeapi.StateDelivered)
	for _, id := range all {
		wantState(t, s, id, storeapi.StateDelivered, doneSec(acked[id]))
	}
	fresh := []string{kafkaID(topic, 0, 3101, 0), kafkaID(topic, 0, 2000, 1), kafkaID(topic, 7, 7, 0), kafkaID("pay.delay", 0, 1000, 1)}
	wantKafkaPlaced(t, s, fresh)
	wantPrior(t, s, envsOf(fresh, "orders", t0+1), storeapi.StateUnknown)
	for _, id := range fresh {
		wantState(t, s, id, storeapi.StatePending, t0+1)
	}
	old := kafkaID(topic, 0, 2000, 0)
	wantState(t, s, old, storeapi.StateDelivered, doneSec(acked[old]))
}

// A Kafka-form id cancelled before its message arrives (a tombstone of route B, in a
// block that already holds a delivered id): its record on B is refused as cancelled, on
// A it parks; acked, it reads delivered (over B's tombstone), and a replay on either
// route is refused as delivered. Its delivered neighbour is left as it was.
func caseKafkaIDsTombstoneThenAck(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	a, b := kafkaID("orders.delay", 3, 5000, 0), kafkaID("orders.delay", 3, 5001, 0)
	wantKafkaPlaced(t, s, []string{a, b})
	mustPark(t, s, envOn(b, "A", t0))
	claimAllOf(t, s, []string{b}, t0)
	if err := s.Ack(ctx, s.ShardOf(b), []string{b}, t0+500); err != nil {
		t.Fatal(err)
	}
	if st, _, err := s.Cancel(ctx, a, t0+1_000, storeapi.CancelOptions{Route: "B", Tombstone: true}); err != nil || st != storeapi.StateUnknown {
		t.Fatalf("tombstone cancel = %q %v, want unknown", st, err)
	}
	wantState(t, s, a, storeapi.StateCancelled, doneSec(t0+1_000))
	wantPrior(t, s, []*envelope.Envelope{envOn(a, "B", t0)}, storeapi.StateCancelled)
	wantPrior(t, s, []*envelope.Envelope{envOn(a, "A", t0)}, storeapi.StateUnknown)
	claimAllOf(t, s, []string{a}, t0)
	if err := s.Ack(ctx, s.ShardOf(a), []string{a}, t0+2_500); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a, storeapi.StateDelivered, doneSec(t0+2_500))
	wantPrior(t, s, []*envelope.Envelope{envOn(a, "A", t0), envOn(a, "B", t0), envOn(b, "B", t0)}, storeapi.StateDelivered)
	wantState(t, s, b, storeapi.StateDelivered, doneSec(t0+500))
}

// Replace of a delivered Kafka-form id parks it anew (its block's other delivered ids
// stay delivered); once that new version is acked it reads delivered again, at the new
// ack's second, and a replay is refused.
func caseKafkaIDsReplaceDelivered(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	block := kafkaRange("orders.delay", 1, 2048, 2055)
	a, rest := block[3], slices.Delete(slices.Clone(block), 3, 4)
	wantKafkaPlaced(t, s, block)
	mustPark(t, s, envsOf(block, "orders", t0)...)
	claimAllOf(t, s, block, t0)
	if err := s.AckMany(ctx, block, t0+1_200); err != nil {
		t.Fatal(err)
	}
	res, _ := mustReplace(t, s, version(a, t0+5_000, "v2"))
	if want := (rr{Prior: storeapi.StateDelivered, Outcome: storeapi.ReplaceParked}); res[0] != want {
		t.Fatalf("ReplaceEach = %+v, want %+v", res[0], want)
	}
	wantPayload(t, wantState(t, s, a, storeapi.StatePending, t0+5_000), "v2")
	wantPrior(t, s, []*envelope.Envelope{version(a, t0, "dup")}, storeapi.StatePending)
	for _, id := range rest {
		wantState(t, s, id, storeapi.StateDelivered, doneSec(t0+1_200))
	}
	claimAllOf(t, s, []string{a}, t0+5_000)
	if err := s.Ack(ctx, s.ShardOf(a), []string{a}, t0+6_500); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, a, storeapi.StateDelivered, doneSec(t0+6_500))
	wantPrior(t, s, envsOf(block, "orders", t0), storeapi.StateDelivered)
}

// Cancel of a delivered Kafka-form id (of any scope, with or without a tombstone)
// reports delivered and changes nothing: it still reads delivered at its ack's second
// and a replay is refused as delivered.
func caseKafkaIDsCancelDelivered(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(defaults).Store
	ctx := storeCtx(t)
	pair := kafkaRange("orders.delay", 2, 1023, 1024) // two blocks
	wantKafkaPlaced(t, s, pair)
	mustPark(t, s, envsOf(pair, "orders", t0)...)
	claimAllOf(t, s, pair, t0)
	if err := s.AckMany(ctx, pair, t0+1_200); err != nil {
		t.Fatal(err)
	}
	opts := []storeapi.CancelOptions{{}, {Route: "orders"}, {Route: "orders", Tombstone: true}}
	for _, id := range pair {
		for _, opt := range opts {
			if st, _, err := s.Cancel(ctx, id, t0+9_000, opt); err != nil || st != storeapi.StateDelivered {
				t.Fatalf("Cancel(%s, %+v) = %q %v, want delivered", id, opt, st, err)
			}
		}
		wantState(t, s, id, storeapi.StateDelivered, doneSec(t0+1_200))
	}
	wantPrior(t, s, envsOf(pair, "orders", t0), storeapi.StateDelivered)
}

// Kafka-form ids delivered at t0 (over several acks within a second) are remembered
// while acks a window after the first of them trim the done window, and forgotten by
// acks a window and a slice after the last (each ack forgets a bounded number: a
// bounded number of acks forgets all), after which they park again.
func caseKafkaIDsDoneTrim(t *testing.T, newSubject func(Config) Subject) {
	const window = 10 * time.Second
	s := newSubject(Config{Shards: 2, DoneWindow: window}).Store
	w, slice := window.Milliseconds(), storeapi.DoneSliceMs(window.Milliseconds())
	done := kafkaRange("orders.delay", 0, 1000, 1060)
	done = append(done, kafkaRange("orders.delay", 4, 0, 20)...)
	done = append(done, kafkaRange("pay.delay", 0, 4090, 4110)...)
	shards := wantKafkaPlaced(t, s, done)
	mustPark(t, s, envsOf(done, "orders", t0)...)
	acked := slices.Collect(maps.Values(ackShuffled(t, s, claimAllOf(t, s, done, t0), 7, t0, 50)))
	first, last := slices.Min(acked), slices.Max(acked)
	for i := range 3 {
		ackOthers(t, s, shards, first+w, fmt.Sprint("in", i))
	}
	if n := countStates(t, s, done); n[storeapi.StateDelivered] != len(done) {
		t.Fatalf("states %v a window after the acks, want all %d delivered", n, len(done))
	}
	wantPrior(t, s, envsOf(done, "orders", t0), storeapi.StateDelivered)
	later := last + w + slice + 10
	for round := 1; ; round++ {
		ackOthers(t, s, shards, later, fmt.Sprint("out", round))
		n := countStates(t, s, done)
		if n[storeapi.StateUnknown] == len(done) {
			break
		}
		if round == 20 {
			t.Fatalf("states %v after %d acks a window and a slice later in each shard, want all forgotten", n, round)
		}
	}
	wantPrior(t, s, envsOf(done, "orders", t0), storeapi.StateUnknown)
}

// Done window 0: Kafka-form ids acked, cancelled pending or tombstoned leave no trace,
// and a replay of each parks.
func caseKafkaIDsNoDoneWindow(t *testing.T, newSubject func(Config) Subject) {
	s := newSubject(Config{Shards: 4, DoneWindow: 0}).Store
	ctx := storeCtx(t)
	all := kafkaRange("orders.delay", 0, 1000, 1100)
	all = append(all, kafkaRange("orders.delay", 9, 0, 3)...)
	pending, tomb := kafkaID("orders.delay", 0, 1101, 0), kafkaID("orders.delay", 9, 4, 0)
	wantKafkaPlaced(t, s, append(slices.Clone(all), pending, tomb))
	mustPark(t, s, envsOf(all, "orders", t0)...)
	ackShuffled(t, s, claimAllOf(t, s, all, t0), 40, t0+1_000, 10)
	mustPark(t, s, env(pending, t0+60_000))
	if st, _, err := s.Cancel(ctx, pending, t0+2_000, storeapi.CancelOptions{}); err != nil || st != storeapi.StatePending {
		t.Fatalf("Cancel(pending) = %q %v, want pending", st, err)
	}
	if st, _, err := s.Cancel(ctx, tomb, t0+2_000, storeapi.CancelOptions{Route: "orders", Tombstone: true}); err != nil || st != storeapi.StateUnknown {
		t.Fatalf("tombstone cancel = %q %v, want unknown", st, err)
	}
	all = append(all, pending, tomb)
	if n := countStates(t, s, all); n[storeapi.StateUnknown] != len(all) {
		t.Fatalf("done window 0 but states %v", n)
	}
	wantPrior(t, s, envsOf(all, "orders", t0), storeapi.StateUnknown)
}
