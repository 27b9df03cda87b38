package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Park and bury: storing what ingress consumed.

type encoded struct {
	idx   int // position in the caller's slice
	shard int
	data  []byte
}

// encodeGrouped encodes envs and groups them by shard, shards ascending, input order
// kept within a shard.
func (s *Store) encodeGrouped(envs []*envelope.Envelope) ([][]encoded, []int, error) {
	byShard := make(map[int][]encoded)
	for i, e := range envs {
		if e == nil || e.ID == "" {
			return nil, nil, fmt.Errorf("%w: envelope %d has no id", ErrInvalid, i)
		}
		data, err := envelope.Encode(e)
		if err != nil {
			return nil, nil, fmt.Errorf("scheduler: encode envelope %q: %w", e.ID, errors.Join(ErrInvalid, err))
		}
		sh := s.ShardOfEnv(e)
		byShard[sh] = append(byShard[sh], encoded{idx: i, shard: sh, data: data})
	}
	shards := make([]int, 0, len(byShard))
	for sh := range byShard {
		shards = append(shards, sh)
	}
	sort.Ints(shards)
	groups := make([][]encoded, len(shards))
	for i, sh := range shards {
		groups[i] = byShard[sh]
	}
	return groups, shards, nil
}

// chunk splits one shard's items into script calls bounded in count and bytes.
func chunk(items []encoded) [][]encoded {
	var out [][]encoded
	start, bytes := 0, 0
	for i, it := range items {
		if i > start && (i-start >= maxItemsPerCall || bytes+len(it.data) > maxBytesPerCall) {
			out = append(out, items[start:i])
			start, bytes = i, 0
		}
		bytes += len(it.data)
	}
	if start < len(items) {
		out = append(out, items[start:])
	}
	return out
}

// Park stores envs, each in the shard of its id, due at its DueAt. parked[i] is false
// for a duplicate: an id already pending, in flight, dead or recently done. minDue
// holds, per shard, the earliest due time among newly parked messages, for waking
// pumps. It is ParkEach with the refusal reasons folded into a bool.
func (s *Store) Park(ctx context.Context, envs []*envelope.Envelope) (parked []bool, minDue map[int]int64, err error) {
	prior, minDue, err := s.ParkEach(ctx, envs)
	if prior == nil {
		return nil, nil, err
	}
	parked = make([]bool, len(envs))
	for i, st := range prior {
		parked[i] = st == StateUnknown
	}
	return parked, minDue, err
}

// ParkEach stores envs, each in the shard of its id, due at its DueAt. One script call
// per shard (more for huge batches), all in one pipelined round trip. prior[i] is the
// state envs[i]'s id was in before the call: StateUnknown means it was new and is now
// parked; any other state is why it was refused (pending, inflight, dead, delivered,
// cancelled — the duplicate reason). A tombstone left by a cancel of another route
// does not refuse a message (cancels are scoped to their route). minDue holds, per
// shard, the earliest due time among newly parked messages, for waking pumps.
//
// On error some shards may have been written; parking is idempotent, so retry the whole
// batch (the replay then reports the messages parked the first time as pending). prior
// and minDue are still filled in for the calls that succeeded (all of them with
// ErrNotReplicated); the others read StateNotStored.
func (s *Store) ParkEach(ctx context.Context, envs []*envelope.Envelope) (prior []State, minDue map[int]int64, err error) {
	prior, _, minDue, err = s.ParkClaimEach(ctx, envs, storeapi.ParkClaim{})
	return prior, minDue, err
}

