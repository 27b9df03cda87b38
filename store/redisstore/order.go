package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Strict per-key order (storeapi/order.go, lua/includes/order.lua): where a message lives, and
// the wake-ups after a key's next message became claimable.

// ShardOfEnv is the shard of e: the one it was claimed from, else the shard of its
// ordering key on an ordered route, else ShardOf(e.ID).
func (s *Store) ShardOfEnv(e *envelope.Envelope) int {
	if e.ClaimedFrom > 0 {
		return e.ClaimedFrom - 1
	}
	return s.ord.ShardOf(e, s.opt.Shards)
}

// keyQueue is the queue of route's key in shard (lua/includes/order.lua: kz).
func (s *Store) keyQueue(shard int, route, key string) string {
	return s.keys[shard].ko + ":" + route + "\x00" + key
}

// queueOf is e's key queue in shard, or the shard's ko (no key: order.lua's "none").
func (s *Store) queueOf(shard int, e *envelope.Envelope) string {
	if e != nil {
		if k := s.ord.Key(e); k != "" {
			return s.keyQueue(shard, e.Route, k)
		}
	}
	return s.keys[shard].ko
}

// wakeFrom publishes, per shard, the earliest due time of the heads the calls
// promoted (element pos of each reply, -1 for none), so the owner's pump claims them
// now rather than at its next scan. A lost wake-up only delays (pumps scan).
func (s *Store) wakeFrom(ctx context.Context, cmds []*redis.Cmd, shards []int, pos int) {
	woke := map[int]int64{}
	for i, cmd := range cmds {
		if cmd == nil || cmd.Err() != nil {
			continue
		}
		vals, err := cmd.Int64Slice()
		if err != nil || len(vals) <= pos || vals[pos] < 0 {
			continue
		}
		if old, ok := woke[shards[i]]; !ok || vals[pos] < old {
			woke[shards[i]] = vals[pos]
		}
	}
	if len(woke) > 0 {
		_ = s.PublishWake(ctx, woke)
	}
}

// locate is the shard holding id's envelope (pending, in flight or dead): ShardOf(id),
// or with ordered routes, whichever shard has it (a message of an ordered key lives in
// its key's shard, which its id does not tell); ShardOf(id) when none has it.
func (s *Store) locate(ctx context.Context, id string) (int, error) {
	sh, err := s.locateMany(ctx, []string{id})
	if err != nil {
		return 0, err
	}
	return sh[0], nil
}

// locateMany is locate for many ids in one pipelined round trip (every shard is asked
// about every id not in its own id's shard: admin and bulk-job calls only).
func (s *Store) locateMany(ctx context.Context, ids []string) ([]int, error) {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = s.ShardOf(id)
	}
	if len(s.ord) == 0 || len(ids) == 0 {
		return out, nil
	}
	// One HEXISTS per id and shard: the k-th is id k / shards in shard k % shards.
	cmds := make([][]*redis.BoolCmd, len(ids))
	for i := range ids {
		cmds[i] = make([]*redis.BoolCmd, s.opt.Shards)
	}
	n, key := len(ids)*s.opt.Shards, func(k int) string { return s.keys[k%s.opt.Shards].msg }
	if err := s.pipelined(ctx, "locate messages", n, key, func(pipe redis.Pipeliner, k int) {
		cmds[k/s.opt.Shards][k%s.opt.Shards] = pipe.HExists(ctx, key(k), ids[k/s.opt.Shards])
	}); err != nil {
		return nil, fmt.Errorf("scheduler: locate messages: %w", redisErr(err))
	}
	for i := range ids {
		if cmds[i][out[i]].Val() {
			continue
		}
		for sh, c := range cmds[i] {
			if c.Val() {
				out[i] = sh
				break
			}
		}
	}
	return out, nil
}

// nextDueOf maps Claim's nextDue: a gated score (only messages waiting behind their
// key's in-flight head are left) is none claimable, -1.
func nextDueOf(score int64) int64 {
	if score >= storeapi.GateBase {
		return -1
	}
	return score
}

