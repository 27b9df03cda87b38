package main

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// The time-bucket probe (-layout buckets): the same workload as the store's, on a
// layout where messages due together are stored together. A bucket holds the messages
// of one shard due in [b·W, (b+1)·W): a LIST of elements (-bucket list, listpos) or a
// HASH of id -> envelope (-bucket hash). A Kafka default id's slot in its block (the
// 10-byte slots the store's done window already keeps) says in which bucket it is
// pending (listpos: and where in it), so a fetch's ids are checked and marked by a few
// commands over consecutive slots, not one index entry each. Park appends a batch to
// its buckets, claim renames the earliest bucket due by its horizon after its lease
// deadline (the caller reads it in the same pipeline: no envelope enters Lua), ack marks
// the slots delivered (-ack slots), writes the bucket's bitmap of acknowledged
// positions (bitmap) or only takes the ids out of a HASH bucket (none). It keeps
// fencing and exact per-route counts; it is a probe of what the hot path's calls cost,
// not a store: by-id operations, recovery, the cold tier and ids of other forms are not
// written here (docs/ARCHITECTURE.md "Time buckets").

//go:embed buckets/park.lua
var bucketPark string

//go:embed buckets/claim.lua
var bucketClaim string

//go:embed buckets/ack.lua
var bucketAck string

//go:embed buckets/ack_bitmap.lua
var bucketAckBitmap string

//go:embed buckets/park_pos.lua
var bucketParkPos string

// bp is the probe shard's key prefix.
const bp = "p:{c:0}:"

// bucketRun holds what the probe's driver knows of its messages.
type bucketRun struct {
	rdb              *redis.Client
	o                options
	park, claim, ack *redis.Script
	width            int64
	waiting          []bucketMsg // claimed, not acknowledged
	pending          []bucketMsg // parked, not claimed
	deadline         int64
	pos              map[string]int    // id -> its position in its in-flight bucket
	acked            map[string][]byte // in-flight bucket name -> its bitmap (-ack bitmap)
}

// bucketMsg is one message of the probe and where the driver has it.
type bucketMsg struct {
	e      *envelope.Envelope
	part   string // "orders.delay/<partition>"
	offset uint64
	hash   string
	bucket int64
	name   string // its in-flight bucket's name, once claimed
}

// bucketWorkload is workload's twin on the probe's layout: the same prefill, rounds and
// stages (upto), then the end check after a full run.
func bucketWorkload(ctx context.Context, rdb *redis.Client, o options, upto int) error {
	r, err := newBucketRun(ctx, rdb, o)
	if err != nil {
		return err
	}
	if err := r.prefill(ctx); err != nil {
		return err
	}
	afterPrefill(ctx)
	for i := 0; upto > 0 && i < o.rounds+o.spread-1; i++ {
		if err := r.round(ctx, i, upto); err != nil {
			return err
		}
	}
	if upto == len(stages)-1 {
		return r.check(ctx)
	}
	return nil
}

// newBucketRun loads the scripts o asks for and gives the probe's shard its lease.
func newBucketRun(ctx context.Context, rdb *redis.Client, o options) (*bucketRun, error) {
	if !o.kafkaIDs || o.claimAtPark {
		return nil, fmt.Errorf("-layout buckets: Kafka default ids only, without -claim-at-park")
	}
	r := &bucketRun{rdb: rdb, o: o, width: int64(o.bucketMS),
		park: redis.NewScript(bucketPark), claim: redis.NewScript(bucketClaim), ack: redis.NewScript(bucketAck),
		deadline: t0 + 30_000, pos: map[string]int{}, acked: map[string][]byte{}}
	switch {
	case o.bucket == "hash" && (o.ack == "slots" || o.ack == "none"):
	case o.bucket == "listpos" && o.ack == "slots":
		r.park = redis.NewScript(bucketParkPos)
	case o.bucket == "list" && o.ack == "bitmap":
		r.ack = redis.NewScript(bucketAckBitmap)
	case o.bucket != "list" || o.ack != "slots":
		return nil, fmt.Errorf("-bucket %q -ack %q: -bucket list with -ack slots or bitmap, -bucket listpos with -ack slots, or -bucket hash with -ack slots or none", o.bucket, o.ack)
	}
	for _, sc := range []*redis.Script{r.park, r.claim, r.ack} {
		if err := sc.Load(ctx, rdb).Err(); err != nil { // EVALSHA in a pipeline does not fall back to EVAL
			return nil, err
		}
	}
	return r, rdb.Set(ctx, bp+"owner", "instr|1", 0).Err()
}

