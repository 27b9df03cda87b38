package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Per-route counts. Every script that moves a message changes P:{C:n}:counts in the
// same call: "<state>:<route>" -> messages of that route in that state (pending,
// inflight, dead), so reading them costs one HGETALL per shard, never a scan. The
// route is read from the envelope inside the script (its first bytes: version, flags,
// then the route; lua/counts.lua). A store written by a bridge without counts is
// counted by BackfillCounts in bounded steps; until every shard is done the counts are
// reported as not exact.

var countsBackfillScript = newScript("counts_backfill", "counts_backfill")

// RouteCounts reads every shard's counts in one pipelined round trip (one HGETALL per
// shard: O(routes) each).
func (s *Store) RouteCounts(ctx context.Context) (Counts, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(s.keys))
	for i, k := range s.keys {
		cmds[i] = pipe.HGetAll(ctx, k.counts)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Counts{}, fmt.Errorf("scheduler: route counts: %w", redisErr(err))
	}
	out := Counts{Shards: make([]ShardCounts, len(s.keys))}
	for i, c := range cmds {
		out.Shards[i] = parseCounts(i, c.Val())
	}
	return out, nil
}

func parseCounts(shard int, m map[string]string) ShardCounts {
	sc := ShardCounts{Shard: shard, Routes: map[string]RouteCount{}, Exact: m["~exact"] != ""}
	for f, v := range m {
		state, route, ok := strings.Cut(f, ":")
		if !ok || strings.HasPrefix(f, "~") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n == 0 {
			continue
		}
		rc := sc.Routes[route]
		switch State(state) {
		case StatePending:
			rc.Pending += n
		case StateInflight:
			rc.Inflight += n
		case StateDead:
			rc.Dead += n
		default:
			continue
		}
		sc.Routes[route] = rc
	}
	for r, rc := range sc.Routes {
		if rc == (RouteCount{}) {
			delete(sc.Routes, r)
		}
	}
	return sc
}

// countsExact remembers the shards known to be counted exactly (it never goes back),
// so BackfillCounts skips them.
type countsExact struct{ shards []atomic.Bool }

// BackfillCounts does one bounded step of counting, for every shard whose counts are
// not known exact yet: each counts at most limit messages in one script call (all in
// one pipelined round trip). It returns whether every shard is now exact and how many
// messages this step counted. Call it until it reports exact, pausing between steps;
// it is resumable (the progress is in Redis) and safe to run from several instances
// at once and while messages move (lua/counts.lua).
func (s *Store) BackfillCounts(ctx context.Context, limit int) (exact bool, counted int, err error) {
	if limit <= 0 {
		return false, 0, fmt.Errorf("%w: backfill limit %d", ErrInvalid, limit)
	}
	var calls []call
	var shards []int
	for i, k := range s.keys {
		if s.exact.shards[i].Load() {
			continue
		}
		calls = append(calls, call{sc: countsBackfillScript, keys: withGuard(k, []string{k.due, k.msg, k.inflight, k.dead, k.counts}), args: []any{limit}})
		shards = append(shards, i)
	}
	if len(calls) == 0 {
		return true, 0, nil
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return false, 0, fmt.Errorf("scheduler: backfill counts: %w", err)
	}
	exact = true
	for j, cmd := range cmds {
		res, err := cmd.Int64Slice()
		if err != nil || len(res) != 2 {
			return false, counted, fmt.Errorf("scheduler: backfill counts: unexpected reply %v (%v)", cmd.Val(), err)
		}
		counted += int(res[1])
		if res[0] == 1 {
			s.exact.shards[shards[j]].Store(true)
		} else {
			exact = false
		}
	}
	return exact, counted, nil
}
