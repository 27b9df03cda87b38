package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Claim, ack, retry, recover: the pump's side of a shard.

// Claim moves up to limit messages of shard due at or before upTo into inflight with
// the lease deadline leaseDeadline, and returns them earliest first, each with FireAt set
// to the later of its due score and its envelope's DueAt (Reschedule keeps the two equal;
// a retry's score is later, a recovered message's may be earlier).
// nextDue is the due time of the earliest message still pending, -1 if none. Claim fails
// with ErrFenced unless instance holds the shard's lease with token.
//
// Damaged entries never wedge a shard: an id without an envelope is dropped by the
// script, and an envelope that does not decode is moved to the dead letters as is; both
// are counted as Invalid on the Observer.
func (s *Store) Claim(ctx context.Context, shard int, instance string, token int64, upTo, leaseDeadline int64, limit int) (items []*envelope.Envelope, nextDue int64, err error) {
	k, err := s.shardKeys(shard)
	if err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		return nil, 0, fmt.Errorf("%w: claim limit %d", ErrInvalid, limit)
	}
	cmd := s.eval(ctx, s.claim, claimKeys(k), s.claimArgs(OwnerValue(instance, token), upTo, leaseDeadline, limit, 0, false, false, 0)...)
	envs := s.bucketEnvelopes(ctx, []int{shard}, []*redis.Cmd{cmd})
	items, nextDue, _, _, err = s.claimReply(ctx, cmd, envs[0], shard, instance, token, upTo)
	return items, nextDue, err
}

// claimKeys are claim.lua's keys: it promotes the cold tier's buckets (lua/includes/cold.lua),
// whose names it builds, so it declares the slot guard (slotguard.go).
func claimKeys(k shardKeys) []string {
	return withGuard(k, []string{k.due, k.msg, k.inflight, k.owner, k.counts, k.ix})
}

// claimArgs are claim.lua's arguments: the cold tier's promotion lead and budget, the
// byte budget (0: none), the bytes counted per message beyond its envelope
// (storeapi.MemOverhead), whether the first message is taken whatever its size, and
// whether the lease deadline identifies the claim (storeapi.ClaimRequest.Idempotent),
// and the caller's now (storeapi.ClaimRequest.Now; 0: not given).
func (s *Store) claimArgs(owner string, upTo, leaseDeadline int64, limit int, maxBytes int64, alone, idempotent bool, now int64) []any {
	return []any{owner, upTo, leaseDeadline, limit, s.opt.Cold.Lead.Milliseconds(), s.opt.Cold.Budget,
		maxBytes, storeapi.MemOverhead, boolArg(alone), boolArg(idempotent), now}
}

func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}

