package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// ReplaceEach stores envs, each replacing the message its id names on its route
// (x-delay-replace): see storeapi.Intake.ReplaceEach for the outcome of every state,
// lua/replace.lua and lua/includes/successor.lua for how. One script call per shard (more for
// huge batches), all in one pipelined round trip; the error contract is ParkEach's.
func (s *Store) ReplaceEach(ctx context.Context, envs []*envelope.Envelope) ([]storeapi.ReplaceResult, map[int]int64, error) {
	res := make([]storeapi.ReplaceResult, len(envs))
	for i := range res {
		res[i].Prior = StateNotStored
	}
	minDue := make(map[int]int64)
	if len(envs) == 0 {
		return res, minDue, nil
	}
	groups, shards, err := s.encodeGrouped(envs)
	if err != nil {
		return nil, nil, err
	}
	now, horizon := clock.NowMs(s.opt.Clock), s.coldHorizon()
	groups, shards, err = s.refuseElsewhere(ctx, envs, groups, shards, res)
	if err != nil {
		return res, minDue, err
	}
	var calls []call
	var chunks [][]encoded
	for gi, g := range groups {
		k := s.keys[shards[gi]]
		keys := []string{k.due, k.msg, k.inflight, k.dead, k.counts, k.ix, k.dn, k.nx}
		for _, ch := range chunk(g) {
			args := make([]any, 0, 2+5*len(ch))
			args = append(args, now, horizon)
			sc, ks, ordered := s.replace, withGuard(k, keys), s.onOrdered(envs, ch)
			if ordered {
				// ordered_replace: the keys' queues after ko and ki, the guard last.
				sc, ks = s.oReplace, append(keys[:len(keys):len(keys)], k.ko, k.ki)
			}
			for _, it := range ch {
				e := envs[it.idx]
				args = append(args, e.ID, e.DueAt, it.data, e.Route, fingerprint(e.ID))
				if ordered {
					ks = append(ks, s.queueOf(shards[gi], e))
				}
			}
			if ordered {
				ks = withGuard(k, ks)
			}
			calls = append(calls, call{sc: sc, keys: ks, args: args})
			chunks = append(chunks, ch)
		}
	}
	cmds, err := s.evalPipelined(ctx, calls, s.opt.MinReplicas > 0)
	for ci, cmd := range cmds {
		if cmd == nil || cmd.Err() != nil {
			continue
		}
		out, perr := cmd.StringSlice()
		if perr != nil || len(out) != len(chunks[ci]) {
			return res, minDue, fmt.Errorf("scheduler: replace: unexpected reply %v: %v", cmd.Val(), perr)
		}
		for j, it := range chunks[ci] {
			outcome, prior, _ := strings.Cut(out[j], ":")
			r := storeapi.ReplaceResult{Prior: State(prior), Outcome: storeapi.ReplaceOutcome(outcome)}
			res[it.idx] = r
			if r.Outcome == storeapi.ReplaceRefused || r.Prior == StateInflight {
				continue // nothing new pending now
			}
			due := envs[it.idx].DueAt
			if old, ok := minDue[it.shard]; !ok || due < old {
				minDue[it.shard] = due
			}
		}
	}
	return res, minDue, err
}

// onOrdered reports whether a message of ch is on a route with `order: key` (its
// replace runs as ordered_replace, which keeps the key bookkeeping of lua/includes/order.lua).
func (s *Store) onOrdered(envs []*envelope.Envelope, ch []encoded) bool {
	if len(s.ord) == 0 {
		return false
	}
	for _, it := range ch {
		if s.ord[envs[it.idx].Route] {
			return true
		}
	}
	return false
}

// refuseElsewhere takes out of groups the replaces on ordered routes whose id is
// stored (pending, in flight or dead) in another shard than the one the new version
// belongs to (its key's shard): the stored message is of another key, or of none, and
// a replace there would park a second copy. Each is refused with the state its id is
// in (docs/CONTRACT.md "Replace"). One pipelined round trip when the batch has such
// replaces, none otherwise.
func (s *Store) refuseElsewhere(ctx context.Context, envs []*envelope.Envelope, groups [][]encoded, shards []int, res []storeapi.ReplaceResult) ([][]encoded, []int, error) {
	var ids []string
	var at []encoded
	for _, g := range groups {
		for _, it := range g {
			if s.ord[envs[it.idx].Route] {
				ids, at = append(ids, envs[it.idx].ID), append(at, it)
			}
		}
	}
	if len(ids) == 0 {
		return groups, shards, nil
	}
	// One HEXISTS per id and shard other than the id's own: the k-th is id k / shards
	// in shard k % shards (the id's own shard queues nothing).
	cmds := make([][]*redis.BoolCmd, len(ids))
	for i := range ids {
		cmds[i] = make([]*redis.BoolCmd, s.opt.Shards)
	}
	n, key := len(ids)*s.opt.Shards, func(k int) string { return s.keys[k%s.opt.Shards].msg }
	if err := s.pipelined(ctx, "replace: locate messages", n, key, func(pipe redis.Pipeliner, k int) {
		if i, sh := k/s.opt.Shards, k%s.opt.Shards; sh != at[i].shard {
			cmds[i][sh] = pipe.HExists(ctx, key(k), ids[i])
		}
	}); err != nil {
		return nil, nil, fmt.Errorf("scheduler: replace: locate messages: %w", redisErr(err))
	}
	refused := map[int]bool{}
	for i, id := range ids {
		for sh, c := range cmds[i] {
			if c == nil || !c.Val() {
				continue
			}
			c := s.getCall(sh, id)
			vals, err := s.eval(ctx, c.sc, c.keys, c.args...).Slice()
			if err != nil || len(vals) == 0 {
				return nil, nil, fmt.Errorf("scheduler: replace: state of %q: %w", id, err)
			}
			st, _ := vals[0].(string)
			res[at[i].idx] = storeapi.ReplaceResult{Prior: State(st), Outcome: storeapi.ReplaceRefused}
			refused[at[i].idx] = true
			break
		}
	}
	if len(refused) == 0 {
		return groups, shards, nil
	}
	var ng [][]encoded
	var ns []int
	for gi, g := range groups {
		var keep []encoded
		for _, it := range g {
			if !refused[it.idx] {
				keep = append(keep, it)
			}
		}
		if len(keep) > 0 {
			ng, ns = append(ng, keep), append(ns, shards[gi])
		}
	}
	return ng, ns, nil
}