// ParkClaimEach is ParkEach that claims, as it parks, the new messages claim wants in
// shards claim.Instance holds (storeapi.Intake.ParkClaimEach): park.lua checks the
// shard's owner key and puts them in flight instead of due, so they skip the claim
// script (the envelope read back, the due entry added and removed) entirely.
func (s *Store) ParkClaimEach(ctx context.Context, envs []*envelope.Envelope, claim storeapi.ParkClaim) (prior []State, claimed []bool, minDue map[int]int64, err error) {
	prior = make([]State, len(envs))
	for i := range prior {
		prior[i] = StateNotStored
	}
	claimed = make([]bool, len(envs))
	minDue = make(map[int]int64)
	if len(envs) == 0 {
		return prior, claimed, minDue, nil
	}
	groups, shards, err := s.encodeGrouped(envs)
	if err != nil {
		return nil, nil, nil, err
	}
	var calls []call
	var chunks []parkChunk
	now, horizon := clock.NowMs(s.opt.Clock), s.coldHorizon()
	for gi, g := range groups {
		for _, ch := range chunk(g) {
			cl, pc := s.parkCall(envs, shards[gi], ch, now, horizon, claim, true)
			calls, chunks = append(calls, cl), append(chunks, pc)
		}
	}
	cmds, err := s.evalPipelined(ctx, calls, s.opt.MinReplicas > 0)
	var full []parkChunk // quick-only calls that could not vouch for their batch
	for ci, cmd := range cmds {
		if cmd == nil || cmd.Err() != nil {
			continue
		}
		if v, ok := cmd.Val().(string); ok && v == parkFull {
			full = append(full, chunks[ci])
			continue
		}
		if perr := parkReply(cmd, chunks[ci], envs, prior, claimed, minDue); perr != nil {
			return prior, claimed, minDue, perr
		}
	}
	if len(full) == 0 || (err != nil && !errors.Is(err, ErrNotReplicated)) {
		return prior, claimed, minDue, err
	}
	// The full path, id by id, for the batches park's quick path refused: a second round
	// trip only where a fetch replays ids the shard has seen (a restart, a rebalance) or
	// meets a tombstone.
	calls, chunks = calls[:0], chunks[:0]
	for _, pc := range full {
		cl, pc2 := s.parkCall(envs, pc.shard, pc.items, now, horizon, claim, false)
		calls, chunks = append(calls, cl), append(chunks, pc2)
	}
	cmds, ferr := s.evalPipelined(ctx, calls, s.opt.MinReplicas > 0)
	for ci, cmd := range cmds {
		if cmd == nil || cmd.Err() != nil {
			continue
		}
		if perr := parkReply(cmd, chunks[ci], envs, prior, claimed, minDue); perr != nil {
			return prior, claimed, minDue, perr
		}
	}
	return prior, claimed, minDue, errors.Join(err, ferr)
}

// parkFull is park.lua's reply to a quick-only call (one with block spans) whose batch
// its quick path cannot park whole: nothing was written, and the batch goes again with
// its fps, for the full path.
const parkFull = "full"

// parkCall is the script call that parks ch, messages of shard: park.lua's arguments
// (the cold horizon it may use, the block spans of a fetch, the lease to claim under
// and how many of the batch, ordered first, to claim), or ordered_park's for a batch
// holding messages of `order: key` routes (which claims nothing).
func (s *Store) parkCall(envs []*envelope.Envelope, shard int, ch []encoded, now, horizon int64, claim storeapi.ParkClaim, quick bool) (call, parkChunk) {
	k := s.keys[shard]
	lease, claims := claim.Leases[shard]
	owner := ""
	if claims {
		owner = OwnerValue(claim.Instance, lease.Token)
	}
	// Room for a quick call's layout too (appendQuick): a few block spans and routes
	// beyond the five arguments per message, so that it does not grow the slice again.
	args := make([]any, 0, 6+5*len(ch)+16)
	h := horizon
	if s.onOrdered(envs, ch) {
		// Messages of order: key routes stay in due, keyed or not: a replace finds a
		// route's stored ids in other shards by msg.
		h = -1
	}
	latest := int64(math.MinInt64)
	for _, it := range ch {
		latest = max(latest, envs[it.idx].DueAt)
	}
	if h >= 0 && latest < now+h {
		// None of the batch is due a horizon ahead, so none can go cold: the call says
		// so, and park.lua neither converts each due time nor reads the cold tier's
		// watermark.
		h = -1
	}
	ordered := s.anyOrdered(envs, ch)
	args = append(args, now, h, 0, owner, lease.LeaseDeadline, 0)
	if quick && h < 0 && !ordered {
		args = appendSpans(args, envs, ch) // in fetch order: the spans need offsets rising
	}
	c := 0
	if claims && !ordered {
		ch, c = wantedFirst(ch, claim.Want)
		args[5] = c
	}
	keys, pc := parkKeys(k), parkChunk{items: ch, claim: c, shard: shard}
	if args[2] != 0 { // a quick-only call
		var groups []bucketGroup
		if s.opt.Buckets {
			ch, groups = bucketLast(envs, ch, c, now)
			pc.items = ch
		}
		return call{sc: s.park, keys: keys, args: appendQuick(args, envs, ch, c, groups)}, pc
	}
	var queues []string
	for _, it := range ch {
		e := envs[it.idx]
		args = append(args, &e.ID, &e.DueAt, it.data, &e.Route, fingerprint(e.ID))
		if ordered {
			queues = append(queues, s.queueOf(shard, e))
		}
	}
	if !ordered {
		return call{sc: s.park, keys: keys, args: args}, pc
	}
	// Ordered keys in the batch: park them in their keys' queues too. The owner and
	// the guard give way to ordered_park's keys, the guard moving to the end, after
	// the queues (slotguard.go).
	keys = append(append(keys[:7:7], k.ko, k.ki), queues...)
	return call{sc: s.oPark, keys: withGuard(k, keys), args: args}, parkChunk{items: ch, shard: shard}
}