// claimReply reads the reply of one claim call (Claim, ClaimMany); replayed reports a
// claim sent again whose first run's reply was lost (claim.lua returned that run's
// messages again); need is the byte size of the first due message a byte budget left
// due (0: none).
// envs are the envelopes of the due buckets' ids the claim took, in their order
// (bucketEnvelopes).
func (s *Store) claimReply(ctx context.Context, cmd *redis.Cmd, envs bucketRead, shard int, instance string, token int64, upTo int64) (items []*envelope.Envelope, nextDue, need int64, replayed bool, err error) {
	if err := cmd.Err(); err != nil {
		if redis.HasErrorPrefix(err, "FENCED") {
			return nil, 0, 0, false, fmt.Errorf("%w: shard %d, %s: %v", ErrFenced, shard, OwnerValue(instance, token), err)
		}
		return nil, 0, 0, false, fmt.Errorf("scheduler: claim shard %d: %w", shard, redisErr(err))
	}
	vals, err := cmd.Slice()
	var k int64
	if err == nil && len(vals) >= 4 {
		k, _ = vals[3].(int64)
	}
	if err != nil || len(vals) < 4 || k < 0 || int64(len(vals)-4) < k || (int64(len(vals)-4)-k)%3 != 0 {
		return nil, 0, 0, false, fmt.Errorf("scheduler: claim shard %d: unexpected reply %v", shard, cmd.Val())
	}
	bucketed := vals[len(vals)-int(k):]
	vals = vals[: len(vals)-int(k) : len(vals)-int(k)] // appended to: never over bucketed
	need, _ = vals[2].(int64)
	nextDue, _ = vals[0].(int64)
	nextDue = nextDueOf(nextDue)
	dropped, _ := vals[1].(int64)
	replayed = dropped < 0
	for range max(dropped, 0) {
		s.obs.Invalid("", "missing_envelope")
	}
	items = make([]*envelope.Envelope, 0, (len(vals)-4)/3+len(bucketed))
	var corrupt, newer []retryEntry
	if len(bucketed) > 0 {
		// The due buckets' ids (lua/includes/bucket.lua): their envelopes are read here,
		// outside the script, each due at its DueAt (score 0 below).
		if vals, err = bucketTriples(shard, vals, bucketed, envs); err != nil {
			return nil, 0, 0, false, err
		}
	}
	for i := 4; i+2 < len(vals); i += 3 {
		id, _ := vals[i].(string)
		due := replyInt(vals[i+1])
		raw, _ := vals[i+2].(string)
		if raw == "" && due < 0 {
			continue // a bucketed id without an envelope: recovered once its lease ends
		}
		e, derr := envelope.DecodeString(raw, id) // no copy of the reply: the claim path's allocations
		if errors.Is(derr, envelope.ErrNewerVersion) {
			// Parked by a newer bridge during a rolling upgrade: put it back unchanged,
			// a little later, until an instance that reads it owns the shard.
			newer = append(newer, retryEntry{raw: raw, id: id, RetryItem: RetryItem{Due: upTo + newerVersionRetry.Milliseconds()}})
			continue
		}
		if derr != nil {
			corrupt = append(corrupt, retryEntry{raw: raw, id: id, RetryItem: RetryItem{Dead: true}})
			continue
		}
		// DueAt stays the message's due time (headers, lateness); the score may be
		// later (retry backoff) or earlier (recovered "now"): fire at the later one.
		// A score claim.lua did not read (due by the request's Now) is 0: DueAt.
		e.FireAt = max(due, e.DueAt)
		e.ClaimedFrom = shard + 1
		e.ClaimedBytes = int64(len(raw)) + storeapi.MemOverhead
		items = append(items, e)
	}
	if len(newer) > 0 {
		if err := s.retry1(ctx, shard, newer, upTo); err != nil {
			return items, nextDue, need, replayed, fmt.Errorf("scheduler: put back %d envelopes of a newer bridge version on shard %d: %w", len(newer), shard, err)
		}
		for range newer {
			s.obs.Invalid("", "newer_envelope_version")
		}
	}
	if len(corrupt) > 0 {
		// Keep the bytes for forensics; ListDead shows them as an envelope with a reason.
		// Claim is not told the time; upTo (now + lookahead) stands in as the dead time.
		if err := s.retry1(ctx, shard, corrupt, upTo); err != nil {
			return items, nextDue, need, replayed, fmt.Errorf("scheduler: dead-letter %d corrupt envelopes of shard %d: %w", len(corrupt), shard, err)
		}
		for range corrupt {
			s.obs.Invalid("", "corrupt_envelope")
		}
	}
	return items, nextDue, need, replayed, nil
}

// replyInt reads an integer a script returned as a number or as a sorted set score
// (claim.lua passes ZRANGEBYSCORE's score strings through); 0 when it is neither.
func replyInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
		f, _ := strconv.ParseFloat(v, 64)
		return int64(f)
	}
	return 0
}

// newerVersionRetry is how long an envelope this build cannot read (a newer bridge
// parked it) waits before this instance looks at it again, if it still owns the shard.
const newerVersionRetry = 5 * time.Second

