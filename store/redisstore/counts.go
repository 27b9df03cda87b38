package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Per-route counts. Every script that moves a message changes P:{C:n}:counts in the
// same call: "<state>:<route>" -> messages of that route in that state (pending,
// inflight, dead), so reading them costs one HGETALL per shard, never a scan. The
// route is read from the envelope inside the script (its first bytes: version, flags,
// then the route; lua/includes/envelope.lua).

// RouteCounts reads every shard's counts in one pipelined round trip (one HGETALL per
// shard: O(routes) each).
func (s *Store) RouteCounts(ctx context.Context) (Counts, error) {
	cmds := make([]*redis.MapStringStringCmd, len(s.keys))
	key := func(sh int) string { return s.keys[sh].counts }
	if err := s.pipelined(ctx, "route counts", len(s.keys), key, func(pipe redis.Pipeliner, sh int) {
		cmds[sh] = pipe.HGetAll(ctx, key(sh))
	}); err != nil {
		return Counts{}, fmt.Errorf("scheduler: route counts: %w", redisErr(err))
	}
	out := Counts{Shards: make([]ShardCounts, len(s.keys))}
	for i, c := range cmds {
		out.Shards[i] = parseCounts(i, c.Val())
	}
	return out, nil
}

func parseCounts(shard int, m map[string]string) ShardCounts {
	sc := ShardCounts{Shard: shard, Routes: map[string]RouteCount{}}
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