// appendQuick appends the messages of a quick-only park call, ch (the first c to be
// claimed, under the call's lease deadline), laid out for park.lua's parkquick: the
// count of routes and, per route, its messages going pending and in flight; id and
// envelope pairs (HSET's arguments as they are); the others' due times.
func appendQuick(args []any, envs []*envelope.Envelope, ch []encoded, c int, groups []bucketGroup) []any {
	type tally struct {
		route          string
		pending, going int
	}
	var routes []tally
	for j, it := range ch {
		r := envs[it.idx].Route
		i := slices.IndexFunc(routes, func(t tally) bool { return t.route == r })
		if i < 0 {
			i, routes = len(routes), append(routes, tally{route: r})
		}
		if j < c {
			routes[i].going++
		} else {
			routes[i].pending++
		}
	}
	args = slices.Grow(args, 1+3*len(routes)+3*len(ch))
	args = append(args, len(routes))
	for _, t := range routes {
		args = append(args, t.route, t.pending, t.going)
	}
	args = appendBuckets(args, envs, ch, groups)
	// Fields go by pointer (go-redis writes *string and *int64 as their values): an
	// interface holding a pointer needs no allocation of its own. The envelopes too,
	// as views of their encodings (which nothing writes after Encode): one allocation
	// for the call, not one per []byte boxed.
	data := make([]string, len(ch))
	for j, it := range ch {
		data[j] = unsafe.String(unsafe.SliceData(it.data), len(it.data))
		args = append(args, &envs[it.idx].ID, &data[j])
	}
	for _, it := range ch[c:] {
		args = append(args, &envs[it.idx].DueAt)
	}
	return args
}

// parkChunk is one park call's messages of shard, the first claim of which it asked to
// claim.
type parkChunk struct {
	items []encoded
	claim int
	shard int
}

// wantedFirst reorders one call's messages so that those want marks come first (in
// their order, then the others in theirs) and counts them: park.lua claims the first
// c of its batch.
func wantedFirst(ch []encoded, want []bool) ([]encoded, int) {
	c := 0
	for _, it := range ch {
		if it.idx < len(want) && want[it.idx] {
			c++
		}
	}
	if c == 0 || c == len(ch) {
		return ch, c
	}
	out := make([]encoded, 0, len(ch))
	for _, it := range ch {
		if it.idx < len(want) && want[it.idx] {
			out = append(out, it)
		}
	}
	for _, it := range ch {
		if it.idx >= len(want) || !want[it.idx] {
			out = append(out, it)
		}
	}
	return out, c
}

// appendSpans appends park.lua's block spans for the batch ch and sets their count
// (args[2]): the block name and the first and last byte of the slots its ids occupy.
// It appends none, leaving the count 0, unless every id is of the Kafka default form and
// each block's offsets rise through the batch (so no id is there twice), as a fetch's do:
// only then may park take its quick path.
func appendSpans(args []any, envs []*envelope.Envelope, ch []encoded) []any {
	type span struct {
		prefix        string // "<topic>/<partition>/"
		block, lo, hi uint64
		last          uint64 // the latest offset seen
	}
	var spans []span
	for _, it := range ch {
		prefix, offset, _, ok := storeapi.KafkaOffset(envs[it.idx].ID)
		if !ok {
			return args
		}
		block, slot := offset/storeapi.ShardBlock, offset%storeapi.ShardBlock
		j := len(spans) - 1
		for j >= 0 && (spans[j].block != block || spans[j].prefix != prefix) {
			j--
		}
		switch {
		case j < 0:
			spans = append(spans, span{prefix: prefix, block: block, lo: slot, hi: slot, last: offset})
		case offset <= spans[j].last:
			return args
		default:
			spans[j].hi, spans[j].last = slot, offset
		}
	}
	args[2] = len(spans)
	for _, sp := range spans {
		name := string(appendBlockName(nil, sp.prefix, sp.block*storeapi.ShardBlock))
		args = append(args, name, sp.lo*kbSlot, sp.hi*kbSlot+kbSlot-1)
	}
	return args
}