// trimArgs are the done-window arguments shared by ack and cancel.
func (s *Store) trimArgs(now int64, batch int) (remember int, trimBefore int64, trimLimit int) {
	remember = 0
	if s.opt.DoneWindow > 0 {
		remember = 1
	}
	return remember, now - s.opt.DoneWindow.Milliseconds(), max(2*batch, minTrim)
}

// ackCalls builds the ack calls of shard's ids; routes, when not nil, are the routes of
// their messages (routes[i] of ids[i]), so the script need not read the envelopes.
func (s *Store) ackCalls(shard int, ids, routes []string, dues []int64, now int64) []call {
	k := s.keys[shard]
	var calls []call
	for start := 0; start < len(ids); start += maxItemsPerCall {
		end := min(start+maxItemsPerCall, len(ids))
		part := ids[start:end]
		remember, trimBefore, trimLimit := s.trimArgs(now, len(part))
		withRoutes := 0
		if routes != nil {
			withRoutes = 1
		}
		args := make([]any, 0, 10+2*len(part))
		args = append(args, now, remember, trimBefore, trimLimit, withRoutes)
		args = append(args, s.doneSliceMs(), 0)
		var covered []bool // ids whose fingerprint ack.lua needs only without the runs
		if remember == 1 {
			var n int
			args, n, covered = appendAckRuns(args, part, now)
			args[6] = n
		}
		if dues != nil {
			args = appendAckBuckets(args, dues[start:end])
		} else {
			args = append(args, 0)
		}
		args = append(args, len(part))
		for i := range part {
			args = append(args, &part[i]) // by pointer: no allocation per id
		}
		if routes != nil {
			args = appendRouteCounts(args, routes[start:end])
		}
		if remember == 1 {
			for i, id := range part {
				if covered == nil || !covered[i] {
					args = append(args, i+1, ackFingerprint(id))
				}
			}
		}
		keys := withGuard(k, []string{k.msg, k.inflight, k.counts, k.ix, k.dn, k.nx, k.due, k.ko, k.ki, k.dead})
		// ordered_ack: an acked head lets its key's next message be claimed.
		calls = append(calls, call{sc: s.oAck, keys: keys, args: args})
	}
	return calls
}

// appendRouteCounts appends how many of routes each distinct route is: their number,
// then route and count pairs, in the order first met.
func appendRouteCounts(args []any, routes []string) []any {
	type tally struct{ at, n int } // routes[at] is the route
	var ts []tally
	for i, r := range routes {
		j := slices.IndexFunc(ts, func(t tally) bool { return routes[t.at] == r })
		if j < 0 {
			j, ts = len(ts), append(ts, tally{at: i})
		}
		ts[j].n++
	}
	args = append(args, len(ts))
	for _, t := range ts {
		args = append(args, &routes[t.at], t.n)
	}
	return args
}

// Ack records that claimed messages of shard were published: they leave inflight and
// are remembered in done for the dedup window. Ids no longer in flight (recovered,
// cancelled, acked already) are ignored. Old done entries are trimmed on the way.
func (s *Store) Ack(ctx context.Context, shard int, ids []string, now int64) error {
	if _, err := s.shardKeys(shard); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	calls := s.ackCalls(shard, ids, nil, nil, now)
	if len(calls) == 1 {
		cmd := s.eval(ctx, calls[0].sc, calls[0].keys, calls[0].args...)
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("scheduler: ack: %w", err)
		}
		s.wakeFrom(ctx, []*redis.Cmd{cmd}, []int{shard}, 2)
		return nil
	}
	return s.runWaking(ctx, calls, repeatShard(shard, len(calls)), 2)
}

// runWaking runs calls (of shards[i]) in one round trip, then wakes the pumps of the
// key heads they promoted (element pos of each reply: wakeFrom).
func (s *Store) runWaking(ctx context.Context, calls []call, shards []int, pos int) error {
	cmds, err := s.evalPipelined(ctx, calls, false)
	s.wakeFrom(ctx, cmds, shards, pos)
	return err
}

