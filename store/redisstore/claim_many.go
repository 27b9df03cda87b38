package redisstore

import (
	"context"
	"fmt"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// ClaimMany is Claim for several shards in one pipelined round trip (per node on
// Redis Cluster): out[i] is what Claim(reqs[i]) would have returned. The scheduler's
// pumps send their claims through it together (scheduler/claims.go): at a full-speed
// drain every park wakes most of the 64 pumps at once, and a claim per pump would be a
// round trip of its own.
func (s *Store) ClaimMany(ctx context.Context, reqs []storeapi.ClaimRequest) []storeapi.ClaimResult {
	out := make([]storeapi.ClaimResult, len(reqs))
	calls := make([]call, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, r := range reqs {
		k, err := s.shardKeys(r.Shard)
		if err == nil && r.Limit <= 0 {
			err = fmt.Errorf("%w: claim limit %d", ErrInvalid, r.Limit)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		calls = append(calls, call{sc: s.claim, keys: claimKeys(k),
			args: s.claimArgs(OwnerValue(r.Instance, r.Token), r.UpTo, r.LeaseDeadline, r.Limit, r.MaxBytes, r.Alone, r.Idempotent, r.Now)})
		idx = append(idx, i)
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	shards := make([]int, len(cmds))
	for j := range cmds {
		shards[j] = reqs[idx[j]].Shard
	}
	envs := s.bucketEnvelopes(ctx, shards, cmds)
	for j, i := range idx {
		r := reqs[i]
		if j >= len(cmds) || cmds[j] == nil {
			out[i].Err = fmt.Errorf("scheduler: claim shard %d: %w", r.Shard, err)
			continue
		}
		out[i].Items, out[i].NextDue, out[i].Need, out[i].Replayed, out[i].Err = s.claimReply(ctx, cmds[j], envs[j], r.Shard, r.Instance, r.Token, r.UpTo)
	}
	return out
}