// parkReply reads the reply of one park call of the messages ch: the refused ones
// only, as position (1-based, in ch) and state pairs, every other message parked,
// and, when the call claimed, a last element 1: the first ch.claim not refused went
// in flight. It sets their prior states and claimed flags (and each claimed
// envelope's FireAt and ClaimedBytes, as a claim does) and lowers minDue to the
// pending ones' due times.
func parkReply(cmd *redis.Cmd, ch parkChunk, envs []*envelope.Envelope, prior []State, claimed []bool, minDue map[int]int64) error {
	res, err := cmd.Slice()
	if err != nil {
		return fmt.Errorf("scheduler: park: unexpected reply %v: %v", cmd.Val(), err)
	}
	took := len(res)%2 == 1
	if took {
		if v, ok := res[len(res)-1].(int64); !ok || v != 1 || ch.claim == 0 {
			return fmt.Errorf("scheduler: park: unexpected reply %v", res)
		}
		res = res[:len(res)-1]
	}
	for _, it := range ch.items {
		prior[it.idx] = StateUnknown
	}
	for r := 0; r < len(res); r += 2 {
		pos, ok := res[r].(int64)
		st, ok2 := res[r+1].(string)
		if !ok || !ok2 || pos < 1 || pos > int64(len(ch.items)) {
			return fmt.Errorf("scheduler: park: unexpected reply %v", res)
		}
		prior[ch.items[pos-1].idx] = State(st)
	}
	for j, it := range ch.items {
		if prior[it.idx] != StateUnknown {
			continue
		}
		e := envs[it.idx]
		if took && j < ch.claim {
			claimed[it.idx] = true
			e.FireAt = e.DueAt
			e.ClaimedFrom = it.shard + 1
			e.ClaimedBytes = int64(len(it.data)) + storeapi.MemOverhead
			continue
		}
		if old, ok := minDue[it.shard]; !ok || e.DueAt < old {
			minDue[it.shard] = e.DueAt
		}
	}
	return nil
}

// Bury stores invalid messages straight into the dead letters (their Reason should say
// why), idempotently like Park: prior[i] is StateUnknown when envs[i] was buried now,
// else the state its id was already in (left as it is), so a replayed batch is not
// counted or copied to a dead-letter target twice. On error prior is nil unless the
// error is ErrNotReplicated.
func (s *Store) Bury(ctx context.Context, envs []*envelope.Envelope, now int64) (prior []State, err error) {
	prior = make([]State, len(envs))
	if len(envs) == 0 {
		return prior, nil
	}
	groups, shards, err := s.encodeGrouped(envs)
	if err != nil {
		return nil, err
	}
	var calls []call
	var chunks [][]encoded
	for gi, g := range groups {
		k := s.keys[shards[gi]]
		for _, ch := range chunk(g) {
			args := make([]any, 0, 1+4*len(ch))
			args = append(args, now)
			for _, it := range ch {
				args = append(args, envs[it.idx].ID, it.data, envs[it.idx].Route, fingerprint(envs[it.idx].ID))
			}
			calls = append(calls, call{sc: s.bury, keys: withGuard(k, []string{k.due, k.msg, k.inflight, k.dead, k.counts, k.ix, k.dn}), args: args})
			chunks = append(chunks, ch)
		}
	}
	cmds, err := s.evalPipelined(ctx, calls, s.opt.MinReplicas > 0)
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return nil, err
	}
	for ci, cmd := range cmds {
		res, perr := cmd.StringSlice()
		if perr != nil || len(res) != len(chunks[ci]) {
			return nil, fmt.Errorf("scheduler: bury: unexpected reply %v: %v", cmd.Val(), perr)
		}
		for j, it := range chunks[ci] {
			if res[j] != "buried" {
				prior[it.idx] = State(res[j])
			}
		}
	}
	return prior, err
}