func repeatShard(shard, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = shard
	}
	return out
}

// AckMany is Ack for ids of any shards, grouped by shard in one pipelined round trip.
func (s *Store) AckMany(ctx context.Context, ids []string, now int64) error {
	if len(ids) == 0 {
		return nil
	}
	byShard := make(map[int][]string)
	for _, id := range ids {
		sh := s.ShardOf(id)
		byShard[sh] = append(byShard[sh], id)
	}
	var calls []call
	var shards []int
	for sh, part := range byShard {
		c := s.ackCalls(sh, part, nil, nil, now)
		calls, shards = append(calls, c...), append(shards, repeatShard(sh, len(c))...)
	}
	return s.runWaking(ctx, calls, shards, 2)
}

// AckEnvelopes is AckMany for messages whose envelopes the caller holds (as claimed):
// their routes go with the ids, so the script does not read the envelopes to keep the
// per-route counts.
func (s *Store) AckEnvelopes(ctx context.Context, envs []*envelope.Envelope, now int64) error {
	if len(envs) == 0 {
		return nil
	}
	type part struct {
		envs        []*envelope.Envelope
		ids, routes []string
		dues        []int64
	}
	byShard := make(map[int]*part)
	for _, e := range envs {
		sh := s.ShardOfEnv(e)
		p := byShard[sh]
		if p == nil {
			p = &part{}
			byShard[sh] = p
		}
		p.envs = append(p.envs, e)
	}
	var calls []call
	var shards []int
	for sh, p := range byShard {
		if s.opt.Buckets {
			// by due bucket, so that each bucket's ids are consecutive (ack.lua)
			slices.SortStableFunc(p.envs, func(x, y *envelope.Envelope) int {
				return cmp.Compare(x.DueAt/bucketWidth, y.DueAt/bucketWidth)
			})
			p.dues = make([]int64, len(p.envs))
		}
		p.ids, p.routes = make([]string, len(p.envs)), make([]string, len(p.envs))
		for i, e := range p.envs {
			p.ids[i], p.routes[i] = e.ID, e.Route
			if p.dues != nil {
				p.dues[i] = e.DueAt
			}
		}
		c := s.ackCalls(sh, p.ids, p.routes, p.dues, now)
		calls, shards = append(calls, c...), append(shards, repeatShard(sh, len(c))...)
	}
	return s.runWaking(ctx, calls, shards, 2)
}

// retryEntry is a RetryItem, or (id and raw set by Claim, Env nil) bytes that do not
// decode, put back or dead-lettered unchanged.
type retryEntry struct {
	RetryItem
	id, raw string
}

func retryEntries(items []RetryItem) []retryEntry {
	out := make([]retryEntry, len(items))
	for i, it := range items {
		out[i].RetryItem = it
	}
	return out
}

// Retry puts failed claimed messages of shard back (see RetryItem). Messages no longer
// in flight are ignored. now is the dead-letter time.
func (s *Store) Retry(ctx context.Context, shard int, items []RetryItem, now int64) error {
	return s.retry1(ctx, shard, retryEntries(items), now)
}

func (s *Store) retry1(ctx context.Context, shard int, items []retryEntry, now int64) error {
	calls, err := s.retryCalls(shard, items, now)
	if err != nil {
		return err
	}
	switch len(calls) {
	case 0:
		return nil
	case 1:
		cmd := s.eval(ctx, s.retry, calls[0].keys, calls[0].args...)
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("scheduler: retry: %w", err)
		}
		s.wakeFrom(ctx, []*redis.Cmd{cmd}, []int{shard}, 2)
		return nil
	}
	return s.runWaking(ctx, calls, repeatShard(shard, len(calls)), 2)
}

