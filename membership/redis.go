package membership

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/lua"
)

// Redis is the membership of one bridge cluster in Redis: the members sorted set and
// leases on any LeaseKey, with the same three scripts (lua/lease_*.lua) the shard store
// runs on its shards' owner keys. It is safe for concurrent use. Errors are wrapped
// go-redis errors; callers retry in their next round.
type Redis struct {
	rdb             redis.UniversalClient
	prefix, cluster string
	members         string
	acq, renew, rel *redis.Script
}

// New returns the membership of cluster under prefix on rdb. It calls nothing.
func New(rdb redis.UniversalClient, prefix, cluster string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, cluster: cluster, members: MembersKey(prefix, cluster),
		acq: redis.NewScript(lua.LeaseAcquire), renew: redis.NewScript(lua.LeaseRenew), rel: redis.NewScript(lua.LeaseRelease)}
}

// PartitionLease is the lease key of partition of topic on route (see PartitionLease).
func (r *Redis) PartitionLease(route, topic string, partition int) LeaseKey {
	return PartitionLease(r.prefix, r.cluster, route, topic, partition)
}

// Heartbeat records that instance is alive at now (unix ms).
func (r *Redis) Heartbeat(ctx context.Context, instance string, now int64) error {
	if err := CheckInstance(instance); err != nil {
		return err
	}
	if err := r.rdb.ZAdd(ctx, r.members, heartbeatZ(instance, now)).Err(); err != nil {
		return fmt.Errorf("membership: heartbeat: %w", err)
	}
	return nil
}

// Live returns, sorted by name, the instances whose last heartbeat is within maxAge of
// now, with that heartbeat, so a caller can tell when the next one ages out (Heartbeat
// + maxAge). Entries ten times older than maxAge are deleted on the way, so instances
// that went away without Leave (a crashed pod with a generated name) do not pile up,
// while one with a lagging clock is not evicted by the next reader.
func (r *Redis) Live(ctx context.Context, now int64, maxAge time.Duration) ([]Member, error) {
	pipe := r.rdb.Pipeline()
	live := r.liveIn(ctx, pipe, now, maxAge)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("membership: members: %w", err)
	}
	return live(), nil
}

// Leave removes instance from the members at once (graceful shutdown).
func (r *Redis) Leave(ctx context.Context, instance string) error {
	if err := r.rdb.ZRem(ctx, r.members, instance).Err(); err != nil {
		return fmt.Errorf("membership: leave: %w", err)
	}
	return nil
}

// liveIn queues Live's reads on pipe; the function it returns gives Live's result once
// pipe has run without error.
func (r *Redis) liveIn(ctx context.Context, pipe redis.Pipeliner, now int64, maxAge time.Duration) func() []Member {
	age := maxAge.Milliseconds()
	pipe.ZRemRangeByScore(ctx, r.members, "-inf", "("+strconv.FormatInt(now-10*age, 10))
	live := pipe.ZRangeByScoreWithScores(ctx, r.members, &redis.ZRangeBy{Min: strconv.FormatInt(now-age, 10), Max: "+inf"})
	return func() []Member {
		out := make([]Member, 0, len(live.Val()))
		for _, z := range live.Val() {
			name, _ := z.Member.(string)
			out = append(out, Member{Name: name, Heartbeat: int64(z.Score)})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return out
	}
}

func heartbeatZ(instance string, now int64) redis.Z {
	return redis.Z{Score: float64(now), Member: instance}
}

// Acquire tries to take every lease of keys for holder for ttl, in one pipelined round
// trip: tokens[i] is the fencing token for keys[i] (tokens only grow), 0 where another
// holder has it. A holder that already holds a lease keeps its token (TTL renewed). On
// error the results are not meaningful (leases taken by a call whose reply was lost
// expire after ttl).
func (r *Redis) Acquire(ctx context.Context, keys []LeaseKey, holder string, ttl time.Duration) ([]int64, error) {
	if err := CheckInstance(holder); err != nil {
		return nil, err
	}
	ms, err := LeaseTTLMs(ttl)
	if err != nil {
		return nil, err
	}
	calls := make([]evalCall, len(keys))
	for i, k := range keys {
		calls[i] = evalCall{keys: []string{k.Owner, k.Fence}, args: []any{holder, ms}}
	}
	cmds, err := r.evalAll(ctx, r.acq, calls)
	tokens := make([]int64, len(keys))
	if err != nil {
		return tokens, fmt.Errorf("membership: acquire leases: %w", err)
	}
	for i, c := range cmds {
		tokens[i], _ = c.Int64()
	}
	return tokens, nil
}

// Renew extends every lease of held for ttl where holder still holds it with its
// token, in one round trip, and reports per lease whether it is still held: false means
// the lease expired or another holder took it (fenced: stop working it). On error the
// results are not meaningful.
func (r *Redis) Renew(ctx context.Context, holder string, held []Held, ttl time.Duration) ([]bool, error) {
	ms, err := LeaseTTLMs(ttl)
	if err != nil {
		return nil, err
	}
	calls := make([]evalCall, len(held))
	for i, h := range held {
		calls[i] = evalCall{keys: []string{h.Key.Owner}, args: []any{OwnerValue(holder, h.Token), ms}}
	}
	cmds, err := r.evalAll(ctx, r.renew, calls)
	out := make([]bool, len(held))
	if err != nil {
		return out, fmt.Errorf("membership: renew leases: %w", err)
	}
	for i, c := range cmds {
		out[i] = c.Val() == int64(1)
	}
	return out, nil
}

// Release gives a lease up if holder still holds it with its token (a late release
// never frees a lease someone else has taken since).
func (r *Redis) Release(ctx context.Context, holder string, h Held) error {
	if _, err := r.evalAll(ctx, r.rel, []evalCall{{keys: []string{h.Key.Owner}, args: []any{OwnerValue(holder, h.Token)}}}); err != nil {
		return fmt.Errorf("membership: release lease %s: %w", h.Key.Owner, err)
	}
	return nil
}

type evalCall struct {
	keys []string
	args []any
}

// evalAll runs sc once per call in one pipeline (EVALSHA; the calls that met NOSCRIPT,
// after a Redis restart or SCRIPT FLUSH, did nothing and go again with EVAL).
func (r *Redis) evalAll(ctx context.Context, sc *redis.Script, calls []evalCall) ([]*redis.Cmd, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	pipe := r.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = sc.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	var redo []int
	for i, c := range cmds {
		if err := c.Err(); err != nil && isNoScript(err) {
			redo = append(redo, i)
		}
	}
	if len(redo) > 0 {
		pipe := r.rdb.Pipeline()
		for _, i := range redo {
			cmds[i] = sc.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return cmds, err
		}
	}
	return cmds, nil
}

func isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}
