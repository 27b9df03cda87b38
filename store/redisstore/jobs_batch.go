package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// The by-id operations of cancel, reschedule and requeue, applied to a batch of
// messages a bulk job browsed: one pipelined read of every message, then one pipelined
// round of the same scripts the single-id operations run, each guarded by what was read
// (the envelope's SHA-1 for cancel, the score for the others), so a message that
// changed in between is left alone (reported as its new state) and a batch applied
// twice changes nothing the second time.

var purgeDeadIDsScript = newScript("purge_dead_ids", "purge_dead_ids")

type rawState struct {
	shard int // the shard that holds it (locateMany)
	state State
	score int64
	raw   []byte
}

// getMany is getRaw for many ids in one pipelined round trip.
func (s *Store) getMany(ctx context.Context, ids []string) ([]rawState, error) {
	shards, err := s.locateMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	calls := make([]call, len(ids))
	for i, id := range ids {
		calls[i] = s.getCall(shards[i], id)
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return nil, fmt.Errorf("scheduler: batch read: %w", err)
	}
	out := make([]rawState, len(ids))
	for i, cmd := range cmds {
		vals, err := cmd.Slice()
		if err != nil || len(vals) == 0 {
			return nil, fmt.Errorf("scheduler: batch read %q: unexpected reply %v (%v)", ids[i], vals, err)
		}
		st, _ := vals[0].(string)
		out[i].state, out[i].shard = State(st), shards[i]
		if len(vals) > 1 {
			out[i].score, _ = vals[1].(int64)
		}
		if len(vals) > 2 {
			raw, _ := vals[2].(string)
			out[i].raw = []byte(raw)
		}
	}
	return out, nil
}

// CancelBatch cancels the messages of items (as Cancel without a route scope) that
// still match q's route and key filters, and returns one result per item: Prior
// pending, inflight or dead means it was cancelled now (an inflight one must still be
// dropped from the wheel that holds it: PublishCancel); anything else means it was
// left alone (gone, or no longer matching: StateUnknown).
func (s *Store) CancelBatch(ctx context.Context, items []BatchItem, q BrowseQuery, now int64) ([]BatchResult, error) {
	res := make([]BatchResult, len(items))
	todo := make([]int, len(items))
	for i := range todo {
		todo[i] = i
	}
	remember, trimBefore, trimLimit := s.trimArgs(now, 1)
	for round := 0; len(todo) > 0; round++ {
		if round == 5 {
			for _, i := range todo {
				res[i].Err = fmt.Errorf("scheduler: cancel %q: message kept changing", items[i].ID)
			}
			break
		}
		ids := make([]string, len(todo))
		for j, i := range todo {
			ids[j] = items[i].ID
		}
		got, err := s.getMany(ctx, ids)
		if err != nil {
			return nil, err
		}
		var calls []call
		var callIdx []int
		for j, i := range todo {
			g := got[j]
			res[i].Prior = g.state
			if g.raw == nil {
				continue // delivered, cancelled, unknown: nothing to do
			}
			sum := sha1.Sum(g.raw)
			if e, derr := envelope.Decode(g.raw, items[i].ID); derr == nil {
				if !matches(q, e) {
					res[i].Prior = StateUnknown
					continue
				}
				res[i].Route = e.Route
			} else if q.Route != "" || q.KeyPrefix != "" {
				res[i].Prior = StateUnknown // unreadable: cannot tell whether it matches
				continue
			}
			calls = append(calls, s.cancelCall(g.shard, items[i].ID, now, remember, trimBefore, trimLimit, res[i].Route,
				hex.EncodeToString(sum[:]), 0))
			callIdx = append(callIdx, i)
		}
		cmds, err := s.evalPipelined(ctx, calls, false)
		if err != nil {
			return nil, fmt.Errorf("scheduler: batch cancel: %w", err)
		}
		todo = todo[:0]
		for j, cmd := range cmds {
			v := cmd.Val()
			if v == "stale" {
				todo = append(todo, callIdx[j])
				continue
			}
			str, _ := v.(string)
			res[callIdx[j]].Prior = State(str)
		}
	}
	return res, nil
}