// RetryMany is Retry for items of any shards (byShard: shard -> items), in one
// pipelined round trip instead of one per shard.
func (s *Store) RetryMany(ctx context.Context, byShard map[int][]RetryItem, now int64) error {
	var calls []call
	var shards []int
	for shard, items := range byShard {
		c, err := s.retryCalls(shard, retryEntries(items), now)
		if err != nil {
			return err
		}
		calls, shards = append(calls, c...), append(shards, repeatShard(shard, len(c))...)
	}
	if len(calls) == 0 {
		return nil
	}
	return s.runWaking(ctx, calls, shards, 2)
}

// retryCalls encodes items and builds the retry script calls of one shard (bounded
// batches).
func (s *Store) retryCalls(shard int, items []retryEntry, now int64) ([]call, error) {
	k, err := s.shardKeys(shard)
	if err != nil {
		return nil, err
	}
	enc := make([]encoded, len(items))
	for i, it := range items {
		if it.Env == nil {
			if it.id == "" {
				return nil, fmt.Errorf("%w: retry item %d has no envelope", ErrInvalid, i)
			}
			enc[i] = encoded{idx: i, shard: shard, data: []byte(it.raw)}
			continue
		}
		data, err := envelope.Encode(it.Env)
		if err != nil {
			return nil, fmt.Errorf("scheduler: encode envelope %q: %w", it.Env.ID, errors.Join(ErrInvalid, err))
		}
		enc[i] = encoded{idx: i, shard: shard, data: data}
	}
	var calls []call
	for _, ch := range chunk(enc) {
		args := make([]any, 0, 1+4*len(ch))
		args = append(args, now)
		for _, e := range ch {
			it := items[e.idx]
			id := it.id
			if it.Env != nil {
				id = it.Env.ID
			}
			dead := 0
			if it.Dead {
				dead = 1
			}
			args = append(args, id, it.Due, e.data, dead)
		}
		calls = append(calls, call{sc: s.retry, keys: withGuard(k, []string{k.due, k.msg, k.inflight, k.dead, k.counts, k.nx, k.ko, k.ki}), args: args})
	}
	return calls, nil
}

// Recover moves up to limit inflight messages of shard whose lease deadline is at or
// before now back to due at now, so they fire again; more reports that expired ones
// remain. It rescues claims that were neither acked nor retried in time.
func (s *Store) Recover(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error) {
	return s.recoverInflight(ctx, shard, now, limit, strconv.FormatInt(now, 10))
}

// RecoverAll moves up to limit inflight messages of shard back to due at now whatever
// their deadline; more reports that some remain. A new shard owner calls it until more
// is false before its first claim: the previous owner's lease expired (or it released
// the shard), so whatever it left in flight is fired again at once instead of after
// the inflight lease (at-least-once; duplicates only around a failover). Messages are
// not fired early as long as scheduler.lookahead is shorter than the shard lease TTL:
// a claim is at most lookahead early, and a dead owner's lease takes the TTL to expire.
func (s *Store) RecoverAll(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error) {
	return s.recoverInflight(ctx, shard, now, limit, "+inf")
}

func (s *Store) recoverInflight(ctx context.Context, shard int, now int64, limit int, cutoff string) (int, bool, error) {
	k, err := s.shardKeys(shard)
	if err != nil {
		return 0, false, err
	}
	if limit <= 0 {
		return 0, false, fmt.Errorf("%w: recover limit %d", ErrInvalid, limit)
	}
	cmd := s.eval(ctx, s.recover, withGuard(k, []string{k.due, k.inflight, k.msg, k.counts, k.nx, k.ko, k.ki}), now, limit, cutoff)
	res, err := cmd.Int64Slice()
	if err != nil {
		return 0, false, fmt.Errorf("scheduler: recover shard %d: %w", shard, err)
	}
	s.wakeFrom(ctx, []*redis.Cmd{cmd}, []int{shard}, 2)
	if len(res) != 3 {
		return 0, false, fmt.Errorf("scheduler: recover shard %d: unexpected reply %v", shard, res)
	}
	return int(res[0]), res[1] == 1, nil
}