// prefill parks as the store's workload does: 2,000 due two minutes ahead (an hour with
// -prefill-cold) and 600 in flight, ids of other partitions.
func (r *bucketRun) prefill(ctx context.Context) error {
	ahead := int64(120_000)
	if r.o.prefillCold {
		ahead = 3_600_000
	}
	var pre, held []bucketMsg
	for j := range 2000 {
		pre = append(pre, r.msg("orders.delay/9", uint64(j), t0+ahead))
	}
	for j := range 600 {
		held = append(held, r.msg("orders.delay/8", uint64(j), t0-1000))
	}
	for _, b := range [][]bucketMsg{pre, held} {
		for k := 0; k < len(b); k += 200 {
			if err := r.parkBatch(ctx, b[k].part, b[k:k+200]); err != nil {
				return err
			}
		}
	}
	r.pending = pre // claimed and acknowledged if the rounds reach their due time, as the store's are
	if _, err := r.claimUpTo(ctx, t0-1000); err != nil {
		return err
	}
	r.waiting = nil // the 600 stay in flight, never acknowledged
	return nil
}

// round runs round i as the store's workload does: a fetch parked (while rounds last),
// then, up to stage upto, a claim of what is due by the round's window and an ack of
// what fired in it.
func (r *bucketRun) round(ctx context.Context, i, upto int) error {
	o := r.o
	if i < o.rounds {
		batch := make([]bucketMsg, o.batch)
		for j := range batch {
			due := t0
			if o.spread > 1 {
				k := int64((uint32(j)*2654435761 + uint32(i)*40503) % uint32(o.spread))
				due = t0 + (int64(i)+k)*100 + 50
			}
			batch[j] = r.msg("orders.delay/3", uint64(i*o.batch+j), due)
		}
		if err := r.parkBatch(ctx, "orders.delay/3", batch); err != nil {
			return err
		}
	}
	if upto < 2 {
		return nil
	}
	window := t0 + int64(i)*100 + 99
	if o.spread <= 1 {
		window = t0
	}
	if _, err := r.claimUpTo(ctx, window); err != nil {
		return err
	}
	var acks []bucketMsg
	kept := r.waiting[:0]
	for _, m := range r.waiting {
		if m.e.DueAt <= window || m.e.DueAt >= t0+120_000 { // the prefill's: acknowledged once claimed
			acks = append(acks, m)
		} else {
			kept = append(kept, m)
		}
	}
	r.waiting = kept
	if upto < 3 || len(acks) == 0 {
		return nil
	}
	return r.ackBatch(ctx, acks)
}

// check tests the end of a full run: the counts are those of what the driver holds
// pending and in flight (the prefill's 600 in flight, never acknowledged, among them),
// and every in-flight bucket whose messages were all acknowledged is gone.
func (r *bucketRun) check(ctx context.Context) error {
	counts, err := r.rdb.HGetAll(ctx, bp+"counts").Result()
	if err != nil {
		return err
	}
	left, err := r.rdb.HLen(ctx, bp+"hfn").Result()
	if r.o.bucket == "hash" {
		left, err = r.rdb.ZCard(ctx, bp+"hf").Result()
	}
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, m := range r.waiting {
		names[m.name] = true
	}
	want := map[string]string{"pending:orders": strconv.Itoa(len(r.pending)), "inflight:orders": strconv.Itoa(600 + len(r.waiting))}
	if counts["pending:orders"] != want["pending:orders"] || counts["inflight:orders"] != want["inflight:orders"] || left != int64(1+len(names)) {
		return fmt.Errorf("probe's end: counts %v, want %v; %d in-flight buckets, want %d", counts, want, left, 1+len(names))
	}
	return r.checkSlots(ctx)
}

// checkSlots tests the slots of the measured messages' first block after a full run:
// each holds its record hash, and the second delivered where acks mark slots, else
// the mark park wrote (pending in its bucket).
func (r *bucketRun) checkSlots(ctx context.Context) error {
	n := min(r.o.batch*r.o.rounds, 1024)
	block, err := r.rdb.GetRange(ctx, bp+"kb:orders.delay/3/0", 0, int64(10*n-1)).Result()
	if err != nil {
		return err
	}
	if len(block) != 10*n {
		return fmt.Errorf("probe's end: block 0 holds %d bytes, want %d", len(block), 10*n)
	}
	for o := range n {
		m := r.msg("orders.delay/3", uint64(o), t0)
		v := binary.BigEndian.Uint32([]byte(block[10*o+6 : 10*o+10]))
		h, _ := hex.DecodeString(m.hash)
		delivered := v == uint32(t0/1000)
		if block[10*o:10*o+6] != string(h) || delivered != (r.o.ack == "slots") || !delivered && v>>31 != 1 {
			return fmt.Errorf("probe's end: offset %d's slot %x", o, block[10*o:10*o+10])
		}
	}
	return nil
}