// RescheduleBatch moves each pending message of items that is still due at the score
// it was seen at to its new due time (the envelope's DueAt rewritten, as Reschedule
// does). Prior StatePending means moved; anything else, or a pending message now due at
// another time (moved by someone else, or by an earlier run of the same batch), is
// left alone.
func (s *Store) RescheduleBatch(ctx context.Context, items []RescheduleItem) ([]BatchResult, error) {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return s.rewriteBatch(ctx, ids, func(i int, g rawState, e *envelope.Envelope) (bool, int64) {
		if g.state != StatePending || g.score != items[i].Score {
			return false, 0
		}
		e.DueAt = items[i].Due
		return true, items[i].Due
	})
}

// RequeueDeadBatch moves each dead letter of items still dead-lettered at the score it
// was seen at back to pending at due, reason cleared and attempts reset (as
// RequeueDead). Prior StateDead means requeued.
func (s *Store) RequeueDeadBatch(ctx context.Context, items []BatchItem, due int64) ([]BatchResult, error) {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return s.rewriteBatch(ctx, ids, func(i int, g rawState, e *envelope.Envelope) (bool, int64) {
		if g.state != StateDead || g.score != items[i].Score {
			return false, 0
		}
		if e != nil {
			e.Reason, e.Attempt, e.DueAt = "", 0, due
		}
		return true, due
	})
}

// rewriteBatch runs the reschedule script for the items change accepts (it may edit
// the decoded envelope, nil when it does not decode, and returns the new score), each
// guarded by the score read.
func (s *Store) rewriteBatch(ctx context.Context, ids []string, change func(i int, g rawState, e *envelope.Envelope) (bool, int64)) ([]BatchResult, error) {
	res := make([]BatchResult, len(ids))
	got, err := s.getMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	var calls []call
	var callIdx []int
	for i, g := range got {
		res[i].Prior = g.state
		var e *envelope.Envelope
		if g.raw != nil {
			if d, derr := envelope.Decode(g.raw, ids[i]); derr == nil {
				e, res[i].Route = d, d.Route
			}
		}
		ok, due := change(i, g, e)
		if !ok {
			res[i].Prior = leftAlone(g.state)
			continue
		}
		var rest []any
		if e != nil {
			data, err := envelope.Encode(e)
			if err != nil {
				res[i].Err = fmt.Errorf("scheduler: encode envelope %q: %w", ids[i], errors.Join(ErrInvalid, err))
				continue
			}
			rest = []any{data, g.score}
		} else if g.state == StatePending {
			res[i].Err = fmt.Errorf("scheduler: reschedule %q: %w", ids[i], envelope.ErrCorrupt)
			continue
		}
		calls = append(calls, s.rescheduleCall(g.shard, ids[i], due, s.queueOf(g.shard, e), rest...))
		callIdx = append(callIdx, i)
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return nil, fmt.Errorf("scheduler: batch reschedule: %w", err)
	}
	for j, cmd := range cmds {
		str, _ := cmd.Val().(string)
		res[callIdx[j]].Prior = leftAlone(State(str)) // "stale" (changed meanwhile) reads as left alone
		if str == "ordered" {
			res[callIdx[j]].Prior = StateUnknown
			res[callIdx[j]].Err = fmt.Errorf("%w: %q", ErrOrdered, ids[callIdx[j]])
			continue
		}
		if str == string(StatePending) || str == string(StateDead) {
			res[callIdx[j]].Prior = State(str)
		}
	}
	return res, nil
}

// leftAlone is the Prior reported for a message a batch did not change: its state,
// except that pending and dead (which mean "changed") read as StateUnknown.
func leftAlone(st State) State {
	if st == StatePending || st == StateDead || st == "stale" {
		return StateUnknown
	}
	return st
}