// anyOrdered reports whether a message of ch has an ordering key.
func (s *Store) anyOrdered(envs []*envelope.Envelope, ch []encoded) bool {
	if len(s.ord) == 0 {
		return false
	}
	for _, it := range ch {
		if s.ord.Key(envs[it.idx]) != "" {
			return true
		}
	}
	return false
}

// initOrdered sets the ordered routes and the ordered_* scripts, which keep the names
// of the scripts they wrap (metrics labels). retry and recover are always wrapped.
func (s *Store) initOrdered() {
	s.ord = storeapi.NewOrdering(s.opt.Ordered)
	s.retry, s.recover = newScript("retry", "ordered_retry"), newScript("recover", "ordered_recover")
	s.oPark, s.oAck = newScript("park", "ordered_park"), newScript("ack", "ordered_ack")
	s.oCancel, s.oReschedule = newScript("cancel", "ordered_cancel"), newScript("reschedule", "ordered_reschedule")
	s.oReplace = newScript("replace", "ordered_replace")
}

// KeyMessages returns what is pending or in flight for route's key, in the key's order
// (its queue: due time, then receive sequence), each as Get reports it.
func (s *Store) KeyMessages(ctx context.Context, route, key string) ([]storeapi.KeyMessage, error) {
	if !s.ord[route] || key == "" {
		return nil, nil
	}
	sh := storeapi.ShardOfKey(route, key, s.opt.Shards)
	kz := s.keyQueue(sh, route, key)
	var members *redis.StringSliceCmd
	var head *redis.StringCmd
	if err := s.pipelined(ctx, "read key", 1, func(int) string { return kz }, func(pipe redis.Pipeliner, _ int) {
		members = pipe.ZRange(ctx, kz, 0, -1) // the key's queue and ko share the shard's slot
		head = pipe.HGet(ctx, s.keys[sh].ko, kz)
	}); err != nil {
		return nil, fmt.Errorf("scheduler: read key %q of route %q: %w", key, route, redisErr(err))
	}
	headID := strings.TrimPrefix(head.Val(), "!")
	var out []storeapi.KeyMessage
	for _, m := range members.Val() {
		_, id, ok := strings.Cut(m, "|")
		if !ok {
			continue
		}
		c := s.getCall(sh, id)
		vals, err := s.eval(ctx, c.sc, c.keys, c.args...).Slice()
		if err != nil {
			return nil, fmt.Errorf("scheduler: read key %q of route %q: %w", key, route, err)
		}
		if len(vals) < 3 {
			continue // gone since (acked, cancelled)
		}
		st, _ := vals[0].(string)
		score, _ := vals[1].(int64)
		raw, _ := vals[2].(string)
		e, err := envelope.Decode([]byte(raw), id)
		if err != nil || (State(st) != StatePending && State(st) != StateInflight) {
			continue
		}
		if State(st) == StatePending {
			score = storeapi.RealScore(score)
		}
		out = append(out, storeapi.KeyMessage{Env: e, State: State(st), Score: score, Head: id == headID})
	}
	return out, nil
}

// getAnywhere runs get on every shard (one pipelined round trip) and returns the first
// shard that knows id and its reply; nil when none does. It is how a by-id lookup finds
// a delivered or cancelled message of an ordered key (its done entry is in its key's
// shard, which the id does not tell).
func (s *Store) getAnywhere(ctx context.Context, id string) (int, []any, error) {
	calls := make([]call, s.opt.Shards)
	for sh := range calls {
		calls[sh] = s.getCall(sh, id)
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return 0, nil, fmt.Errorf("scheduler: get %q: %w", id, err)
	}
	for sh, cmd := range cmds {
		vals, err := cmd.Slice()
		if err != nil || len(vals) == 0 {
			continue
		}
		if st, _ := vals[0].(string); st != "" {
			return sh, vals, nil
		}
	}
	return 0, nil, nil
}