// msg is a message of the Kafka default id of partition's offset, due at due.
func (r *bucketRun) msg(partition string, offset uint64, due int64) bucketMsg {
	hash := fmt.Sprintf("%012x", offset)
	e := message(fmt.Sprintf("%s/%d/%s", partition, offset, hash), due)
	return bucketMsg{e: e, part: partition, offset: offset, hash: hash, bucket: due / r.width}
}

// slot is a message's 10 bytes in its block: the record hash and, high bit set, the
// bucket it is pending in; delivered: the second (ack).
// slot is m's 10 bytes in its block: its record hash, then v (the second delivered, or
// the bucket it is pending in with the high bit set).
func slot(m bucketMsg, v uint32) []byte {
	b, _ := hex.DecodeString(m.hash)
	return binary.BigEndian.AppendUint32(b, v)
}

// parkBatch parks consecutive offsets of one partition (a fetch) with one call.
func (r *bucketRun) parkBatch(ctx context.Context, partition string, batch []bucketMsg) error {
	buckets := map[int64][]bucketMsg{}
	var order []int64
	group := make([]uint16, len(batch)) // message -> its bucket's place in order (1-based), and
	place := make([]uint16, len(batch)) // its place among that bucket's messages (0-based)
	for k, m := range batch {
		if _, ok := buckets[m.bucket]; !ok {
			order = append(order, m.bucket)
		}
		group[k], place[k] = uint16(slices.Index(order, m.bucket)+1), uint16(len(buckets[m.bucket]))
		buckets[m.bucket] = append(buckets[m.bucket], m)
	}
	args := []any{bp, r.kind(), 0}
	spans := 0
	for k := 0; k < len(batch); {
		blk := batch[k].offset / 1024
		var slots, hashes, places []byte
		first := k
		for ; k < len(batch) && batch[k].offset/1024 == blk; k++ {
			v := slot(batch[k], uint32(batch[k].bucket)|1<<31)
			slots = append(slots, v...)
			hashes = append(hashes, v[:6]...)
			places = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(places, group[k]), place[k])
		}
		lo := (batch[first].offset % 1024) * 10
		args = append(args, fmt.Sprintf("%s/%d", partition, blk), lo, lo+uint64(len(slots))-1)
		if r.o.bucket == "listpos" {
			args = append(args, hashes, places)
		} else {
			args = append(args, slots)
		}
		spans++
	}
	args[2] = spans
	args = append(args, 1, "orders", len(batch))
	for _, b := range order {
		ms := buckets[b]
		args = append(args, b, b*r.width, len(ms))
		for _, m := range ms {
			env, err := envelope.Encode(m.e)
			if err != nil {
				return err
			}
			if r.o.bucket == "hash" {
				args = append(args, m.e.ID, env)
				continue
			}
			el := binary.AppendUvarint(nil, uint64(len(m.e.ID)))
			el = append(append(el, m.e.ID...), env...)
			args = append(args, el)
		}
		args = append(args, 1, "orders", len(ms))
	}
	res, err := r.park.Run(ctx, r.rdb, []string{bp + "counts", bp + "hbs"}, args...).Text()
	if err != nil {
		return err
	}
	if res != "ok" {
		return fmt.Errorf("park: %s", res)
	}
	r.pending = append(r.pending, batch...)
	return nil
}