// PurgeDeadBatch deletes each dead letter of items still dead-lettered at the score it
// was seen at (not remembered in done, as PurgeDead). One flag per item: deleted.
func (s *Store) PurgeDeadBatch(ctx context.Context, items []BatchItem) ([]bool, error) {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	where, err := s.locateMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	byShard := map[int][]int{}
	for i := range items {
		byShard[where[i]] = append(byShard[where[i]], i)
	}
	var calls []call
	var idx [][]int
	for sh, is := range byShard {
		for start := 0; start < len(is); start += maxItemsPerCall {
			part := is[start:min(start+maxItemsPerCall, len(is))]
			args := make([]any, 0, 2*len(part))
			for _, i := range part {
				args = append(args, items[i].ID, items[i].Score)
			}
			calls = append(calls, call{sc: purgeDeadIDsScript, keys: []string{s.keys[sh].dead, s.keys[sh].msg, s.keys[sh].counts}, args: args})
			idx = append(idx, part)
		}
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return nil, fmt.Errorf("scheduler: batch purge: %w", err)
	}
	out := make([]bool, len(items))
	for j, cmd := range cmds {
		flags, err := cmd.Int64Slice()
		if err != nil || len(flags) != len(idx[j]) {
			return nil, fmt.Errorf("scheduler: batch purge: unexpected reply %v (%v)", cmd.Val(), err)
		}
		for k, i := range idx[j] {
			out[i] = flags[k] == 1
		}
	}
	return out, nil
}

// CountRange counts the messages in state st with a score in [from, to] (0 =
// unbounded) over all shards: one pipelined ZCOUNT per shard, O(log n) each.
func (s *Store) CountRange(ctx context.Context, st State, from, to int64) (int64, error) {
	q := BrowseQuery{State: st, From: from, To: to}
	if err := q.Normalize(); err != nil {
		return 0, err
	}
	if q.State != StateDead {
		if err := s.flushBuckets(ctx); err != nil {
			return 0, err
		}
	}
	cmds := make([]*redis.IntCmd, len(s.keys))
	key := func(sh int) string { return s.setKey(q.State, sh) }
	if err := s.pipelined(ctx, "count", len(s.keys), key, func(pipe redis.Pipeliner, sh int) {
		cmds[sh] = pipe.ZCount(ctx, key(sh), strconv.FormatInt(q.From, 10), strconv.FormatInt(q.To, 10))
	}); err != nil {
		return 0, fmt.Errorf("scheduler: count: %w", redisErr(err))
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	if q.State == StatePending {
		cold, err := s.coldCounts(ctx, q.From, q.To)
		if err != nil {
			return 0, err
		}
		for _, c := range cold {
			n += c
		}
	}
	return n, nil
}

// EdgeScore returns the lowest (or, with highest, the highest) score in [from, to] (0
// = unbounded) of state st over all shards; ok is false when there is none. One
// pipelined ZRANGE BYSCORE LIMIT 1 per shard.
func (s *Store) EdgeScore(ctx context.Context, st State, from, to int64, highest bool) (int64, bool, error) {
	q := BrowseQuery{State: st, From: from, To: to}
	if err := q.Normalize(); err != nil {
		return 0, false, err
	}
	if q.State != StateDead {
		if err := s.flushBuckets(ctx); err != nil {
			return 0, false, err
		}
	}
	lo, hi := strconv.FormatInt(q.From, 10), strconv.FormatInt(q.To, 10)
	if highest {
		lo, hi = hi, lo // ZRANGE ... BYSCORE REV takes the range from max to min
	}
	cmds := make([]*redis.ZSliceCmd, len(s.keys))
	key := func(sh int) string { return s.setKey(q.State, sh) }
	if err := s.pipelined(ctx, "edge score", len(s.keys), key, func(pipe redis.Pipeliner, sh int) {
		cmds[sh] = pipe.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: key(sh), Start: lo, Stop: hi,
			ByScore: true, Rev: highest, Count: 1})
	}); err != nil {
		return 0, false, fmt.Errorf("scheduler: edge score: %w", redisErr(err))
	}
	best, ok := int64(math.MaxInt64), false
	if highest {
		best = math.MinInt64
	}
	for _, c := range cmds {
		for _, z := range c.Val() {
			v := int64(z.Score)
			if !ok || (highest && v > best) || (!highest && v < best) {
				best, ok = v, true
			}
		}
	}
	if q.State == StatePending {
		v, found, err := s.coldEdge(ctx, q.From, q.To, highest)
		if err != nil {
			return 0, false, err
		}
		if found && (!ok || (highest && v > best) || (!highest && v < best)) {
			best, ok = v, true
		}
	}
	return best, ok, nil
}
