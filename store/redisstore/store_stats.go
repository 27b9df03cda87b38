package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Dead letters (listing, purge) and per-shard statistics; by id: store_byid.go.

// ListDead returns up to limit dead letters over all shards, oldest first. An envelope
// that does not decode is shown as one holding only its id and a reason saying so.
func (s *Store) ListDead(ctx context.Context, limit int) ([]*envelope.Envelope, error) {
	if limit <= 0 {
		return nil, nil
	}
	ranges := make([]*redis.ZSliceCmd, len(s.keys))
	deadKey := func(sh int) string { return s.keys[sh].dead }
	if err := s.pipelined(ctx, "list dead letters", len(s.keys), deadKey, func(pipe redis.Pipeliner, sh int) {
		ranges[sh] = pipe.ZRangeWithScores(ctx, deadKey(sh), 0, int64(limit-1))
	}); err != nil {
		return nil, fmt.Errorf("scheduler: list dead letters: %w", redisErr(err))
	}
	type ref struct {
		shard int
		id    string
		at    float64
	}
	var refs []ref
	for sh, r := range ranges {
		for _, z := range r.Val() {
			refs = append(refs, ref{shard: sh, id: z.Member.(string), at: z.Score})
		}
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].at < refs[j].at })
	refs = refs[:min(limit, len(refs))]
	if len(refs) == 0 {
		return nil, nil
	}
	gets := make([]*redis.StringCmd, len(refs))
	msgKey := func(i int) string { return s.keys[refs[i].shard].msg }
	if err := s.pipelined(ctx, "list dead letters", len(refs), msgKey, func(pipe redis.Pipeliner, i int) {
		gets[i] = pipe.HGet(ctx, msgKey(i), refs[i].id)
	}); err != nil {
		return nil, fmt.Errorf("scheduler: list dead letters: %w", redisErr(err))
	}
	out := make([]*envelope.Envelope, 0, len(refs))
	for i, g := range gets {
		raw, err := g.Bytes()
		if err != nil {
			continue // requeued or purged since the range was read
		}
		e, err := envelope.Decode(raw, refs[i].id)
		if err != nil {
			e = &envelope.Envelope{ID: refs[i].id, Reason: "corrupt envelope in Redis: " + err.Error()}
		}
		out = append(out, e)
	}
	return out, nil
}

// PurgeDead deletes every dead letter and returns how many. Purged ids are not
// remembered in done: a replay of their ingress record would park them again.
func (s *Store) PurgeDead(ctx context.Context) (int64, error) {
	var total int64
	pending := make([]int, len(s.keys))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		calls := make([]call, len(pending))
		for i, sh := range pending {
			k := s.keys[sh]
			calls[i] = call{sc: s.purgeDead, keys: []string{k.dead, k.msg, k.counts}, args: []any{purgeBatch}}
		}
		cmds, err := s.evalPipelined(ctx, calls, false)
		var next []int
		for i, cmd := range cmds {
			res, rerr := cmd.Int64Slice()
			if rerr != nil || len(res) != 2 {
				continue
			}
			total += res[0]
			if res[1] == 1 {
				next = append(next, pending[i])
			}
		}
		if err != nil {
			return total, err
		}
		pending = next
	}
	return total, nil
}

// ShardStats reads every shard's counts in one pipelined round trip. The counts are
// read shard by shard, not as one snapshot.
func (s *Store) ShardStats(ctx context.Context) ([]ShardStat, error) {
	type cmds struct {
		due, inflight, dead *redis.IntCmd
		head, bucket        *redis.ZSliceCmd
		buckets             *redis.SliceCmd
		owner               *redis.StringCmd
		cold                coldStat
	}
	cs := make([]cmds, len(s.keys))
	// Every key of a shard is in its slot: the shard's commands go to one primary.
	if err := s.pipelined(ctx, "shard stats", len(s.keys), func(i int) string { return s.keys[i].due }, func(pipe redis.Pipeliner, i int) {
		k := s.keys[i]
		cs[i] = cmds{
			due: pipe.ZCard(ctx, k.due), inflight: pipe.ZCard(ctx, k.inflight), dead: pipe.ZCard(ctx, k.dead),
			head: pipe.ZRangeWithScores(ctx, k.due, 0, 0), owner: pipe.Get(ctx, k.owner),
			cold:    s.coldStatCmds(ctx, pipe, k),
			buckets: pipe.HMGet(ctx, k.bucketStats(), "p", "f"), bucket: pipe.ZRangeWithScores(ctx, k.bucketIndex(), 0, 0),
		}
	}); err != nil {
		return nil, fmt.Errorf("scheduler: shard stats: %w", redisErr(err))
	}
	out := make([]ShardStat, len(s.keys))
	for i, c := range cs {
		st := ShardStat{Shard: i, Pending: c.due.Val(), Inflight: c.inflight.Val(), Dead: c.dead.Val(), NextDue: -1}
		if h := c.head.Val(); len(h) > 0 {
			st.NextDue = int64(h[0].Score)
		}
		c.cold.add(&st)
		addBuckets(&st, c.buckets.Val(), c.bucket.Val())
		st.Owner, st.Token = parseOwner(c.owner.Val())
		out[i] = st
	}
	return out, nil
}

// parseOwner splits an owner value "holder|token" into the instance name and token. The
// scheduler holds leases as "instance#incarnation" (an 8-hex-digit tag random per
// process, so two processes never share a lease); the tag is cut off here, so owners
// read as the instance names that `members` lists.
func parseOwner(v string) (string, int64) {
	i := strings.LastIndexByte(v, '|')
	if i < 0 {
		return v, 0
	}
	tok, _ := strconv.ParseInt(v[i+1:], 10, 64)
	return storeapi.InstanceOf(v[:i]), tok
}