// claimUpTo claims the buckets that start by upTo and reads them, as the pump would:
// one bucket a call, its claim and its read in one pipeline, each claim under a lease
// deadline of its own.
func (r *bucketRun) claimUpTo(ctx context.Context, upTo int64) (int, error) {
	keys := []string{bp + "counts", bp + "hbs", bp + "owner", bp + "hf", bp + "hfn"}
	n := 0
	for {
		r.deadline++
		name := strconv.FormatInt(r.deadline, 10)
		pipe := r.rdb.Pipeline()
		list := r.o.bucket != "hash"
		cl := r.claim.Run(ctx, pipe, keys, bp, "instr|1", upTo, r.deadline, map[bool]int{true: 1}[list])
		var read *redis.StringSliceCmd
		var hread *redis.MapStringStringCmd
		if list {
			read = pipe.LRange(ctx, bp+"hf:"+name, 0, -1)
		} else {
			hread = pipe.HGetAll(ctx, bp+"hf:"+name)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
		out, err := cl.Slice()
		if err != nil {
			return 0, err
		}
		if len(out) == 1 {
			return n, nil
		}
		b, want := out[1].(int64), out[2].(int64)
		got := 0
		if list {
			for j, el := range read.Val() {
				l, w := binary.Uvarint([]byte(el))
				r.pos[el[w:w+int(l)]] = j
			}
			got = len(read.Val())
		} else {
			got = len(hread.Val())
		}
		if int64(got) != want {
			return 0, fmt.Errorf("claim: bucket of %d read %d", want, got)
		}
		n += got
		kept := r.pending[:0]
		for _, m := range r.pending {
			if m.bucket == b {
				m.name = name
				r.waiting = append(r.waiting, m)
			} else {
				kept = append(kept, m)
			}
		}
		r.pending = kept
		if next := out[0].(int64); next < 0 || next > upTo {
			return n, nil
		}
	}
}

// kind is park.lua's and ack.lua's name for the run's kind of bucket: "hash" or "list"
// (listpos too: park_pos.lua takes the same arguments, and its buckets are lists).
func (r *bucketRun) kind() string {
	if r.o.bucket == "hash" {
		return "hash"
	}
	return "list"
}

// ackBatch acknowledges published messages: their slots' runs, routes, buckets.
func (r *bucketRun) ackBatch(ctx context.Context, acks []bucketMsg) error {
	if r.o.ack == "bitmap" {
		return r.ackBitmap(ctx, acks)
	}
	slices.SortFunc(acks, func(a, b bucketMsg) int {
		return cmp.Or(strings.Compare(a.part, b.part), cmp.Compare(a.offset, b.offset))
	})
	sec := uint32(t0 / 1000)
	args := []any{bp, t0, r.kind(), 0}
	blocks := 0
	for k := 0; k < len(acks) && r.o.ack != "none"; {
		blk := acks[k].offset / 1024
		at := len(args)
		part := acks[k].part
		args = append(args, fmt.Sprintf("%s/%d", part, blk), 0)
		runs := 0
		for k < len(acks) && acks[k].part == part && acks[k].offset/1024 == blk {
			first := k
			var slots []byte
			for k < len(acks) && acks[k].part == part && acks[k].offset/1024 == blk && (k == first || acks[k].offset == acks[k-1].offset+1) {
				slots = append(slots, slot(acks[k], sec)...)
				k++
			}
			args = append(args, (acks[first].offset%1024)*10, slots)
			runs++
		}
		args[at+1] = runs
		blocks++
	}
	args[3] = blocks
	args = append(args, 1, "orders", len(acks))
	per := map[string][]string{}
	var names []string
	for _, m := range acks {
		if len(per[m.name]) == 0 {
			names = append(names, m.name)
		}
		per[m.name] = append(per[m.name], m.e.ID)
	}
	for _, name := range names {
		if r.o.bucket == "hash" {
			args = append(args, name, len(per[name]))
			for _, id := range per[name] {
				args = append(args, id)
			}
			continue
		}
		args = append(args, name, len(per[name]))
	}
	keys := []string{bp + "counts", bp + "hf", bp + "hfn", bp + "kb"}
	return r.ack.Run(ctx, r.rdb, keys, args...).Err()
}

// ackBitmap acknowledges published messages by their in-flight buckets' bitmaps.
func (r *bucketRun) ackBitmap(ctx context.Context, acks []bucketMsg) error {
	args := []any{bp, t0, 1, "orders", len(acks)}
	per := map[string]int{}
	var names []string
	for _, m := range acks {
		if per[m.name] == 0 {
			names = append(names, m.name)
		}
		per[m.name]++
		p, ok := r.pos[m.e.ID]
		if !ok {
			return fmt.Errorf("ack: %s was not read from its bucket", m.e.ID)
		}
		delete(r.pos, m.e.ID)
		bm := r.acked[m.name]
		for len(bm) <= p/8 {
			bm = append(bm, 0)
		}
		bm[p/8] |= 1 << (p % 8)
		r.acked[m.name] = bm
	}
	for _, name := range names {
		args = append(args, name, per[name], r.acked[name])
	}
	keys := []string{bp + "counts", bp + "hf", bp + "hfn", bp + "hd"}
	return r.ack.Run(ctx, r.rdb, keys, args...).Err()
}
