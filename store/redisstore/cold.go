package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The cold tier (lua/includes/cold.lua): pending messages due at least Options.Cold.Horizon
// ahead are parked as elements of a LIST per due-time bucket, with their place in the
// id index, instead of as members of due and fields of msg. A shard's owner promotes a
// bucket into due and msg when its claims come within Options.Cold.Lead of it
// (claim.lua), so claim, ack, retry and recover see ordinary pending messages. By-id
// operations find cold messages through the index (get, cancel, reschedule, replace,
// park's duplicate check, bury); this file reads the tier for browse, counts and
// stats. docs/ARCHITECTURE.md "Cold tier" has the reasons and the figures.

// coldMax bounds the due times the cold tier is asked about: Lua reads numbers as
// doubles, and no message is due near math.MaxInt64 (the cold tier holds real due
// times; the gated scores of per-key order, 2^52 and up, are never cold).
const coldMax = int64(1) << 52

func coldTo(to int64) int64 { return min(to, coldMax) }

// coldKeys are the keys of the shard's cold tier as named in lua/includes/cold.lua.
func (k shardKeys) coldBuckets() string { return k.due[:len(k.due)-len("due")] + "cb" }
func (k shardKeys) coldState() string   { return k.due[:len(k.due)-len("due")] + "cw" }

// coldPageCall reads up to per pending messages of shard sh's cold tier after cur and
// due at or before to: { id, due, envelope, ... } in (due, id) order.
func (s *Store) coldPageCall(sh int, cur position, to int64, per int) call {
	k := s.keys[sh]
	return call{sc: s.coldRead, keys: withGuard(k, []string{k.due}), args: []any{"page", cur.score, coldTo(to), cur.id, per}}
}

// coldCounts returns, per shard, the number of cold messages due in [from, to].
func (s *Store) coldCounts(ctx context.Context, from, to int64) ([]int64, error) {
	calls := make([]call, len(s.keys))
	for sh, k := range s.keys {
		calls[sh] = call{sc: s.coldRead, keys: withGuard(k, []string{k.due}), args: []any{"count", from, coldTo(to)}}
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return nil, fmt.Errorf("scheduler: count the cold tier: %w", err)
	}
	out := make([]int64, len(cmds))
	for sh, c := range cmds {
		if out[sh], err = c.Int64(); err != nil {
			return nil, fmt.Errorf("scheduler: count the cold tier of shard %d: %w", sh, redisErr(err))
		}
	}
	return out, nil
}

// coldEdge returns the lowest (or highest) due time in [from, to] in every shard's cold
// tier; ok is false when there is none.
func (s *Store) coldEdge(ctx context.Context, from, to int64, highest bool) (int64, bool, error) {
	hi := "0"
	if highest {
		hi = "1"
	}
	calls := make([]call, len(s.keys))
	for sh, k := range s.keys {
		calls[sh] = call{sc: s.coldRead, keys: withGuard(k, []string{k.due}), args: []any{"edge", from, coldTo(to), hi}}
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return 0, false, fmt.Errorf("scheduler: edge of the cold tier: %w", err)
	}
	var best int64
	found := false
	for sh, c := range cmds {
		vals, err := c.Int64Slice()
		if err != nil {
			return 0, false, fmt.Errorf("scheduler: edge of the cold tier of shard %d: %w", sh, redisErr(err))
		}
		if len(vals) == 1 && (!found || (highest && vals[0] > best) || (!highest && vals[0] < best)) {
			best, found = vals[0], true
		}
	}
	return best, found, nil
}

// coldStat is what ShardStats adds for a shard's cold tier.
type coldStat struct {
	n    *redis.StringCmd
	head *redis.ZSliceCmd
}

func (s *Store) coldStatCmds(ctx context.Context, pipe redis.Pipeliner, k shardKeys) coldStat {
	return coldStat{n: pipe.HGet(ctx, k.coldState(), "n"), head: pipe.ZRangeWithScores(ctx, k.coldBuckets(), 0, 0)}
}

// add counts the cold messages into st and lowers its NextDue to the cold tier's
// earliest due time (or earlier: a cancel does not raise a bucket's score).
func (c coldStat) add(st *ShardStat) {
	if n, err := strconv.ParseInt(c.n.Val(), 10, 64); err == nil || errors.Is(c.n.Err(), redis.Nil) {
		st.Pending += n
	}
	if h := c.head.Val(); len(h) > 0 && (st.NextDue < 0 || int64(h[0].Score) < st.NextDue) {
		st.NextDue = int64(h[0].Score)
	}
}
